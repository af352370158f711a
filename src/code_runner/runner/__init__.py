"""A task run from a validated spec to a verified patch and a complete record.

`preflight` checks everything that can be checked before anything is created (and
`project_env` is the DoD's environment, a missing interpreter refused); `rounds`
runs the round loop in a workspace, keeps the best state and decides the `Ending`;
`task_run` is the lifecycle around it (record, workspace, sandbox, export, apply, release)
and returns the run's `RunResult`; `gc` finds what dead runs left and ends it.
"""

from code_runner.runner.preflight import (
    DodCannotStart,
    Preflight,
    new_run_id,
    preflight,
    project_env,
)
from code_runner.runner.rounds import Ending
from code_runner.runner.task_run import TaskRun, run_task

__all__ = [
    "DodCannotStart",
    "Ending",
    "Preflight",
    "TaskRun",
    "new_run_id",
    "preflight",
    "project_env",
    "run_task",
]

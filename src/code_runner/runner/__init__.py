"""A task run from a validated spec to a verified patch and a complete record.

`preflight` checks everything that can be checked before anything is created; `task_run`
runs the rounds in a workspace, keeps the best patch and writes the result; `gc` finds what
dead runs left and ends it.
"""

from code_runner.runner.preflight import Preflight, new_run_id, preflight
from code_runner.runner.task_run import RunOutcome, TaskRun, run_task

__all__ = ["Preflight", "RunOutcome", "TaskRun", "new_run_id", "preflight", "run_task"]

"""The task contract: what a run is asked to do, validated before anything is created.

`spec` holds the `TaskSpec` model and its field rules, `env` its optional `env` section,
`loading` reads and validates a spec file (every problem at once), `paths` holds git's path
rules and the allowlist, and
`contract` the worker contract (the prompt's sections and the RESULT_STATUS block).
"""

from code_runner.task.env import DodEnv
from code_runner.task.loading import (
    MAX_SPEC_BYTES,
    load_spec,
    output_dir_problems,
    validate_spec_data,
)
from code_runner.task.spec import (
    MAX_RUN_TIMEOUT_S,
    DirtyWorktreePolicy,
    TaskSpec,
    spec_json_schema,
    spec_to_request,
)
from code_runner.verify.assertion import DefinitionOfDone

__all__ = [
    "MAX_RUN_TIMEOUT_S",
    "MAX_SPEC_BYTES",
    "DefinitionOfDone",
    "DirtyWorktreePolicy",
    "DodEnv",
    "TaskSpec",
    "load_spec",
    "output_dir_problems",
    "spec_json_schema",
    "spec_to_request",
    "validate_spec_data",
]

"""The agent's tools: read_file, write_file, edit_file, run_command, search_code.

`Toolbox` is what the runner hands an agent. `command_argv` / `search_argv` are the one
place an agent's process argv is built, and `Toolbox(wrap_argv=...)` the seam where the
OS sandbox wraps it.
"""

from code_runner.tools.commands import ArgvWrapper, command_argv, scrub_env, search_argv
from code_runner.tools.limits import ToolLimits
from code_runner.tools.toolbox import Toolbox

TOOL_NAMES: tuple[str, ...] = (
    "read_file",
    "write_file",
    "edit_file",
    "run_command",
    "search_code",
)

__all__ = [
    "TOOL_NAMES",
    "ArgvWrapper",
    "ToolLimits",
    "Toolbox",
    "command_argv",
    "scrub_env",
    "search_argv",
]

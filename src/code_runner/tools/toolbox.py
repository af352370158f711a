"""The agent's five tools behind one `ToolRunner`: validation, dispatch and events.

Every rule lives in the tools, not in the agent (see `files` and `commands`). This module
turns a model's call into a validated Python call and its outcome into a typed
`ToolResult`: unknown tool, bad arguments, a refused path and an unexpected OSError all
come back to the agent as errors it can act on, never as an exception in the runner.
Each call is two events: `tool_call` (arguments, long text cut) and `tool_result` (ok,
error code, first line of the reply, small scalar details such as `exit_code` or `rule`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from code_runner import proc
from code_runner.events import EventKind, EventSink
from code_runner.task.paths import Allowlist
from code_runner.tools.base import ToolErrorCode, ToolResult, ToolSpec
from code_runner.tools.commands import ArgvWrapper, CommandTools
from code_runner.tools.files import FileTools
from code_runner.tools.fsops import FsError
from code_runner.tools.limits import ToolLimits
from code_runner.tools.schema import ArgumentsError, ToolDef, tool_from_function, validate_arguments
from code_runner.tools.text import details, loggable, summary

DEFAULT_LIMITS = ToolLimits()
WRITING_TOOLS = frozenset({"write_file", "edit_file", "run_command"})


class Toolbox:
    """The tools one agent gets for one workspace. Implements `ToolRunner`."""

    def __init__(
        self,
        workspace_dir: Path,
        *,
        allowlist: Allowlist,
        source_dir: Path,
        env: Mapping[str, str],
        events: EventSink,
        limits: ToolLimits = DEFAULT_LIMITS,
        wrap_argv: ArgvWrapper | None = None,
        launch: proc.Launcher | None = None,
        deadline: float | None = None,
        after_call: Callable[[], None] | None = None,
        during_call: Callable[[], bool] | None = None,
    ) -> None:
        """`deadline` (a `time.monotonic()` value) is when the run's time is up: every
        command's timeout is clipped to the time left, and none starts after it.
        `after_call` runs after every call that may write (the run's disk budget): what it
        raises ends the round. `during_call` is asked while a command runs: True kills it
        (the disk budget, enforced within one command and then ended by `after_call`)."""
        workspace = Path(workspace_dir)
        self._events = events
        self._after_call = after_call
        files = FileTools(workspace, allowlist=allowlist, limits=limits)
        commands = CommandTools(
            workspace,
            source_dir=Path(source_dir),
            env=env,
            limits=limits,
            wrap_argv=wrap_argv,
            launch=launch,
            deadline=deadline,
            stop_when=during_call,
        )
        functions = (
            files.read_file,
            files.write_file,
            files.edit_file,
            commands.run_command,
            commands.search_code,
        )
        self._tools: dict[str, ToolDef] = {}
        for function in functions:
            tool = tool_from_function(function)
            self._tools[tool.name] = tool

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def call(self, name: str, args: Mapping[str, Any]) -> ToolResult:
        """Run one tool call; every failure comes back as a typed `ToolResult`."""
        self._events.emit(EventKind.TOOL_CALL, name=name, args=loggable(args))
        started = time.monotonic()
        result = self._dispatch(name, args)
        self._events.emit(
            EventKind.TOOL_RESULT,
            name=name,
            ok=result.ok,
            error=result.error.value if result.error else None,
            summary=summary(result.content),
            details=details(result.data),
            duration_s=round(time.monotonic() - started, 4),
        )
        if self._after_call is not None and name in WRITING_TOOLS:
            self._after_call()
        return result

    def _dispatch(self, name: str, args: object) -> ToolResult:
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return ToolResult.failure(
                ToolErrorCode.UNKNOWN_TOOL,
                f"there is no tool named {name!r}; the tools are: {', '.join(self._tools)}",
            )
        try:
            kwargs = validate_arguments(tool, args)
        except ArgumentsError as exc:
            return ToolResult.failure(ToolErrorCode.INVALID_ARGS, f"{name}: {exc}")
        try:
            return tool.function(**kwargs)
        except FsError as exc:
            return ToolResult.failure(exc.code, exc.message)
        except OSError as exc:
            detail = exc.strerror or str(exc)
            return ToolResult.failure(ToolErrorCode.IO_ERROR, f"{name}: {detail}")

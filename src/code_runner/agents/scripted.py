"""The `scripted` backend: replays a fixed list of tool calls, one list per round.

It is the built-in default (`code-runner demo`, most tests, benchmarks): deterministic,
offline, and it drives the very same tools a model would, so everything the runner
enforces is exercised for real. It never touches files itself.

Script format (JSON; YAML and TOML files are read too)::

    {
      "rounds": [
        {
          "calls": [
            {"tool": "read_file", "args": {"path": "calc.py"}},
            {"tool": "edit_file",
             "args": {"path": "calc.py", "start_line": 5, "end_line": 5,
                      "content": "    return a + b"}}
          ],
          "response": "optional text recorded as the agent's answer for this round"
        }
      ]
    }

Round N replays `rounds[N-1]`; a round past the end of the list does nothing and ends
with `no_action`. `tool` must be one of the tool names (read_file, write_file, edit_file,
run_command, search_code); `args` is passed as is, so a script can also make calls the
toolbox will refuse (that is how attack tests are written). A refused call does not stop
the round: the script goes on, and the toolbox records the error in the events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from code_runner.agents.base import AgentOutcome, AgentStop, RoundContext
from code_runner.errors import SpecError, UsageError
from code_runner.events import EventSink
from code_runner.problems import (
    anchored_path,
    describe_all,
    one_line,
    read_mapping_file,
    unknown,
)
from code_runner.tools import TOOL_NAMES
from code_runner.tools.base import ToolRunner

_FORMAT_HINT = (
    'a script is a JSON object {"rounds": [{"calls": [{"tool": NAME, "args": {...}}], '
    '"response": "optional text"}]} with tool names from: ' + ", ".join(TOOL_NAMES)
)


class ScriptCall(BaseModel):
    """One tool call: the tool's name and its arguments, passed unchanged to the toolbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tool")
    @classmethod
    def _known_tool(cls, value: str) -> str:
        if value not in TOOL_NAMES:
            raise ValueError(
                unknown(
                    "tool", value, TOOL_NAMES, otherwise=f"the tools are: {', '.join(TOOL_NAMES)}"
                )
            )
        return value


class ScriptRound(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    calls: list[ScriptCall] = Field(default_factory=list)
    response: str = ""


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: list[ScriptRound]


MAX_SCRIPT_BYTES = 8 * 1024 * 1024


def load_script(path: Path) -> Script:
    """Read and validate a script file; SpecError with every problem and the format."""
    fix = f"correct the script; {_FORMAT_HINT}."
    data, problems = read_mapping_file(
        path,
        what="a script",
        max_bytes=MAX_SCRIPT_BYTES,
        too_big_hint="split the work into smaller writes",
        empty_hint=_FORMAT_HINT,
    )
    source = f"{path} (the scripted backend's script)"
    if data is None:
        raise SpecError(source, problems, fix=fix)
    try:
        script = Script.model_validate(data)
    except ValidationError as exc:
        problems += describe_all(exc, model_at=_model_at)
        script = None
    if problems or script is None:
        raise SpecError(source, [one_line(p) for p in problems], fix=fix)
    return script


def _model_at(parent: tuple[int | str, ...]) -> type[BaseModel]:
    """The model whose fields live at `parent`: rounds.N, rounds.N.calls.M or the script."""
    depth = sum(isinstance(part, str) for part in parent)
    return (Script, ScriptRound, ScriptCall)[min(depth, 2)]


class ScriptedAgent:
    """An agent that makes the calls its script lists for each round, in order."""

    name = "scripted"

    def __init__(self, script: Script, *, source: str = "") -> None:
        self.script = script
        self.source = source  # where the script came from, for messages

    def run_round(self, ctx: RoundContext, tools: ToolRunner, events: EventSink) -> AgentOutcome:
        index = ctx.round_index - 1
        if not 0 <= index < len(self.script.rounds):
            return AgentOutcome(AgentStop.NO_ACTION, response="", turns=0)
        round_ = self.script.rounds[index]
        for call in round_.calls:
            tools.call(call.tool, call.args)
        return AgentOutcome(AgentStop.DONE, response=round_.response, turns=1)


def from_arg(arg: str | None, *, base_dir: Path, **_context: object) -> ScriptedAgent:
    """The registry's factory: `scripted:PATH`, PATH relative to `base_dir`."""
    if not arg:
        raise UsageError(
            "the scripted backend needs a script file: `scripted:PATH`.",
            fix="set backend to e.g. `scripted:fix.json` (a path relative to the spec's "
            f"directory); {_FORMAT_HINT}.",
        )
    try:
        path = anchored_path(arg, base_dir)
    except ValueError as exc:
        raise UsageError(
            f"the scripted backend's script path {exc}.",
            fix="set backend to `scripted:PATH` with a usable path.",
        ) from None
    return ScriptedAgent(load_script(path), source=str(path))

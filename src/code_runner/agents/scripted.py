"""The `scripted` backend: replays a fixed list of tool calls, one list per round.

It is the built-in default (`code-runner demo`, most tests, benchmarks): deterministic,
offline, and it drives the very same tools a model would, so everything the runner
enforces is exercised for real. It never touches files itself.

Script format (JSON)::

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

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from code_runner.agents.base import AgentOutcome, AgentStop, RoundContext
from code_runner.errors import UsageError
from code_runner.events import EventSink
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
            raise ValueError(f"unknown tool {value!r}; the tools are: {', '.join(TOOL_NAMES)}")
        return value


class ScriptRound(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    calls: list[ScriptCall] = Field(default_factory=list)
    response: str = ""


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: list[ScriptRound]


def load_script(path: Path) -> Script:
    """Read and validate a script file; UsageError with every problem and the fix."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(
            f"scripted backend: script file {path} does not exist.",
            fix="pass an existing file as `scripted:PATH` (relative to the spec's directory).",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"scripted backend: cannot read script file {path}: {exc}.",
            fix="check the file's permissions and that it is UTF-8 JSON.",
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"scripted backend: {path} is not valid JSON (line {exc.lineno}, column "
            f"{exc.colno}: {exc.msg}).",
            fix=f"correct the JSON; {_FORMAT_HINT}.",
        ) from None
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors(include_url=False))
        raise UsageError(
            f"scripted backend: {path} is not a valid script: {problems}.",
            fix=f"correct the fields named above; {_FORMAT_HINT}.",
        ) from None


def _describe(error: Any) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "the top level"
    if error["type"] == "extra_forbidden":
        return f"unknown field `{where}`"
    if error["type"] == "missing":
        return f"missing field `{where}`"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"`{where}`: {message}"


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
    path = Path(arg).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    return ScriptedAgent(load_script(path), source=str(path))

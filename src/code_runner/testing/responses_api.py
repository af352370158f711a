"""The OpenAI Responses API on the wire, streamed, for `ScriptedServer` (Codex CLI speaks it).

The shape (verified against `codex exec` 0.171): `response.created`; per output item
`response.output_item.added`, text deltas for a message, `response.output_item.done`;
then `response.completed` with the response id and usage. Codex fails a turn whose
stream ends without `response.completed`, so `Reply(turn, cut_after=len - 1)` scripts
"the final event never came".

A scripted shell command is sent to whichever shell tool the request advertises
(`exec_command`, `shell_command`, `shell`), so a script says what to run, not which tool
name a CLI version happens to use. `write_file` and `replace_in_file` are shell commands
too: they work with every Codex version and go through its own sandbox like a model's.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from code_runner.testing.scripted_server import OpenAIStyle, SseEvent

DEFAULT_MODEL = "scripted-model"
# shell tools Codex has advertised, in order of preference, with how each takes a command
_SHELL_TOOLS = ("exec_command", "shell_command", "shell")


@dataclass(frozen=True)
class Message:
    """Assistant text (the final answer of a Codex turn when it is the last item)."""

    text: str


@dataclass(frozen=True)
class Shell:
    """Run `command` with the CLI's shell tool, whatever it is called."""

    command: str


@dataclass(frozen=True)
class FunctionCall:
    """A raw function call; `arguments` is sent as is when a string."""

    name: str
    arguments: str | Mapping[str, Any] = field(default_factory=dict)


Item = Message | Shell | FunctionCall


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 100
    output_tokens: int = 20

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + self.output_tokens,
        }


@dataclass(frozen=True)
class Turn:
    """One model response: its output items, in order."""

    items: Sequence[Item]
    usage: Usage = field(default_factory=Usage)


def say(text: str) -> Turn:
    return Turn([Message(text)])


def shell(command: str) -> Turn:
    return Turn([Shell(command)])


def write_file(path: str, content: str) -> Turn:
    """A shell command that writes `content` to `path` (relative to the CLI's cwd)."""
    return shell(f"printf '%s' {shlex.quote(content)} > {shlex.quote(path)}")


def replace_in_file(path: str, old: str, new: str) -> Turn:
    """A shell command that replaces the first `old` with `new` in `path`, or fails."""
    program = (
        "import pathlib,sys\n"
        f"p=pathlib.Path({path!r}); t=p.read_text()\n"
        f"sys.exit('not found') if {old!r} not in t else p.write_text(t.replace({old!r},{new!r},1))"
    )
    return shell(f"python3 -c {shlex.quote(program)}")


def advertised_tools(request: Mapping[str, Any]) -> list[str]:
    """Names of the function tools a request offers (namespaced ones excluded)."""
    tools = request.get("tools")
    if not isinstance(tools, list):
        return []
    return [str(t["name"]) for t in tools if isinstance(t, Mapping) and "name" in t]


def shell_call(command: str, request: Mapping[str, Any]) -> FunctionCall:
    """`command` as a call of the shell tool `request` advertises."""
    names = advertised_tools(request)
    for name in _SHELL_TOOLS:
        if name not in names:
            continue
        if name == "exec_command":
            return FunctionCall(name, {"cmd": command})
        if name == "shell_command":
            return FunctionCall(name, {"command": command})
        return FunctionCall(name, {"command": ["bash", "-lc", command]})
    raise ValueError(
        f"the request advertises no shell tool ({', '.join(names) or 'no tools'}); "
        f"expected one of {', '.join(_SHELL_TOOLS)}"
    )


class ResponsesApi(OpenAIStyle):
    """The `WireProtocol` of the Responses API (`POST /v1/responses`, streamed)."""

    name = "responses"
    stream_path = "/v1/responses"
    error_codes: Mapping[int, str] = {401: "invalid_api_key", 429: "rate_limit_exceeded"}

    def __init__(self, models: Sequence[str] = (DEFAULT_MODEL,)) -> None:
        super().__init__(models)

    def render(self, turn: Any, request: Mapping[str, Any]) -> list[SseEvent]:
        if not isinstance(turn, Turn):
            raise TypeError(f"the Responses API cannot render {type(turn).__name__}")
        self._counter += 1
        ident = f"resp_scripted_{self._counter}"
        model = str(request.get("model") or DEFAULT_MODEL)
        shell_of = {"status": "in_progress", "model": model, "id": ident, "object": "response"}
        events = [_event("response.created", response=shell_of)]
        for index, item in enumerate(turn.items):
            events += self._item(index, item, request)
        done = {**shell_of, "status": "completed", "usage": turn.usage.to_dict(), "output": []}
        events.append(_event("response.completed", response=done))
        return events

    def _item(self, index: int, item: Item, request: Mapping[str, Any]) -> list[SseEvent]:
        ident = f"item_{self._counter}_{index}"
        if isinstance(item, Message):
            content = [{"type": "output_text", "text": item.text, "annotations": []}]
            full = {"type": "message", "id": ident, "role": "assistant", "content": content}
            return [
                _event(
                    "response.output_item.added", output_index=index, item={**full, "content": []}
                ),
                _event(
                    "response.output_text.delta",
                    item_id=ident,
                    output_index=index,
                    content_index=0,
                    delta=item.text,
                ),
                _event("response.output_item.done", output_index=index, item=full),
            ]
        call = shell_call(item.command, request) if isinstance(item, Shell) else item
        arguments = (
            call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        )
        full = {
            "type": "function_call",
            "id": ident,
            "call_id": f"call_{self._counter}_{index}",
            "name": call.name,
            "arguments": arguments,
            "status": "completed",
        }
        return [
            _event(
                "response.output_item.added", output_index=index, item={**full, "arguments": ""}
            ),
            _event("response.output_item.done", output_index=index, item=full),
        ]


def _event(kind: str, **payload: Any) -> SseEvent:
    return SseEvent(json.dumps({"type": kind, **payload}, separators=(",", ":")), event=kind)


def tool_outputs(request: Mapping[str, Any]) -> list[str]:
    """The outputs of earlier tool calls a request sends back (what the CLI's tools did)."""
    found: list[str] = []
    items = request.get("input")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, Mapping) and item.get("type") == "function_call_output":
            output = item.get("output")
            found.append(output if isinstance(output, str) else json.dumps(output))
    return found


def user_text(request: Mapping[str, Any]) -> str:
    """Every user-role input text of a request, joined (the prompt the CLI was given)."""
    parts: list[str] = []
    items = request.get("input")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping) or item.get("role") != "user":
            continue
        for block in item.get("content") or []:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
    return "\n".join(parts)


__all__ = [
    "DEFAULT_MODEL",
    "FunctionCall",
    "Message",
    "ResponsesApi",
    "Shell",
    "Turn",
    "Usage",
    "advertised_tools",
    "replace_in_file",
    "say",
    "shell",
    "shell_call",
    "tool_outputs",
    "user_text",
    "write_file",
]

"""The Anthropic Messages API on the wire, streamed, for `ScriptedServer` (Claude Code speaks it).

The shape (verified against `claude -p` 2.1.197): every SSE event has an `event:` line
(Claude Code ignores events without one): `message_start`; per content block
`content_block_start`, its deltas (`text_delta`, or `input_json_delta` for a tool call's
input), `content_block_stop`; `message_delta` with the stop reason and usage;
`message_stop`. Claude Code requires a file to be Read before it is Edited (or rewritten
with Write), so `edit_file` and `write_file` return two turns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from code_runner.testing.scripted_server import SseEvent

DEFAULT_MODEL = "scripted-model"


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolUse:
    """A tool call. `input` is sent as is when a string (so it can be malformed)."""

    name: str
    input: str | Mapping[str, Any] = field(default_factory=dict)


Block = Text | ToolUse


@dataclass(frozen=True)
class Turn:
    """One model message. `stop_reason` defaults to `tool_use` with a call, else `end_turn`."""

    blocks: Sequence[Block]
    stop_reason: str | None = None
    input_tokens: int = 100
    output_tokens: int = 20
    json_chunk_chars: int = 0  # 0: a tool call's input in one delta


def say(text: str) -> Turn:
    return Turn([Text(text)])


def tool(name: str, **arguments: Any) -> Turn:
    return Turn([ToolUse(name, arguments)])


def bash(command: str) -> Turn:
    return tool("Bash", command=command, description="scripted command")


def read_file(path: str) -> Turn:
    return tool("Read", file_path=path)


def edit_file(path: str, old: str, new: str) -> list[Turn]:
    """Read then Edit: Claude Code refuses to edit a file it has not read."""
    return [read_file(path), tool("Edit", file_path=path, old_string=old, new_string=new)]


def write_file(path: str, content: str) -> list[Turn]:
    """Read then Write (the Read of a new file fails harmlessly)."""
    return [read_file(path), tool("Write", file_path=path, content=content)]


def _pieces(text: str, size: int) -> list[str]:
    if size <= 0 or len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


class AnthropicMessages:
    """The `WireProtocol` of the Messages API (`POST /v1/messages`, streamed)."""

    name = "anthropic-messages"
    base_path = ""  # ANTHROPIC_BASE_URL is the origin; the client adds /v1/messages
    stream_path = "/v1/messages"

    def __init__(self) -> None:
        self._counter = 0

    def static_routes(self) -> Mapping[tuple[str, str], tuple[int, Any]]:
        return {("GET", "/"): (200, {"ok": True})}

    def error_body(self, status: int, message: str) -> Any:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def render(self, turn: Any, request: Mapping[str, Any]) -> list[SseEvent]:
        if not isinstance(turn, Turn):
            raise TypeError(f"the Messages API cannot render {type(turn).__name__}")
        self._counter += 1
        model = str(request.get("model") or DEFAULT_MODEL)
        message: dict[str, Any] = {
            "id": f"msg_scripted_{self._counter}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1},
        }
        events = [_event("message_start", message=message)]
        for index, block in enumerate(turn.blocks):
            events += self._block(index, block, turn.json_chunk_chars)
        calls = any(isinstance(b, ToolUse) for b in turn.blocks)
        stop = turn.stop_reason or ("tool_use" if calls else "end_turn")
        events.append(
            _event(
                "message_delta",
                delta={"stop_reason": stop, "stop_sequence": None},
                usage={"output_tokens": turn.output_tokens},
            )
        )
        events.append(_event("message_stop"))
        return events

    def _block(self, index: int, block: Block, chunk_chars: int) -> list[SseEvent]:
        if isinstance(block, Text):
            return [
                _event(
                    "content_block_start", index=index, content_block={"type": "text", "text": ""}
                ),
                _event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "text_delta", "text": block.text},
                ),
                _event("content_block_stop", index=index),
            ]
        ident = f"toolu_scripted_{self._counter}_{index}"
        text = block.input if isinstance(block.input, str) else json.dumps(dict(block.input))
        start = {"type": "tool_use", "id": ident, "name": block.name, "input": {}}
        events = [_event("content_block_start", index=index, content_block=start)]
        for piece in _pieces(text, chunk_chars):
            events.append(
                _event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
            )
        events.append(_event("content_block_stop", index=index))
        return events


def _event(kind: str, **payload: Any) -> SseEvent:
    return SseEvent(json.dumps({"type": kind, **payload}, separators=(",", ":")), event=kind)


def tool_results(request: Mapping[str, Any]) -> list[str]:
    """The results of earlier tool calls a request sends back (what the CLI's tools did)."""
    found: list[str] = []
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, Mapping) or block.get("type") != "tool_result":
                continue
            value = block.get("content")
            if isinstance(value, list):
                value = "".join(str(p.get("text", "")) for p in value if isinstance(p, Mapping))
            found.append(str(value))
    return found


def user_text(request: Mapping[str, Any]) -> str:
    """The text of the first user message (the prompt the CLI was given, with its preamble)."""
    for message in request.get("messages") or []:
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(
                str(b.get("text", "")) for b in content or [] if isinstance(b, Mapping)
            )
    return ""


__all__ = [
    "DEFAULT_MODEL",
    "AnthropicMessages",
    "Text",
    "ToolUse",
    "Turn",
    "bash",
    "edit_file",
    "read_file",
    "say",
    "tool",
    "tool_results",
    "user_text",
    "write_file",
]

"""Joining the chunks of one streamed Chat Completions answer into a `ModelTurn`.

`Accumulator.add` checks each chunk's shape as it joins it: unknown fields are fine, a known
field of the wrong type is a `ChunkShapeError` (the client words it as a malformed stream).
Tool-call deltas are joined by `index`; usage comes from whichever chunk carries it.

A chunk is what `json.loads` made of a data line, so a JSON object is a `dict` and an array
a `list`: the checks test those types directly (an ABC check such as `Mapping` costs several
times more, and runs a dozen times per chunk)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from code_runner.agents.model.stream_guard import ChunkShapeError
from code_runner.agents.model.transcript import ModelTurn, ToolCallData, Usage


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class Accumulator:
    """Joins the deltas of one streamed answer."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.chunks = 0
        self.model = ""

    def add(self, chunk: object) -> None:
        """Join one chunk; ChunkShapeError if it is not shaped like a Chat Completions chunk
        (unknown fields are fine, a known field of the wrong type is not)."""
        self.chunks += 1
        if not isinstance(chunk, dict):
            raise ChunkShapeError(f"a chunk is a JSON {_json_type(chunk)}, not an object", chunk)
        self.model = self.model or _text(chunk, "model", chunk)
        usage = _field(chunk, "usage", dict, chunk)
        if usage is not None:
            self.usage = Usage(
                _count(usage, "prompt_tokens", chunk), _count(usage, "completion_tokens", chunk)
            )
        for choice in _field(chunk, "choices", list, chunk) or []:
            if not isinstance(choice, dict):
                raise ChunkShapeError("a choice is not an object", chunk)
            if choice.get("index") not in (0, None):
                continue
            delta = _field(choice, "delta", dict, chunk) or {}
            content = _text(delta, "content", chunk)
            if content:
                self.content.append(content)
            for position, tool in enumerate(_field(delta, "tool_calls", list, chunk) or []):
                if not isinstance(tool, dict):
                    raise ChunkShapeError("a tool call is not an object", chunk)
                self._add_call(position, tool, chunk)
            finish = _text(choice, "finish_reason", chunk)
            if finish:
                self.finish_reason = finish

    def _add_call(self, position: int, tool: Mapping[str, Any], chunk: object) -> None:
        index = tool.get("index")
        key = index if isinstance(index, int) and not isinstance(index, bool) else position
        call = self.calls.setdefault(key, _Call())
        call.id = call.id or _text(tool, "id", chunk)
        function = _field(tool, "function", dict, chunk) or {}
        name = _text(function, "name", chunk)
        if name and name != call.name:
            call.name += name
        arguments = _text(function, "arguments", chunk)
        if arguments:
            call.arguments.append(arguments)

    def turn(self, duration_s: float, ttft_s: float | None) -> ModelTurn:
        calls = tuple(
            ToolCallData(call.id, call.name, "".join(call.arguments))
            for _, call in sorted(self.calls.items())
        )
        return ModelTurn(
            content="".join(self.content),
            tool_calls=calls,
            finish_reason=self.finish_reason or "",
            usage=self.usage,
            chunks=self.chunks,
            duration_s=duration_s,
            ttft_s=ttft_s,
            model=self.model,
        )


def _field(data: Mapping[str, Any], key: str, kind: type, chunk: object) -> Any:
    """`data[key]` if it is a `kind` (or absent/null: None); else ChunkShapeError."""
    value = data.get(key)
    if value is None or isinstance(value, kind):
        return value
    raise ChunkShapeError(f"{key} is a JSON {_json_type(value)}", chunk)


def _text(data: Mapping[str, Any], key: str, chunk: object) -> str:
    return str(_field(data, key, str, chunk) or "")


def _count(usage: Mapping[str, Any], key: str, chunk: object) -> int:
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise ChunkShapeError(f"usage.{key} is {value!r}, not a token count", chunk)


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    return "number"


__all__ = ["Accumulator"]

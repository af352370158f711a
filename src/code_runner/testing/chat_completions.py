"""OpenAI Chat Completions on the wire, streamed, for `ScriptedServer`.

The shape (verified against the official SDK): a first chunk with the role; content
deltas; per tool call a header chunk (`index`, `id`, `type`, `function.name`, empty
arguments) and then argument fragments under the same `index`; a chunk with
`finish_reason`; when the request asked for it (`stream_options.include_usage`) a usage
chunk with `choices: []`; then `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from code_runner.testing.scripted_server import OpenAIStyle, SseEvent

DEFAULT_MODEL = "scripted-model"


@dataclass(frozen=True)
class ToolCall:
    """One tool call; `arguments` is sent as is when a string (so it can be malformed)."""

    name: str
    arguments: str | Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 100
    completion_tokens: int = 20

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass(frozen=True)
class Turn:
    """One model turn. `finish_reason` defaults to `tool_calls` when there are calls, else
    `stop`. `argument_chunk_chars` / `content_chunk_chars` split the text into fragments of
    that many characters (1 = one chunk per character). `usage=None` sends no usage chunk."""

    content: str = ""
    tool_calls: Sequence[ToolCall] = ()
    finish_reason: str | None = None
    usage: Usage | None = field(default_factory=Usage)
    argument_chunk_chars: int = 0  # 0: one fragment per call
    content_chunk_chars: int = 0
    model: str = DEFAULT_MODEL


def _pieces(text: str, size: int) -> list[str]:
    if size <= 0 or len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


class ChatCompletions(OpenAIStyle):
    """The `WireProtocol` of Chat Completions."""

    name = "chat-completions"
    stream_path = "/v1/chat/completions"
    error_types: Mapping[int, str] = {429: "rate_limit_error"}

    def __init__(self, models: Sequence[str] = (DEFAULT_MODEL,)) -> None:
        super().__init__(models)

    def render(self, turn: Any, request: Mapping[str, Any]) -> list[SseEvent]:
        if not isinstance(turn, Turn):
            raise TypeError(f"chat completions cannot render {type(turn).__name__}")
        self._counter += 1
        ident = f"chatcmpl-scripted-{self._counter}"
        model = str(request.get("model") or turn.model)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> SseEvent:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return _event(ident, model, [choice])

        events = [chunk({"role": "assistant", "content": ""})]
        if turn.content:
            events += [
                chunk({"content": p}) for p in _pieces(turn.content, turn.content_chunk_chars)
            ]
        for index, tool in enumerate(turn.tool_calls):
            header = {
                "index": index,
                "id": tool.id or f"call_{self._counter}_{index}",
                "type": "function",
                "function": {"name": tool.name, "arguments": ""},
            }
            events.append(chunk({"tool_calls": [header]}))
            for piece in _pieces(tool.arguments_text, turn.argument_chunk_chars):
                events.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        finish = turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop")
        events.append(chunk({}, finish))
        options = request.get("stream_options")
        wants_usage = isinstance(options, Mapping) and options.get("include_usage")
        if turn.usage is not None and wants_usage:
            events.append(_event(ident, model, [], usage=turn.usage.to_dict()))
        events.append(SseEvent("[DONE]"))
        return events


def _event(ident: str, model: str, choices: list[Any], **extra: Any) -> SseEvent:
    payload = {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": 1_767_225_600,
        "model": model,
        "choices": choices,
        **extra,
    }
    return SseEvent(json.dumps(payload, separators=(",", ":")))


__all__ = ["DEFAULT_MODEL", "ChatCompletions", "ToolCall", "Turn", "Usage", "call"]

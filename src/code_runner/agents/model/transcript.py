"""Model exchanges as values, and the transcript that records every one of them.

`{task_id}.transcript.jsonl` holds one JSON object per line, appended as it happens:

    session   backend, settings (names of key variables, never values), budget limits
    request   round, turn, attempt, the request body; its `messages` are those added since
              the previous request, which it extends (`messages_from`: how many came
              before); a request that does not extend the previous one (a round's first)
              has them all. `request_bodies` puts each whole body back together.
    response  round, turn, attempt, content, tool calls (raw argument text), finish
              reason, usage, chunks, duration_s, ttft_s
    error     round, turn, attempt, failure, status, message, retry_in_s (None: gave up),
              and for a malformed stream `evidence`: the offending bytes (at most 1 KiB)
    stop      round, stop, budget, turns, error, usage so far

A `Recording` reads one back for the replay backend: for each round, the outcome of each
model call (the last attempt's response, or the error it ended with) and how the round
stopped. Timestamps are the only fields a replay does not reproduce.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from code_runner import files
from code_runner.clock import utc_now
from code_runner.errors import CodeRunnerError, RecordError

TRANSCRIPT_VERSION = 2  # 2: a request's messages are those added since the previous request


class FailureKind(StrEnum):
    TIMEOUT = "timeout"  # no byte within the request timeout, or the request took too long
    CONNECTION = "connection"  # refused, reset, DNS, TLS
    HTTP_STATUS = "http_status"  # the server answered with an error status
    STREAM_INCOMPLETE = "stream_incomplete"  # ended without a terminal chunk, or empty
    STREAM_ERROR = "stream_error"  # an error event inside the stream
    STREAM_MALFORMED = "stream_malformed"  # not JSON, not UTF-8, not SSE, odd chunk, huge line
    DEADLINE = "deadline"  # a wall-clock budget ran out during the call
    RESPONSE_TOO_LARGE = "response_too_large"  # one turn's answer passed max_response_bytes
    REPLAY = "replay"  # the recording has no answer for this call


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ToolCallData:
    id: str
    name: str
    arguments: str  # the raw text the model sent; parsed (and repaired) by the loop


@dataclass(frozen=True)
class ModelTurn:
    """One answered model call."""

    content: str
    tool_calls: tuple[ToolCallData, ...]
    finish_reason: str
    usage: Usage | None  # None: the provider reported none
    chunks: int = 0
    duration_s: float = 0.0
    ttft_s: float | None = None  # time to the first chunk
    model: str = ""

    def to_record(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ],
            "finish_reason": self.finish_reason,
            "usage": self.usage.to_dict() if self.usage else None,
            "chunks": self.chunks,
            "duration_s": round(self.duration_s, 4),
            "ttft_s": None if self.ttft_s is None else round(self.ttft_s, 4),
            "model": self.model,
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> ModelTurn:
        usage = data.get("usage")
        return cls(
            content=str(data.get("content") or ""),
            tool_calls=tuple(
                ToolCallData(str(c["id"]), str(c["name"]), str(c["arguments"]))
                for c in data.get("tool_calls") or []
            ),
            finish_reason=str(data.get("finish_reason") or ""),
            usage=Usage(int(usage["prompt_tokens"]), int(usage["completion_tokens"]))
            if isinstance(usage, Mapping)
            else None,
            chunks=int(data.get("chunks") or 0),
            duration_s=float(data.get("duration_s") or 0.0),
            model=str(data.get("model") or ""),
        )

    def assistant_message(self) -> dict[str, Any]:
        """The turn as the next request's history shows it."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return message


class ModelError(CodeRunnerError):
    """A model call that failed for good (after the retries it was allowed)."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        status: int | None = None,
        attempts: int = 1,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, fix=fix)
        self.kind = kind
        self.status = status
        self.attempts = attempts

    def to_record(self) -> dict[str, Any]:
        return {
            "failure": self.kind.value,
            "status": self.status,
            "message": self.message,
            "fix": self.fix,
            "attempts": self.attempts,
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> ModelError:
        return cls(
            FailureKind(str(data["failure"])),
            str(data["message"]),
            status=data.get("status"),
            attempts=int(data.get("attempts") or 1),
            fix=data.get("fix"),
        )


class ModelClient(Protocol):
    """Answers one model call: the live API client, or a recording being replayed."""

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        deadline: float | None,
        tag: Mapping[str, int],
    ) -> ModelTurn: ...


class Transcript:
    """Appends one JSON line per exchange, each written as it happens through one open
    descriptor; never rewrites (a crash, a kill included, leaves every line before).

    A request line holds only the messages added since the previous request: the history a
    conversation re-sends every turn is written once, so a turn's line costs what the turn
    added, not what the round has said so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._log = files.JsonlLog(path)
        self._seq = 0
        self._started = time.monotonic()
        self._sent: list[Any] = []  # the previous request's messages

    def close(self) -> None:
        """Let go of the file (also done when the transcript is dropped); a later
        `write` opens it again."""
        self._log.close()

    def write(self, kind: str, /, **data: Any) -> None:
        if kind == "request":
            data = self._added(data)
        self._seq += 1
        self._log.append(
            {
                **data,
                "seq": self._seq,
                "ts": utc_now(),
                "elapsed_s": round(time.monotonic() - self._started, 4),
                "kind": kind,
            },
        )

    def _added(self, data: dict[str, Any]) -> dict[str, Any]:
        """A request with only the messages added since the previous one it extends."""
        body = data.get("body")
        messages = body.get("messages") if isinstance(body, Mapping) else None
        if not isinstance(body, Mapping) or not isinstance(messages, list):
            return data
        sent, self._sent = self._sent, list(messages)
        if not sent or len(sent) > len(messages) or messages[: len(sent)] != sent:
            return data
        return {
            **data,
            "body": {**body, "messages": messages[len(sent) :], "messages_from": len(sent)},
        }


def request_bodies(path: Path) -> list[dict[str, Any]]:
    """Every request of a transcript, whole: the bodies as they were sent, in order."""
    bodies: list[dict[str, Any]] = []
    sent: list[Any] = []
    for entry in files.read_jsonl(path):
        body = entry.get("body") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or entry.get("kind") != "request":
            continue
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise RecordError(
                f"{path}: request {entry.get('seq')} has no messages.",
                fix="read a transcript written by code-runner, unmodified.",
            )
        whole = dict(body)
        start = whole.pop("messages_from", 0)
        # a JSON true/false is a Python bool, an int subclass: never a count of messages
        if type(start) is not int or not 0 <= start <= len(sent):
            raise RecordError(
                f"{path}: request {entry.get('seq')} extends {start!r} messages, but the "
                f"request before it had {len(sent)}.",
                fix="read a transcript written by code-runner, unmodified.",
            )
        whole["messages"] = sent = [*sent[:start], *body["messages"]]
        bodies.append(whole)
    return bodies


@dataclass
class RecordedRound:
    calls: list[ModelTurn | ModelError] = field(default_factory=list)
    stop: Mapping[str, Any] | None = None


@dataclass
class Recording:
    """A transcript read back: the session line and, per round, its calls and its stop."""

    path: Path
    session: Mapping[str, Any]
    rounds: dict[int, RecordedRound]

    def round(self, index: int) -> RecordedRound:
        return self.rounds.get(index, RecordedRound())


def read_recording(path: Path) -> Recording:
    """Parse a transcript; RecordError if it is not one."""
    if not path.is_file():
        raise RecordError(
            f"no transcript at {path}.",
            fix="give the output dir of a run made by a model backend (it holds "
            "TASK.transcript.jsonl), or the transcript file itself.",
        )
    entries = [e for e in files.read_jsonl(path) if isinstance(e, dict)]
    sessions = [e for e in entries if isinstance(e, dict) and e.get("kind") == "session"]
    if not sessions:
        raise RecordError(
            f"{path} is not a transcript (it has no session line).",
            fix="give a TASK.transcript.jsonl written by code-runner.",
        )
    rounds: dict[int, RecordedRound] = {}
    for number, entry in enumerate(entries, 1):
        kind = entry.get("kind")
        try:
            current = rounds.setdefault(int(entry.get("round", 0)), RecordedRound())
            if kind == "response":
                current.calls.append(ModelTurn.from_record(entry))
            elif kind == "error" and entry.get("retry_in_s") is None:
                current.calls.append(ModelError.from_record(entry))
            elif kind == "stop":
                current.stop = entry
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(
                f"{path}: entry {number} ({kind}) is not a valid transcript line: {exc!r}.",
                fix="replay an unmodified transcript written by code-runner.",
            ) from None
    return Recording(path=path, session=sessions[0], rounds=rounds)


__all__ = [
    "TRANSCRIPT_VERSION",
    "FailureKind",
    "ModelClient",
    "ModelError",
    "ModelTurn",
    "Recording",
    "ToolCallData",
    "Transcript",
    "Usage",
    "read_recording",
    "request_bodies",
]

"""A guard under the SDK's SSE decoder: it sees every raw byte of a streamed answer.

The `openai` SDK decodes SSE without a line or time limit and lets whatever a bad body
causes escape from its iterator (`json.JSONDecodeError`, `UnicodeDecodeError`). The guard
wraps the response's byte iterator so that

- an answer larger than `max_response_bytes` ends the stream (`ResponseTooLarge`), however
  its lines are cut, before the turn and its transcript line can grow without bound;
- a line longer than `max_line_bytes` ends the stream (`MalformedStream`) before it can
  fill memory;
- an answer still arriving after `limit_s` ends it (`StreamTooLong`), even when bytes keep
  trickling in (an SSE comment every second never makes the SDK yield a chunk, so a check
  between chunks would never run);
- the first bytes of the body and of the current line are kept, bounded, as evidence for
  the transcript;
- at `[DONE]` the rest of the body (its end-of-body marker) is read before the SDK closes
  the response, so the connection goes back to the pool and the next turn reuses it: the
  SDK's own stream stops reading at `[DONE]`, and a response closed unread takes its
  connection with it. The drain is bounded (no read waits more than `DRAIN_S`) and cannot
  fail a complete answer.

`malformed(exc, guard)` turns what the SDK or a chunk's shape raised into a
`MalformedStream` that carries the offending bytes.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from openai._streaming import ServerSentEvent, SSEDecoder

EVIDENCE_BYTES = 1024  # at most this much of a bad body goes into the transcript
DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
DRAIN_S = 0.1  # how long the end of a body may take to arrive after [DONE]
_LINE_END = re.compile(rb"\r\n|\r|\n")


class MalformedStream(Exception):
    """The body is not a well-formed Chat Completions event stream."""

    def __init__(self, message: str, evidence: bytes | str = b"") -> None:
        super().__init__(message)
        self.message = message
        self.evidence = evidence_text(evidence)


class ResponseTooLarge(Exception):
    """The answer of one turn is larger than the cap; `evidence` is its first bytes."""

    def __init__(self, message: str, evidence: bytes) -> None:
        super().__init__(message)
        self.evidence = evidence_text(evidence)


class StreamTooLong(Exception):
    """The answer was still arriving when the request's time ran out."""


class ChunkShapeError(ValueError):
    """A chunk parsed as JSON but is not shaped like a Chat Completions chunk."""

    def __init__(self, problem: str, chunk: object) -> None:
        super().__init__(problem)
        self.problem = problem
        self.chunk = chunk


def evidence_text(data: bytes | str, *, around: int = 0) -> str:
    """At most EVIDENCE_BYTES of `data` near `around`, printable (bad bytes escaped)."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
    start = max(0, min(around - EVIDENCE_BYTES // 4, len(raw) - EVIDENCE_BYTES))
    piece = raw[start : start + EVIDENCE_BYTES]
    text = piece.decode("utf-8", "backslashreplace")
    prefix = f"[{start} bytes before] " if start else ""
    suffix = (
        f" [{len(raw) - start - len(piece)} bytes after]" if start + len(piece) < len(raw) else ""
    )
    return prefix + text + suffix


class StreamGuard:
    """The limits of one streamed request, and what its body looked like so far."""

    def __init__(
        self,
        *,
        limit_s: float,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.started = time.monotonic()
        self.limit_s = limit_s
        self.max_line_bytes = max_line_bytes
        self.max_response_bytes = max_response_bytes
        self.received = 0
        self.head = bytearray()  # the body's first bytes
        self._line = 0  # length of the line being received
        self._line_head = bytearray()
        self.response: Any = None  # the HTTP response being read, set by the client

    def decoder(self) -> GuardedDecoder:
        return GuardedDecoder(self)

    def watch(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        deadline = self.started + self.limit_s
        head = self.head
        for chunk in chunks:
            self.received += len(chunk)
            if len(head) < EVIDENCE_BYTES:
                head += chunk[: EVIDENCE_BYTES - len(head)]
            if self.received > self.max_response_bytes:
                raise ResponseTooLarge(
                    f"the answer is larger than max_response_bytes = "
                    f"{self.max_response_bytes} bytes; it was cut there",
                    bytes(head),
                )
            self._measure(chunk)
            if time.monotonic() > deadline:
                raise StreamTooLong
            yield chunk

    def drain(self, chunks: Iterator[bytes]) -> None:
        """Read what is left of the body after [DONE] (normally just its end), within the
        guard's limits, no read waiting longer than `DRAIN_S`; whatever goes wrong, the
        answer stands. Where a read cannot be bounded so, nothing is read (the connection
        then closes with the response, as the SDK would have it)."""
        stream: Any = (getattr(self.response, "extensions", None) or {}).get("network_stream")
        read = getattr(stream, "read", None)
        if read is None:
            return

        def bounded(max_bytes: int, timeout: float | None = None) -> Any:
            return read(max_bytes, DRAIN_S)

        stream.read = bounded
        try:
            for _ in self.watch(chunks):
                pass
        except Exception:  # noqa: S110 - the answer is complete; only the connection is lost
            pass
        finally:
            with contextlib.suppress(AttributeError):
                del stream.read

    def _measure(self, chunk: bytes) -> None:
        if self._line + len(chunk) <= self.max_line_bytes:
            # no line of this chunk can pass the limit: only where the last one ends counts
            end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            if end == len(chunk) - 1:  # the usual chunk: whole lines, one event or more
                self._line = 0
                self._line_head.clear()
                return
            if end >= 0:
                self._line = len(chunk) - end - 1
                self._line_head[:] = chunk[end + 1 : end + 1 + EVIDENCE_BYTES]
                return
            self._line += len(chunk)
            if len(self._line_head) < EVIDENCE_BYTES:
                self._line_head += chunk[: EVIDENCE_BYTES - len(self._line_head)]
            return
        start = 0
        for match in _LINE_END.finditer(chunk):
            if self._line + match.start() - start > self.max_line_bytes:
                self._too_big(self._line_head + chunk[start : start + EVIDENCE_BYTES])
            self._line = 0
            self._line_head.clear()
            start = match.end()
        rest = chunk[start:]
        self._line += len(rest)
        if len(self._line_head) < EVIDENCE_BYTES:
            self._line_head += rest[: EVIDENCE_BYTES - len(self._line_head)]
        if self._line > self.max_line_bytes:
            self._too_big(self._line_head)

    def _too_big(self, evidence: bytes | bytearray) -> None:
        raise MalformedStream(
            f"a line of the stream is longer than max_stream_line_bytes = "
            f"{self.max_line_bytes} bytes",
            bytes(evidence),
        )


class GuardedDecoder:
    """The SDK's own SSE decoder, fed through a `StreamGuard` (an `SSEBytesDecoder`)."""

    def __init__(self, guard: StreamGuard) -> None:
        self.guard = guard

    def iter_bytes(self, iterator: Iterator[bytes]) -> Iterator[ServerSentEvent]:
        for event in SSEDecoder().iter_bytes(self.guard.watch(iterator)):
            if event.data.startswith("[DONE]"):
                self.guard.drain(iterator)
            yield event

    def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[ServerSentEvent]:
        raise NotImplementedError("the model client is synchronous")


def malformed(exc: Exception, guard: StreamGuard) -> MalformedStream:
    """What a bad body made the SDK (or our chunk reader) raise, as a `MalformedStream`."""
    if isinstance(exc, MalformedStream):
        return exc
    if isinstance(exc, json.JSONDecodeError):
        return MalformedStream(
            f"a data line is not JSON ({exc.msg} at character {exc.pos})",
            _around(exc.doc, exc.pos),
        )
    if isinstance(exc, UnicodeDecodeError):
        return MalformedStream(
            f"a line is not UTF-8 (byte {exc.object[exc.start : exc.start + 1]!r} at "
            f"position {exc.start})",
            evidence_text(exc.object, around=exc.start),
        )
    if isinstance(exc, ChunkShapeError):
        text = json.dumps(exc.chunk, ensure_ascii=False, default=repr)
        return MalformedStream(f"a chunk has an unexpected shape: {exc.problem}", text)
    return MalformedStream(f"{type(exc).__name__}: {exc}", bytes(guard.head))


def _around(doc: str, position: int) -> str:
    return evidence_text(doc, around=len(doc[:position].encode("utf-8", "surrogateescape")))


__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DRAIN_S",
    "EVIDENCE_BYTES",
    "ChunkShapeError",
    "GuardedDecoder",
    "MalformedStream",
    "ResponseTooLarge",
    "StreamGuard",
    "StreamTooLong",
    "evidence_text",
    "malformed",
]

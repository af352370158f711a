"""Server-sent events: a record's `events.jsonl` followed as it grows.

Each event goes out as soon as its line is whole (the file is checked every 50 ms), with
the byte offset after it as the SSE id, so a browser that reconnects (`Last-Event-ID`)
resumes exactly where it stopped. When the run is finished and nothing is left to read, an
`end` event closes the stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from code_runner.web.roots import open_file
from code_runner.web.text import clean_value

POLL_S = 0.05
HEARTBEAT_S = 15.0
MAX_CHUNK_BYTES = 256 * 1024


def frame(event: str, data: object, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    # `<` as \u003c: the data is never markup, even to something that sniffs it as HTML
    text = json.dumps(data, default=str).replace("<", "\\u003c")
    return f"{head}event: {event}\ndata: {text}\n\n"


def _read(path: Path, offset: int) -> bytes:
    try:
        with open_file(path) as handle:
            handle.seek(offset)
            return handle.read(MAX_CHUNK_BYTES)
    except OSError:
        return b""


async def follow(
    path: Path,
    offset: int,
    *,
    finished: Callable[[], bool],
    disconnected: Callable[[], Awaitable[bool]],
    snapshot: Callable[[], object] | None = None,
) -> AsyncIterator[str]:
    """Frames for every whole line appended to `path` after byte `offset`.

    `snapshot`, when given, is sent as a `status` event whenever it changes."""
    last_status: object = None
    quiet_s = 0.0
    while True:
        data = _read(path, offset)
        whole = data[: data.rfind(b"\n") + 1]
        for raw in whole.splitlines(keepends=True):
            offset += len(raw)
            yield from_line(raw, offset)
        if snapshot is not None and (status := snapshot()) != last_status:
            last_status = status
            yield frame("status", clean_value(status))
        if whole:
            quiet_s = 0.0
            continue
        if finished() and not _read(path, offset).strip():
            yield frame("end", {"offset": offset})
            return
        if await disconnected():
            return
        quiet_s += POLL_S
        if quiet_s >= HEARTBEAT_S:
            quiet_s = 0.0
            yield ": keep-alive\n\n"
        await asyncio.sleep(POLL_S)


def from_line(raw: bytes, offset: int) -> str:
    """One event line as a frame (a line that is not JSON is sent as a note)."""
    try:
        event = json.loads(raw)
    except ValueError:
        event = {"kind": "unreadable line"}
    return frame("event", clean_value(event), offset)


async def changes(
    signature: Callable[[], object],
    *,
    disconnected: Callable[[], Awaitable[bool]],
    interval_s: float = 1.0,
) -> AsyncIterator[str]:
    """A `changed` event each time `signature()` differs from the last one."""
    last = await asyncio.to_thread(signature)
    waited_s = 0.0
    while not await disconnected():
        await asyncio.sleep(interval_s)
        waited_s += interval_s
        now = await asyncio.to_thread(signature)
        if now != last:
            last = now
            waited_s = 0.0
            yield frame("changed", {})
        elif waited_s >= HEARTBEAT_S:
            waited_s = 0.0
            yield ": keep-alive\n\n"


__all__ = ["changes", "follow", "frame"]

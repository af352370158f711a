"""The server's own record: one JSON line per tool call, refusal, run started and shutdown,
in `<state dir>/mcp/server.jsonl`. A client's arguments are summarised (keys, types and
the first characters of each value), never copied whole: a hostile call cannot fill the
disk through the log, and a prompt is not duplicated there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from code_runner import dirs, files
from code_runner.clock import utc_now

PREVIEW_CHARS = 120


def mcp_dir() -> Path:
    return dirs.state_dir() / "mcp"


class ServerLog:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or mcp_dir() / "server.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, kind: str, /, **data: Any) -> None:
        entry = {"ts": utc_now(), "pid": os.getpid(), "kind": kind, **data}
        files.append_jsonl(self.path, entry)


def preview(value: object, depth: int = 0) -> object:
    """A short, JSON-safe picture of a client-supplied value."""
    if isinstance(value, str):
        if len(value) <= PREVIEW_CHARS:
            return value
        return f"{value[:PREVIEW_CHARS]}… ({len(value)} chars)"
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= 2:
        return f"<{type(value).__name__}>"
    if isinstance(value, dict):
        items = list(value.items())
        shown = {str(k)[:60]: preview(v, depth + 1) for k, v in items[:20]}
        if len(items) > 20:
            shown["…"] = f"{len(items) - 20} more keys"
        return shown
    if isinstance(value, list | tuple):
        return [preview(v, depth + 1) for v in value[:10]] + (
            [f"… {len(value) - 10} more"] if len(value) > 10 else []
        )
    return f"<{type(value).__name__}>"


__all__ = ["ServerLog", "mcp_dir", "preview"]

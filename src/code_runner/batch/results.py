"""What one item ended with (`ItemResult`, the small value a worker returns) and the batch's
`results.jsonl`: written only by the driver, one line per finished item, fsynced per line.

An agent's failure is a status here, never an exception; only an infrastructure failure
(a worker lost, a machine gone) raises, and after the engine's retries it too becomes a
status (`infra_error`) so the log says what happened to every item.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner.files import read_jsonl

RESULTS_NAME = "results.jsonl"
MAX_INLINE_PATCH_BYTES = 4 * 1024 * 1024


class ItemStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"  # the run itself ended in error (a bad spec, a DoD that cannot start)
    TIMEOUT = "timeout"  # --task-timeout: cancelled by the driver
    CANCELLED = "cancelled"  # Ctrl-C: run again by --resume
    INFRA_ERROR = "infra_error"  # the worker or machine failed, retries spent


FINAL = frozenset(s for s in ItemStatus if s is not ItemStatus.CANCELLED)


class WorkerLost(Exception):
    """The process running an item died without being asked to: an infrastructure failure."""


@dataclass(frozen=True)
class ItemResult:
    """The small value an item returns: status, patch bytes or experiment summary, manifest."""

    item_id: str
    status: ItemStatus
    exit_code: int | None = None
    duration_s: float = 0.0
    attempt_dir: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    manifest: tuple[str, ...] = ()
    patch: bytes | None = None
    error: str = ""
    node: str = ""
    pid: int = 0
    tries: int = 1

    def with_status(self, status: ItemStatus, error: str = "") -> ItemResult:
        return replace(self, status=status, error=error or self.error)

    def to_wire(self) -> dict[str, Any]:
        """As JSON-able data (the patch base64-encoded), to cross a process or a network."""
        data = asdict(self)
        data["status"] = self.status.value
        data["manifest"] = list(self.manifest)
        data["patch"] = None if self.patch is None else base64.b64encode(self.patch).decode()
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ItemResult:
        patch = data.get("patch")
        return cls(
            **{
                **data,
                "status": ItemStatus(data["status"]),
                "manifest": tuple(data.get("manifest") or ()),
                "patch": None if patch is None else base64.b64decode(patch),
            }
        )


class ResultsLog:
    """`results.jsonl` in the run dir: append one finished item, fsynced; read it back."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / RESULTS_NAME
        self.patches_dir = run_dir / "patches"

    def records(self) -> list[dict[str, Any]]:
        return [r for r in read_jsonl(self.path) if isinstance(r, dict) and "item_id" in r]

    def finished_ids(self) -> set[str]:
        """Items that need no re-run: every final status (a cancelled one runs again)."""
        return {str(r["item_id"]) for r in self.records() if r.get("status") in FINAL}

    def append(self, result: ItemResult, *, kind: str, attempt: int) -> dict[str, Any]:
        """Write one line (the patch goes beside, in `patches/`), fsynced before returning."""
        line = result.to_wire()
        line.pop("patch")
        line.update(kind=kind, attempt=attempt)
        if result.patch:
            self.patches_dir.mkdir(parents=True, exist_ok=True)
            patch_path = self.patches_dir / f"{result.item_id}.patch"
            patch_path.write_bytes(result.patch)
            line["patch_path"] = str(patch_path)
        data = (json.dumps(line, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return line


def counts(statuses: Iterable[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for status in statuses:
        found[status] = found.get(status, 0) + 1
    return found

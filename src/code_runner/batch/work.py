"""The item function: the same code runs an item on every engine and returns `ItemResult`.

It hands the item to a resident item process (`slots`: started once per slot, in a session
of its own) and polls for the answer, so a cancel arrives within a fraction of a second: the
local engine sets the `Cancel` flag, Ray raises KeyboardInterrupt (its soft cancel). Either
way the resident's whole tree is ended (SIGTERM, grace, SIGKILL; processes that left the
group are found by token and by run id) before the function returns or raises, and the next
item gets a fresh resident. The resident also watches its parent: if the worker dies
(SIGKILL, a force cancel, a lost driver), it interrupts itself and the run cleans up as any
interrupted run does.

Each try of an item gets a fresh directory `items/<id>/try-N`, so a retried try never mixes
files with the one before. Two items on one source hold its lock shared; an item that applies
to its source holds it alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code_runner import dirs, files, proc
from code_runner.batch.items import Item, ItemKind
from code_runner.batch.results import MAX_INLINE_PATCH_BYTES, ItemResult, ItemStatus, WorkerLost
from code_runner.batch.slots import Cancelled, Resident, ResidentPool
from code_runner.errors import RecordError
from code_runner.files import walk
from code_runner.record import ResultStatus, load_result

POLL_S = 0.1
MAX_MANIFEST = 200
RUN_ID_FILE = "run_id"
FORCED_END_S = 0.5  # after a soft stop's grace: SIGKILL, and this long to see the tree gone


@dataclass
class Cancel:
    """A cancel request the driver sets and the item function polls (the local engine's)."""

    event: threading.Event = field(default_factory=threading.Event)
    grace_s: float = proc.DEFAULT_GRACE_S

    def request(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()


def new_try_dir(run_dir: Path, item_id: str) -> Path:
    """`items/<id>/try-N` with the first free N, made atomically (retries race nothing)."""
    parent = run_dir / "items" / item_id
    parent.mkdir(parents=True, exist_ok=True)
    number = 1
    while True:
        candidate = parent / f"try-{number}"
        try:
            candidate.mkdir()
        except FileExistsError:
            number += 1
            continue
        return candidate


@contextlib.contextmanager
def source_lock(source: str | None, *, exclusive: bool, cancel: Cancel) -> Iterator[None]:
    """Hold the source's batch lock: shared, or alone for an item that writes its source."""
    if source is None:
        yield
        return
    key = hashlib.sha256(os.path.realpath(source).encode()).hexdigest()[:24]
    path = dirs.locks_dir() / f"batch-source-{key}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)

    def waiting() -> None:
        if cancel.requested:
            raise WorkerLost("cancelled while waiting for the source lock")

    with files.flocked(path, shared=not exclusive, poll_s=POLL_S, waiting=waiting):
        yield


def write_item(item: Item, try_dir: Path, source_override: Path | None) -> Path:
    """The item as the resident reads it (`try_dir/item.json`), its source replaced by the
    node's copy when it came as a bundle."""
    item_path = try_dir / "item.json"
    data = item.to_dict()
    if source_override is not None:
        data["spec"] = {**data["spec"], "cwd": str(source_override)}
    item_path.write_text(json.dumps(data))
    return item_path


def _end(resident: Resident, try_dir: Path, grace_s: float) -> None:
    """End the resident's tree, then whatever its run left that carries its run id."""
    resident.end(grace_s)
    with contextlib.suppress(OSError):
        run_id = (try_dir / RUN_ID_FILE).read_text().strip()
        if run_id:
            proc.kill_run_processes(run_id, grace_s=grace_s)


def run_item(
    item: Item,
    run_dir: Path,
    cancel: Cancel | None = None,
    *,
    pool: ResidentPool,
    source_override: Path | None = None,
) -> ItemResult:
    """Run one item to its end in a resident process from `pool`; its result. Raises only
    `WorkerLost` (the process was killed by someone else) or the interrupt that cancels it."""
    cancel = cancel or Cancel()
    started = time.monotonic()
    try_dir = new_try_dir(run_dir, item.item_id)
    with source_lock(item.source, exclusive=item.writes_source, cancel=cancel):
        item_path = write_item(item, try_dir, source_override)
        resident = pool.take()
        try:
            exit_code = resident.run(item_path, try_dir, cancel.event)
        except Cancelled:  # within its grace, or at once when a forced stop comes meanwhile
            resident.wind_down(lambda: cancel.grace_s)
            _end(resident, try_dir, min(cancel.grace_s, FORCED_END_S))
            return _result(item, try_dir, started, ItemStatus.CANCELLED, None)
        except WorkerLost:
            _end(resident, try_dir, 0.5)
            raise
        except BaseException:
            _end(resident, try_dir, cancel.grace_s)
            raise
        pool.give(resident)
    return _outcome(item, try_dir, started, exit_code)


def _manifest(try_dir: Path) -> tuple[str, ...]:
    found: list[str] = []
    for dirpath, _dirs, names in walk(try_dir):
        found.extend(str(Path(dirpath, n).relative_to(try_dir)) for n in sorted(names))
        if len(found) >= MAX_MANIFEST:
            break
    return tuple(found[:MAX_MANIFEST])


def _result(
    item: Item,
    try_dir: Path,
    started: float,
    status: ItemStatus,
    exit_code: int | None,
    **extra: Any,
) -> ItemResult:
    return ItemResult(
        item_id=item.item_id,
        status=status,
        exit_code=exit_code,
        duration_s=round(time.monotonic() - started, 3),
        attempt_dir=str(try_dir),
        manifest=_manifest(try_dir),
        node=socket.gethostname(),
        pid=os.getpid(),
        **extra,
    )


_TASK_STATUS = {
    ResultStatus.PASSED: ItemStatus.PASSED,
    ResultStatus.ALREADY_SATISFIED: ItemStatus.PASSED,
    ResultStatus.FAILED: ItemStatus.FAILED,
    ResultStatus.INTERRUPTED: ItemStatus.CANCELLED,
}


def _child_error(try_dir: Path) -> str:
    text = ""
    with contextlib.suppress(OSError):
        text = (try_dir / "child.err").read_text(errors="replace")
    return text.strip()[-2000:]


def _outcome(item: Item, try_dir: Path, started: float, exit_code: int) -> ItemResult:
    if item.kind is ItemKind.EXEC:
        return _exec_outcome(item, try_dir, started, exit_code)
    task_id = str(item.spec.get("task_id"))
    try:
        result = load_result(try_dir / "run" / f"{task_id}.result.json")
    except RecordError:
        return _result(
            item, try_dir, started, ItemStatus.ERROR, exit_code, error=_child_error(try_dir)
        )
    patch: bytes | None = None
    if result.patch_artifact:
        with contextlib.suppress(OSError), Path(result.patch_artifact).open("rb") as f:
            data = f.read(MAX_INLINE_PATCH_BYTES + 1)  # a larger one is never read whole
            patch = data if len(data) <= MAX_INLINE_PATCH_BYTES else None
    summary = {
        "status": result.status.value,
        "reason": result.reason.value,
        "rounds": result.rounds,
        "best_score": result.best_score,
    }
    status = _TASK_STATUS.get(result.status, ItemStatus.ERROR)
    return _result(
        item,
        try_dir,
        started,
        status,
        exit_code,
        summary=summary,
        patch=patch,
        error=result.error or "",
    )


def _exec_outcome(item: Item, try_dir: Path, started: float, exit_code: int) -> ItemResult:
    try:
        data = json.loads((try_dir / "run" / "result.json").read_text())
    except (OSError, ValueError):
        return _result(
            item, try_dir, started, ItemStatus.ERROR, exit_code, error=_child_error(try_dir)
        )
    summary = {key: data.get(key) for key in ("state", "success", "exit_code", "duration_s")} | {
        "cell": item.spec.get("cell", {})
    }
    status = ItemStatus.PASSED if data.get("success") else ItemStatus.FAILED
    return _result(item, try_dir, started, status, exit_code, summary=summary)

"""One `code-runner batch`: check the run dir and what is left to do, start the engine, drive
the items, close the engine, and say what happened."""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_runner.batch.driver import Driver, DriverOptions
from code_runner.batch.engine import ENGINES, Engine, EngineOptions
from code_runner.batch.items import Batch, Item
from code_runner.batch.progress import Progress
from code_runner.batch.results import FINAL, ResultsLog
from code_runner.errors import UsageError


def make_engine(name: str, options: EngineOptions) -> Engine:
    """The engine called `name` (Ray is imported only now); an unknown name lists the choices."""
    if name == "local":
        from code_runner.batch.local import LocalEngine

        return LocalEngine(options)
    if name == "ray":
        from code_runner.batch.ray_engine import RayEngine

        return RayEngine(options)
    raise UsageError(f"unknown engine {name!r}", fix=f"choose one of: {', '.join(ENGINES)}")


@dataclass(frozen=True)
class BatchRequest:
    batch: Batch
    run_dir: Path
    engine: str = "local"
    slots: int = 2
    address: str | None = None
    task_timeout_s: float | None = None
    grace_s: float = 5.0
    max_retries: int = 1
    resume: bool = False


@dataclass(frozen=True)
class BatchOutcome:
    """Every item's final line in results.jsonl (in item order), and whether we were stopped."""

    lines: tuple[dict[str, Any], ...]
    stopped: bool
    skipped: int


def todo(request: BatchRequest, log: ResultsLog) -> tuple[list[Item], int]:
    """The items still to run, and how many a resume skips."""
    if not log.records():
        return list(request.batch.items), 0
    if not request.resume:
        raise UsageError(
            f"{log.path} already holds results of a batch",
            fix="pass --resume to run only what is left, or choose a new --run-dir",
        )
    finished = log.finished_ids()
    left = [item for item in request.batch.items if item.item_id not in finished]
    return left, len(request.batch.items) - len(left)


def final_lines(log: ResultsLog, batch: Batch) -> tuple[dict[str, Any], ...]:
    """The last line of each item (a resumed item may have a cancelled line before)."""
    last: dict[str, dict[str, Any]] = {}
    for record in log.records():
        last[str(record["item_id"])] = record
    return tuple(last[i.item_id] for i in batch.items if i.item_id in last)


def run_batch(request: BatchRequest, progress: Progress | None = None) -> BatchOutcome:
    try:
        if request.run_dir.exists() and not request.run_dir.is_dir():  # a FIFO, a socket
            raise NotADirectoryError(errno.ENOTDIR, "it is not a directory")
        request.run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--run-dir {request.run_dir} cannot be used: {exc.strerror or exc}.",
            fix="name a directory, new or holding an earlier batch's results.",
        ) from None
    log = ResultsLog(request.run_dir)
    items, skipped = todo(request, log)
    (request.run_dir / "batch.json").write_text(
        json.dumps(
            {"items": request.batch.origin, "engine": request.engine, "slots": request.slots},
            indent=2,
        )
    )
    if progress and skipped:
        progress.note(f"resume: {skipped} item(s) already finished, {len(items)} to run")
    engine = make_engine(
        request.engine,
        EngineOptions(
            run_dir=request.run_dir,
            slots=request.slots,
            max_retries=request.max_retries,
            address=request.address,
        ),
    )
    driver = Driver(
        request.batch,
        engine,
        log,
        request.run_dir,
        DriverOptions(task_timeout_s=request.task_timeout_s, grace_s=request.grace_s),
        progress,
    )
    try:
        driver.run(items)
    finally:
        engine.close()
    lines = final_lines(log, request.batch)
    stopped = driver.stops > 0 or any(line["status"] not in FINAL for line in lines)
    return BatchOutcome(lines, stopped, skipped)

"""The batch driver: it owns `results.jsonl`, the queue, timeouts, progress and Ctrl-C.

It keeps at most `capacity` items in flight, so an item's timeout counts from when a slot
took it. A timed-out item is cancelled (soft, then forced after the grace) and recorded as
`timeout`. The first SIGINT (or a SIGTERM) stops admitting items and cancels the running
ones cleanly; a second forces them. A cancelled item is recorded as `cancelled` and runs
again under `--resume`, as does any item that was running when the driver died.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from code_runner.batch.engine import Completion, Engine, Handle
from code_runner.batch.items import Batch, Item
from code_runner.batch.progress import Progress, SlotView, Snapshot, current_round, eta
from code_runner.batch.results import ItemResult, ItemStatus, ResultsLog

TICK_S = 0.2
FORCE_GRACE_S = 0.2


@dataclass
class Running:
    handle: Handle
    slot: int
    started: float
    stop: ItemStatus | None = None  # why we cancelled it: timeout or cancelled
    forced: bool = False


@dataclass
class DriverOptions:
    task_timeout_s: float | None = None
    grace_s: float = 5.0


@dataclass
class Driver:
    batch: Batch
    engine: Engine
    log: ResultsLog
    run_dir: Path
    options: DriverOptions
    progress: Progress | None = None
    stops: int = 0
    written: list[dict[str, Any]] = field(default_factory=list)
    _running: dict[int, Running] = field(default_factory=dict)
    _failed: int = 0
    _done: int = 0
    _attempts: dict[str, int] = field(default_factory=dict)  # lines per item so far

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self.stops += 1

    def run(self, todo: list[Item]) -> list[dict[str, Any]]:
        """Run `todo` to the end (or to a stop); the lines written to results.jsonl."""
        for record in self.log.records():
            key = str(record["item_id"])
            self._attempts[key] = self._attempts.get(key, 0) + 1
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            self._loop(deque(todo), len(todo))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.written

    def _loop(self, queue: deque[Item], total: int) -> None:
        started = time.monotonic()
        handled_stops = 0
        while queue or self._running:
            if self.stops != handled_stops:
                handled_stops = self.stops
                self._stop(force=self.stops > 1)
            while queue and not self.stops and len(self._running) < self.engine.capacity:
                self._submit(queue.popleft())
            for completion in self.engine.as_completed(TICK_S):
                self._record(completion)
            self._check_timeouts()
            if self.stops:
                queue.clear()
            self._show(len(queue), total, time.monotonic() - started)

    def _submit(self, item: Item) -> None:
        used = {r.slot for r in self._running.values()}
        slot = min(set(range(1, self.engine.capacity + 1)) - used)
        handle = self.engine.submit(item)
        self._running[handle.key] = Running(handle, slot, time.monotonic())

    def _stop(self, *, force: bool) -> None:
        if self.progress:
            self.progress.note(
                "second interrupt: forcing the running items to stop"
                if force
                else "interrupt: no new items; stopping the running ones (Ctrl-C again forces)"
            )
        for running in self._running.values():
            if running.stop is None:
                running.stop = ItemStatus.CANCELLED
            if force and not running.forced:
                running.forced = True
                self.engine.cancel(running.handle, FORCE_GRACE_S)
            elif not force:
                self.engine.cancel(running.handle, self.options.grace_s)

    def _check_timeouts(self) -> None:
        limit = self.options.task_timeout_s
        if limit is None:
            return
        now = time.monotonic()
        for running in self._running.values():
            if running.stop is None and now - running.started > limit:
                running.stop = ItemStatus.TIMEOUT
                self.engine.cancel(running.handle, self.options.grace_s)

    def _record(self, completion: Completion) -> None:
        running = self._running.pop(completion.handle.key, None)
        result: ItemResult = completion.result
        if (
            running is not None
            and running.stop is not None
            and (
                result.status in (ItemStatus.CANCELLED, ItemStatus.INFRA_ERROR)
                or running.stop is ItemStatus.TIMEOUT
            )
        ):
            # the driver's cancel is authoritative: a late value of a cancelled item is ignored
            reason = "the task timeout passed" if running.stop is ItemStatus.TIMEOUT else "stopped"
            result = result.with_status(running.stop, reason)
        attempt = self._attempts.get(result.item_id, 0) + 1
        self._attempts[result.item_id] = attempt
        line = self.log.append(result, kind=completion.handle.item.kind.value, attempt=attempt)
        self.written.append(line)
        self._done += 1
        if result.status is not ItemStatus.PASSED:
            self._failed += 1
        if self.progress:
            self.progress.finished(
                f"{result.status.value:11} {result.item_id} ({result.duration_s:.1f} s"
                + (f", {result.tries} tries" if result.tries > 1 else "")
                + ")"
            )

    def _show(self, queued: int, total: int, elapsed_s: float) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        slots = tuple(
            SlotView(
                r.slot,
                r.handle.item.item_id,
                current_round(self.run_dir, r.handle.item.item_id),
                now - r.started,
            )
            for r in sorted(self._running.values(), key=lambda r: r.slot)
        )
        stopping = ""
        if self.stops:
            stopping = "forcing stop" if self.stops > 1 else "stopping"
        self.progress.update(
            Snapshot(
                done=self._done,
                failed=self._failed,
                running=len(self._running),
                queued=queued,
                eta_s=eta(self._done, total - self._done, elapsed_s, self.engine.capacity),
                slots=slots,
                stopping=stopping,
            )
        )

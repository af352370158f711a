"""The local engine: N slots on this machine, one thread each, each with a resident item
process started up front (`slots`) that runs its items one after another.

An item process killed by someone else (`WorkerLost`) is an infrastructure failure: the item is run
again on a slot, up to `max_retries` times, and recorded once. A cancel sets the item's flag;
the slot ends the item process's tree within a poll, after the grace.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from code_runner.batch.engine import Completion, EngineOptions, Handle
from code_runner.batch.items import Item
from code_runner.batch.results import ItemResult, ItemStatus, WorkerLost
from code_runner.batch.slots import ResidentPool
from code_runner.batch.work import Cancel, run_item


class LocalEngine:
    name = "local"

    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self._pool = ThreadPoolExecutor(max_workers=options.slots, thread_name_prefix="slot")
        self._keys = itertools.count(1)
        self._cancels: dict[int, Cancel] = {}
        self._running: set[int] = set()
        self._done: queue.Queue[Completion] = queue.Queue()
        self._lock = threading.Lock()
        self._residents = ResidentPool(label=str(options.run_dir))
        self._residents.prestart(options.slots)

    @property
    def capacity(self) -> int:
        return self.options.slots

    def _run(self, handle: Handle, cancel: Cancel) -> ItemResult:
        tries = 0
        while True:
            tries += 1
            try:
                result = run_item(handle.item, self.options.run_dir, cancel, pool=self._residents)
                return replace(result, tries=tries)
            except WorkerLost as exc:
                if cancel.requested:
                    return ItemResult(handle.item.item_id, ItemStatus.CANCELLED, tries=tries)
                if tries > self.options.max_retries:
                    return ItemResult(
                        handle.item.item_id, ItemStatus.INFRA_ERROR, error=str(exc), tries=tries
                    )

    def _finished(self, handle: Handle, future: Future[ItemResult]) -> None:
        error = future.exception()
        if error is None:
            result = future.result()
        else:
            result = ItemResult(
                handle.item.item_id,
                ItemStatus.INFRA_ERROR,
                error=f"{type(error).__name__}: {error}",
            )
        with self._lock:
            self._running.discard(handle.key)
            self._cancels.pop(handle.key, None)
        self._done.put(Completion(handle, result))

    def submit(self, item: Item) -> Handle:
        handle = Handle(next(self._keys), item)
        cancel = Cancel()
        with self._lock:
            self._cancels[handle.key] = cancel
            self._running.add(handle.key)
        future = self._pool.submit(self._run, handle, cancel)
        future.add_done_callback(lambda f: self._finished(handle, f))
        return handle

    def as_completed(self, timeout_s: float) -> Iterator[Completion]:
        try:
            yield self._done.get(timeout=timeout_s)
        except queue.Empty:
            return
        while True:
            try:
                yield self._done.get_nowait()
            except queue.Empty:
                return

    def cancel(self, handle: Handle, grace_s: float) -> None:
        with self._lock:
            cancel = self._cancels.get(handle.key)
        if cancel is not None:
            cancel.request(grace_s)

    def close(self) -> None:
        with self._lock:
            cancels = list(self._cancels.values())
        for cancel in cancels:
            cancel.request(0.5)
        self._pool.shutdown(wait=True)
        self._residents.close()

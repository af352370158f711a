"""The worker side of the Ray engine: one long-lived actor per `code_runner_slot`.

An actor keeps one resident item process (`slots`) for the whole batch, started when the
engine starts, so an item pays neither for a Ray worker's start nor for the runner's imports
(Ray ends idle task workers beyond a node's CPU count within a second, and each new one paid
both). It is a threaded actor: `cancel` reaches an item while `run` waits for it, and a
cancel that arrives before its item has started is kept for it. A lost item process comes
back as `{"lost": why}` and an infrastructure error as `{"infra_error": why}`: the driver retries
the first (within `max_retries`) and records the second. Ray is never imported here.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from code_runner.batch.bundles import Shipment, checkout
from code_runner.batch.items import Item
from code_runner.batch.results import WorkerLost
from code_runner.batch.slots import ResidentPool
from code_runner.batch.work import Cancel, run_item


class SlotWorker:
    """The actor's body (Ray wraps it with `ray.remote`)."""

    def __init__(self, label: str) -> None:
        self._pool = ResidentPool(label=label)
        self._pool.prestart(1)
        self._cancels: dict[int, Cancel] = {}
        self._lock = threading.Lock()

    def ready(self) -> int:
        return os.getpid()

    def _cancel_for(self, key: int) -> Cancel:
        with self._lock:
            return self._cancels.setdefault(key, Cancel())

    def run(
        self,
        key: int,
        item_data: dict[str, Any],
        run_dir: str,
        shipped: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """One item on this slot. `shipped` names its source and commit and holds the
        bundle's ref inside a list, so Ray fetches the bytes only if this node's mirror
        lacks the commit."""
        cancel = self._cancel_for(key)
        item = Item.from_dict(item_data)
        try:
            with contextlib.ExitStack() as stack:
                override = None
                if shipped is not None:
                    override = stack.enter_context(
                        checkout(Shipment(**shipped["shipment"]), _reader(shipped["bundle"][0]))
                    )
                result = run_item(
                    item, Path(run_dir), cancel, pool=self._pool, source_override=override
                )
                return result.to_wire()
        except WorkerLost as exc:
            return {"lost": str(exc)}
        except Exception as exc:  # the driver records it as an infrastructure error
            return {"infra_error": f"{type(exc).__name__}: {exc}"}
        finally:
            with self._lock:
                self._cancels.pop(key, None)

    def cancel(self, key: int, grace_s: float) -> None:
        self._cancel_for(key).request(grace_s)

    def close(self) -> None:
        self._pool.close()


def _reader(ref: Any) -> Any:
    def read() -> bytes:
        import ray  # in a Ray worker, always there

        return bytes(ray.get(ref))

    return read

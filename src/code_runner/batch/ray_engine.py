"""The Ray engine: items as Ray core tasks, one `code_runner_slot` each, `num_cpus=0`.

Ray is imported only here, and only when `--engine ray` is chosen. With `--address` the
engine joins that cluster, which must declare the `code_runner_slot` resource on its nodes
(`ray start --head --resources='{"code_runner_slot": 8}'`); without it, it starts a local
Ray on 127.0.0.1 with usage stats off, its own temp dir and no dashboard, and stops it at
the end. A source repo travels as a `git bundle` through the object store, once per batch;
each node clones it into a cache under a file lock (`bundles`). `max_retries` re-runs an item
only when its worker or node dies; `retry_exceptions` stays off, since an agent's failure is
a result. A timeout or Ctrl-C is a soft cancel (the item function ends its child's tree),
then a forced one after the grace.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_runner.batch.bundles import make_bundle, source_from_bundle
from code_runner.batch.engine import Completion, EngineOptions, Handle
from code_runner.batch.items import Item, ItemKind
from code_runner.batch.results import ItemResult, ItemStatus
from code_runner.batch.work import run_item
from code_runner.errors import EnvironmentProblem

SLOT_RESOURCE = "code_runner_slot"
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}
# read by Ray at import: a Ray of our own stays on the loopback address (not for a cluster)
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host in ("127.0.0.1", "localhost", "::1")


def _import_ray(address: str | None) -> Any:
    os.environ.update(RAY_ENV)
    if not address or _is_loopback(address):  # a cluster on this machine only: stay on it
        os.environ.update(LOOPBACK_ENV)
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem(
            "--engine ray needs Ray core, which is not installed",
            fix="pip install 'code-runner[ray]' (or pip install ray), or use --engine local",
        ) from None
    return ray


def ray_item(item_data: dict[str, Any], run_dir: str, bundle: bytes | None) -> dict[str, Any]:
    """The Ray task body: the item function, with the source taken from its bundle."""
    item = Item.from_dict(item_data)
    try:
        override = None
        if bundle is not None and item.source is not None:
            override = source_from_bundle(bundle, item.source)
        return run_item(item, Path(run_dir), source_override=override).to_wire()
    except Exception as exc:  # to the driver as plain text: our error types need keywords
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None


@dataclass
class _Flight:
    handle: Handle
    ref: Any
    force_at: float | None = None


class RayEngine:
    name = "ray"

    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.ray = _import_ray(options.address)
        self._temp_dir: str | None = None
        self._owned = False
        self._bundles: dict[str, Any] = {}
        self._flights: dict[int, _Flight] = {}
        self._next = 0
        self._connect()
        self._capacity = self._preflight()
        self._remote = self.ray.remote(
            num_cpus=0,
            resources={SLOT_RESOURCE: 1},
            max_retries=options.max_retries,
            retry_exceptions=False,
        )(ray_item)

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        if self.options.address:
            ray.init(address=self.options.address, logging_level="ERROR", log_to_driver=False)
            return
        # a Unix socket path must stay short: a temp dir of our own under /tmp
        self._temp_dir = tempfile.mkdtemp(prefix="crray-", dir="/tmp")
        ray.init(
            num_cpus=max(1, os.cpu_count() or 1),
            resources={SLOT_RESOURCE: self.options.slots},
            include_dashboard=False,
            _temp_dir=self._temp_dir,
            _node_ip_address="127.0.0.1",
            logging_level="ERROR",
            log_to_driver=False,
        )
        self._owned = True

    def _preflight(self) -> int:
        slots = int(self.ray.cluster_resources().get(SLOT_RESOURCE, 0))
        if slots < 1:
            where = self.options.address or "the local Ray"
            self.close()
            raise EnvironmentProblem(
                f"the Ray cluster at {where} declares no {SLOT_RESOURCE} resource, so no item "
                "could ever be scheduled",
                fix=f'start each node with `ray start ... --resources=\'{{"{SLOT_RESOURCE}": '
                "8}'` (8: the items that node may run at once)",
            )
        return slots

    @property
    def capacity(self) -> int:
        return self._capacity

    def _bundle_ref(self, item: Item) -> Any:
        if item.kind is not ItemKind.TASK or item.source is None:
            return None
        if item.source not in self._bundles:
            data = make_bundle(Path(item.source), self.options.run_dir / "bundles")
            self._bundles[item.source] = self.ray.put(data)
        return self._bundles[item.source]

    def submit(self, item: Item) -> Handle:
        self._next += 1
        handle = Handle(self._next, item)
        ref = self._remote.remote(item.to_dict(), str(self.options.run_dir), self._bundle_ref(item))
        self._flights[handle.key] = _Flight(handle, ref)
        return handle

    def _completion(self, flight: _Flight) -> Completion:
        ray = self.ray
        item_id = flight.handle.item.item_id
        try:
            result = ItemResult.from_wire(ray.get(flight.ref))
        except (ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError) as exc:
            status = (
                ItemStatus.CANCELLED
                if isinstance(exc, ray.exceptions.TaskCancelledError)
                else ItemStatus.INFRA_ERROR
            )
            result = ItemResult(item_id, status, error=type(exc).__name__)
        except ray.exceptions.RayError as exc:
            result = ItemResult(item_id, ItemStatus.INFRA_ERROR, error=str(exc)[-2000:])
        return Completion(flight.handle, result)

    def as_completed(self, timeout_s: float) -> Iterator[Completion]:
        self._escalate()
        if not self._flights:
            time.sleep(min(timeout_s, 0.05))
            return
        by_ref = {flight.ref: key for key, flight in self._flights.items()}
        ready, waiting = self.ray.wait(list(by_ref), num_returns=1, timeout=timeout_s)
        if ready and waiting:  # and whatever else is done by now
            more, _ = self.ray.wait(waiting, num_returns=len(waiting), timeout=0)
            ready += more
        for ref in ready:
            flight = self._flights.pop(by_ref[ref])
            yield self._completion(flight)
            del flight  # the ref goes with it: the value is written, the object can go

    def _escalate(self) -> None:
        now = time.monotonic()
        for flight in self._flights.values():
            if flight.force_at is not None and now >= flight.force_at:
                flight.force_at = None
                with contextlib.suppress(Exception):
                    self.ray.cancel(flight.ref, force=True)

    def cancel(self, handle: Handle, grace_s: float) -> None:
        flight = self._flights.get(handle.key)
        if flight is None:
            return
        with contextlib.suppress(Exception):
            self.ray.cancel(flight.ref, force=False)
        # the soft cancel ends the child's tree within its own grace; force only after that
        flight.force_at = time.monotonic() + grace_s + 2.0

    def close(self) -> None:
        for flight in list(self._flights.values()):
            with contextlib.suppress(Exception):
                self.ray.cancel(flight.ref, force=True)
        self._flights.clear()
        self._bundles.clear()
        if self.ray.is_initialized() and (self._owned or self.options.address):
            self.ray.shutdown()
        if self._temp_dir is not None:
            import shutil

            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

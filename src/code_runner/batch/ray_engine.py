"""The Ray engine: one long-lived actor per `code_runner_slot` (`ray_slot`), `num_cpus=0`.

Ray is imported only here, and only when `--engine ray` is chosen. With `--address` the
engine joins that cluster, which must declare the `code_runner_slot` resource on its nodes
(`ray start --head --resources='{"code_runner_slot": 8}'`), and whose head must answer
within `CONNECT_S` (Ray alone would retry an unreachable head for minutes); without it, it
starts a local Ray on 127.0.0.1 with usage stats off, its own temp dir and no dashboard, and
stops it at the end. The engine starts one actor per slot of the cluster, each with a resident item
process, and hands each item to an idle one. A source repo travels as a `git bundle`
through the object store, once per batch, into each node's mirror cache (`bundles`),
fetched there only when the node lacks its commit. `max_retries` re-runs an item only when
its slot's Ray worker or its item process dies (the engine starts it again on that slot,
whose actor Ray restarts: one count for both); an agent's failure is a result. A timeout or
Ctrl-C is a soft cancel (the slot ends the item process's tree), then, after the grace, a
kill of the slot's actor, which Ray restarts.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from code_runner.batch.bundles import make_bundle
from code_runner.batch.engine import Completion, EngineOptions, Handle
from code_runner.batch.items import Item, ItemKind
from code_runner.batch.ray_slot import SlotWorker
from code_runner.batch.results import ItemResult, ItemStatus
from code_runner.errors import EnvironmentProblem

SLOT_RESOURCE = "code_runner_slot"
SLOT_START_S = 120.0
CONNECT_S = 5.0  # an --address whose head does not answer by then is refused
_QUIET: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
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


@dataclass
class _Flight:
    handle: Handle
    ref: Any
    slot: int
    force_at: float | None = None
    tries: int = 1
    cancelled: bool = False
    probe: bool = False  # `ref` is the slot's `ready`: the try starts once its actor is back


class RayEngine:
    name = "ray"

    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.ray = _import_ray(options.address)
        self._temp_dir: str | None = None
        self._owned = False
        self._bundles: dict[str, dict[str, Any]] = {}
        self._slots: list[Any] = []
        self._flights: dict[int, _Flight] = {}
        self._next = 0
        self._connect()
        self._capacity = self._preflight()
        self._slots = self._start_slots()
        self._idle = list(range(len(self._slots)))

    def _start_slots(self) -> list[Any]:
        """One actor per slot, each with its resident item process, started and waited for
        now (up to `SLOT_START_S`: a busy cluster may start some later)."""
        actor = self.ray.remote(
            num_cpus=0,
            resources={SLOT_RESOURCE: 1},
            max_restarts=-1,  # a killed slot comes back; its item is retried by the driver
            max_task_retries=0,
            max_concurrency=2,  # `cancel` reaches an item while `run` waits for it
        )(SlotWorker)
        slots = [actor.remote(str(self.options.run_dir)) for _ in range(self._capacity)]
        with contextlib.suppress(Exception):
            self.ray.wait(
                [s.ready.remote() for s in slots], num_returns=len(slots), timeout=SLOT_START_S
            )
        return slots

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        if self.options.address:
            ray.init(address=self._reachable(self.options.address), **_QUIET)
            return
        # a Unix socket path must stay short: a temp dir of our own under /tmp
        self._temp_dir = tempfile.mkdtemp(prefix="crray-", dir="/tmp")
        ray.init(
            num_cpus=max(1, os.cpu_count() or 1),
            resources={SLOT_RESOURCE: self.options.slots},
            include_dashboard=False,
            _temp_dir=self._temp_dir,
            _node_ip_address="127.0.0.1",
            **_QUIET,
        )
        self._owned = True

    def _reachable(self, address: str) -> str:
        """The cluster's `HOST:PORT` (`auto` found as Ray finds it), once its head answers:
        Ray itself would retry an unreachable head for minutes."""
        from ray._private.services import canonicalize_bootstrap_address

        fix = (
            "start the head with `ray start --head --resources='{\"code_runner_slot\": 8}'`, "
            "pass its HOST:PORT as --address, or leave --address out to start a local Ray"
        )
        try:
            found: str | None = canonicalize_bootstrap_address(address)
        except (ConnectionError, ValueError) as exc:
            message = f"no Ray cluster at --address {address}: {exc}"
            raise EnvironmentProblem(message, fix=fix) from None
        if found is None:
            raise EnvironmentProblem(f"no Ray cluster at --address {address}", fix=fix)
        host, _, port = found.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S):
                pass
        except (OSError, ValueError) as exc:
            raise EnvironmentProblem(
                f"the Ray cluster at {found} (--address {address}) cannot be reached: "
                f"{getattr(exc, 'strerror', None) or exc}",
                fix=fix,
            ) from None
        return found

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

    def _shipped(self, item: Item) -> dict[str, Any] | None:
        """The item's source as shipped: bundled once per batch, put once in the store."""
        if item.kind is not ItemKind.TASK or item.source is None:
            return None
        if item.source not in self._bundles:
            shipment, data = make_bundle(Path(item.source), self.options.run_dir / "bundles")
            self._bundles[item.source] = {
                "shipment": asdict(shipment),
                "bundle": [self.ray.put(data)],
            }
        return self._bundles[item.source]

    def _start(self, handle: Handle, slot: int, tries: int = 1) -> _Flight:
        item = handle.item
        ref = self._slots[slot].run.remote(
            handle.key, item.to_dict(), str(self.options.run_dir), self._shipped(item)
        )
        return _Flight(handle, ref, slot, tries=tries)

    def submit(self, item: Item) -> Handle:
        self._next += 1
        handle = Handle(self._next, item)
        self._flights[handle.key] = self._start(handle, self._idle.pop())
        return handle

    def _outcome(self, flight: _Flight) -> ItemResult | str:
        """The item's result, or why its slot or item process was lost (to retry)."""
        ray = self.ray
        item_id = flight.handle.item.item_id
        try:
            value = ray.get(flight.ref)
        except ray.exceptions.RayActorError as exc:
            return f"{type(exc).__name__}: the slot's Ray worker died"
        except ray.exceptions.RayError as exc:
            return ItemResult(item_id, ItemStatus.INFRA_ERROR, error=str(exc)[-2000:])
        if "lost" in value:
            return str(value["lost"])
        if "infra_error" in value:
            return ItemResult(item_id, ItemStatus.INFRA_ERROR, error=str(value["infra_error"]))
        return ItemResult.from_wire(value)

    def _completion(self, flight: _Flight) -> Completion | None:
        """The flight's completion; None when it was lost and has been started again."""
        handle = flight.handle
        if flight.probe:  # the slot is back (or beyond help: the try will say so)
            if flight.cancelled:
                result = ItemResult(handle.item.item_id, ItemStatus.CANCELLED, tries=flight.tries)
                return Completion(handle, result)
            self._flights[handle.key] = self._start(handle, flight.slot, flight.tries)
            return None
        outcome = self._outcome(flight)
        if isinstance(outcome, ItemResult):
            return Completion(flight.handle, replace(outcome, tries=flight.tries))
        item = flight.handle.item
        if flight.cancelled:
            result = ItemResult(item.item_id, ItemStatus.CANCELLED, error=outcome)
        elif flight.tries > self.options.max_retries:
            result = ItemResult(item.item_id, ItemStatus.INFRA_ERROR, error=outcome)
        else:  # on the same slot, once Ray has restarted its actor (a call before fails)
            ready = self._slots[flight.slot].ready.options(max_task_retries=-1).remote()
            retry = _Flight(handle, ready, flight.slot, tries=flight.tries + 1, probe=True)
            self._flights[handle.key] = retry
            return None
        return Completion(flight.handle, replace(result, tries=flight.tries))

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
            completion = self._completion(flight)
            if completion is not None:
                self._idle.append(flight.slot)
            del flight  # the ref goes with it: the value is written, the object can go
            if completion is not None:
                yield completion

    def _escalate(self) -> None:
        now = time.monotonic()
        for flight in self._flights.values():
            if flight.force_at is not None and now >= flight.force_at:
                flight.force_at = None
                with contextlib.suppress(Exception):  # its item process ends with it
                    self.ray.kill(self._slots[flight.slot], no_restart=False)

    def cancel(self, handle: Handle, grace_s: float) -> None:
        flight = self._flights.get(handle.key)
        if flight is None:
            return
        flight.cancelled = True
        with contextlib.suppress(Exception):
            self._slots[flight.slot].cancel.remote(handle.key, grace_s)
        # the soft cancel ends the item's tree within its own grace; force only after that
        flight.force_at = time.monotonic() + grace_s + 2.0

    def close(self) -> None:
        busy = {flight.slot for flight in self._flights.values()}
        closing = [s.close.remote() for i, s in enumerate(self._slots) if i not in busy]
        with contextlib.suppress(Exception):
            self.ray.wait(closing, num_returns=len(closing), timeout=10)
        for slot in self._slots:  # a busy slot's item process ends with its actor
            with contextlib.suppress(Exception):
                self.ray.kill(slot, no_restart=True)
        self._slots.clear()
        self._flights.clear()
        self._bundles.clear()
        if self.ray.is_initialized() and (self._owned or self.options.address):
            self.ray.shutdown()
        if self._temp_dir is not None:
            import shutil

            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

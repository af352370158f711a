"""The engine contract: how the batch driver hands items to slots, wherever the slots are.

`submit` starts an item and returns a `Handle`; `as_completed` yields what finished within a
wait; `cancel(handle, grace_s)` asks a running item to stop (soft, then forced once the grace
is over); `close` releases the engine (and a cluster it started). Every engine runs the same
item function (`work.run_item`) and hands back its `ItemResult`; an infrastructure failure
that survived the engine's retries comes back as an `infra_error` result, never as an
exception out of `as_completed`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from code_runner.batch.items import Item
from code_runner.batch.results import ItemResult

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class Handle:
    """One submitted item, as the engine knows it."""

    key: int
    item: Item


@dataclass(frozen=True)
class Completion:
    handle: Handle
    result: ItemResult


class Engine(Protocol):
    """What every engine offers the driver."""

    name: str

    @property
    def capacity(self) -> int:
        """How many items may run at once (slots)."""
        ...

    def submit(self, item: Item) -> Handle: ...

    def as_completed(self, timeout_s: float) -> Iterator[Completion]:
        """Yield items that finish within `timeout_s`; return when none is left to wait for."""
        ...

    def cancel(self, handle: Handle, grace_s: float) -> None:
        """Stop a running item: ask it, then force it after `grace_s`. Returns at once."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class EngineOptions:
    run_dir: Path
    slots: int
    max_retries: int = 1
    address: str | None = None

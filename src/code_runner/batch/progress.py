"""What a person sees while a batch runs: counts, an ETA and each slot's item and round.

On a terminal the view is redrawn in place (rich); elsewhere one plain line is printed per
finished item, so a log stays readable.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class SlotView:
    slot: int
    item_id: str
    round: int | None
    elapsed_s: float


@dataclass(frozen=True)
class Snapshot:
    done: int
    failed: int
    running: int
    queued: int
    eta_s: float | None
    slots: tuple[SlotView, ...]
    stopping: str = ""


def current_round(run_dir: Path, item_id: str) -> int | None:
    """The round the item's newest try is in, from its run's status.json (None if unknown)."""
    tries = sorted(
        (run_dir / "items" / item_id).glob("try-*"),
        key=lambda p: int(p.name.removeprefix("try-") or 0),
    )
    if not tries:
        return None
    for status in (tries[-1] / "run").glob("*.status.json"):
        with contextlib.suppress(OSError, ValueError):
            value = json.loads(status.read_text()).get("round")
            return int(value) if value is not None else None
    return None


def eta(done: int, remaining: int, elapsed_s: float, slots: int) -> float | None:
    """Seconds left at the pace so far (None before the first item finishes)."""
    if done == 0:
        return None
    return remaining * (elapsed_s / done)


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def render_table(snap: Snapshot) -> Group:
    """The counts and ETA on one line, then a row per busy slot."""
    title = (
        f"done {snap.done}  running {snap.running}  failed {snap.failed}  "
        f"queued {snap.queued}  ETA {_fmt_eta(snap.eta_s)}"
    )
    if snap.stopping:
        title += f"  ({snap.stopping})"
    table = Table(expand=False)
    for column in ("slot", "item", "round", "elapsed"):
        table.add_column(column)
    for view in snap.slots:
        table.add_row(
            str(view.slot),
            view.item_id,
            "-" if view.round is None else str(view.round),
            f"{view.elapsed_s:.0f} s",
        )
    return Group(Text(title), table)


class Progress:
    """Live on a terminal, a line per finished item otherwise."""

    def __init__(self, stream: IO[str], *, live: bool) -> None:
        self.console = Console(file=stream, highlight=False)
        self.live = Live(console=self.console, auto_refresh=False) if live else None
        if self.live is not None:
            self.live.start()

    def update(self, snap: Snapshot) -> None:
        if self.live is not None:
            self.live.update(render_table(snap), refresh=True)

    def finished(self, line: str) -> None:
        self.console.print(line, markup=False)
        if self.live is not None:
            self.live.refresh()

    def note(self, text: str) -> None:
        self.console.print(text, markup=False)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()

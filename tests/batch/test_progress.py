"""The live view: counts, ETA and each slot's item and round, as a person sees them."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from code_runner.batch.progress import SlotView, Snapshot, current_round, eta, render_table


def test_the_view_shows_counts_eta_and_each_slot() -> None:
    snap = Snapshot(
        done=7,
        failed=1,
        running=2,
        queued=40,
        eta_s=125.0,
        slots=(SlotView(1, "fix-a", 2, 12.0), SlotView(2, "fix-b", None, 1.0)),
    )
    out = io.StringIO()
    Console(file=out, width=100, no_color=True).print(render_table(snap))
    text = out.getvalue()
    assert "done 7  running 2  failed 1  queued 40  ETA 2m05s" in text
    assert "fix-a" in text and "fix-b" in text
    assert " 2 " in text.split("fix-a")[1].splitlines()[0]  # fix-a's round


def test_eta_is_unknown_until_an_item_finishes() -> None:
    assert eta(0, 10, 5.0, 2) is None
    assert eta(5, 10, 50.0, 2) == 100.0


def test_the_round_comes_from_the_newest_try(tmp_path: Path) -> None:
    for number, value in ((1, 3), (2, 1)):
        run = tmp_path / "items" / "a" / f"try-{number}" / "run"
        run.mkdir(parents=True)
        (run / "a.status.json").write_text(json.dumps({"round": value}))
    assert current_round(tmp_path, "a") == 1
    assert current_round(tmp_path, "missing") is None

"""OutputWatch: what the live tail shows, what counts as activity, what gets parsed."""

from __future__ import annotations

import os
from pathlib import Path

from code_runner.monitor.watch import OutputWatch


def _watch(tmp_path: Path, *, parse_metrics: bool) -> tuple[OutputWatch, Path, Path]:
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    out.write_text("")
    err.write_text("")
    watch = OutputWatch(out, err, tmp_path, ("logs", "metrics.csv"), parse_metrics=parse_metrics)
    return watch, out, err


def test_progress_bars_are_transient_and_lines_scroll(tmp_path: Path) -> None:
    watch, _out, err = _watch(tmp_path, parse_metrics=False)
    err.write_bytes(b"start\n 10%| 1/10\r 20%| 2/10\r 30%| 3/10")
    shown = watch.pump()["stderr"]
    assert shown.lines == ("start",)
    assert shown.transient == " 30%| 3/10"  # the bar's current state is the unterminated part
    assert watch.progress is not None and watch.progress.done == 3
    with err.open("ab") as f:
        f.write(b"\r 40%| 4/10\r")
    assert watch.pump()["stderr"].transient == " 40%| 4/10"
    with err.open("ab") as f:
        f.write(b"100%| 10/10\ndone\n")
    assert watch.pump()["stderr"].lines == ("100%| 10/10", "done")


def test_activity_covers_output_and_monitored_files(tmp_path: Path) -> None:
    watch, out, _ = _watch(tmp_path, parse_metrics=True)
    (tmp_path / "logs").mkdir()
    before = watch.activity()
    assert watch.activity() == before
    (tmp_path / "logs" / "epoch1.txt").write_text("x")
    after_dir = watch.activity()
    assert after_dir != before
    out.write_text("hello\n")
    assert watch.activity() != after_dir
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("epoch,loss\n0,1.5\n1,1.2\n")
    os.utime(metrics, (1, 1))
    watch.pump()
    assert watch.series.points["loss"] == [(0.0, 1.5), (1.0, 1.2)]


def test_a_tqdm_postfix_is_one_point_per_check_not_per_redraw(tmp_path: Path) -> None:
    watch, _out, err = _watch(tmp_path, parse_metrics=True)
    redraws = b"".join(
        f"\r{i:3d}%|##| {i}/100 [00:01<00:00, loss={0.69 - i * 0.005:.3f}]".encode()
        for i in range(1, 60)
    )
    err.write_bytes(redraws + b"\r")
    watch.pump()
    watch.pump()  # the live tail pumps between checks: still no point
    assert watch.series.values("loss") == []
    watch.sample_refreshed()  # one check
    assert watch.series.values("loss") == [0.395]
    with err.open("ab") as f:
        f.write(b"100%|##| 100/100 [00:02<00:00, loss=0.160]\n")
    watch.pump(final=True)
    assert watch.series.values("loss") == [0.395, 0.16]  # the finished bar's line, once


def test_nan_and_inf_are_kept_aside_as_divergence(tmp_path: Path) -> None:
    watch, out, _err = _watch(tmp_path, parse_metrics=True)
    out.write_text("epoch 1 loss 0.7\nepoch 2 loss nan\nepoch 3 loss inf val_loss 0.9\n")
    watch.pump()
    assert watch.series.values("loss") == [0.7]
    assert str(watch.diverged["loss"]) == "nan"
    assert watch.series.values("val_loss") == [0.9]


def test_a_final_row_count_does_not_replace_progress_against_a_total(tmp_path: Path) -> None:
    watch, out, _err = _watch(tmp_path, parse_metrics=False)
    out.write_text("processed 50000/50000\nwrote 40256 rows\n")
    watch.pump(final=True)
    assert watch.progress is not None
    assert (watch.progress.done, watch.progress.total) == (50000, 50000)


def test_monitored_files_are_read_from_their_size_at_launch(tmp_path: Path) -> None:
    watch, _out, _err = _watch(tmp_path, parse_metrics=True)
    log = tmp_path / "metrics.csv"
    log.write_text("epoch,loss\n0,0.5\n1,0.5\n2,0.5\n")  # an earlier run's lines
    watch.start_at_current_sizes()
    with log.open("a") as f:
        f.write("epoch,loss\n0,0.9\n")
    watch.pump()
    assert watch.series.values("loss") == [0.9]

"""Reading growing output: \\r and \\n splitting, metric and progress parsing."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from code_runner.monitor.metrics import (
    CsvRowParser,
    MetricSeries,
    Progress,
    SegmentReader,
    choose_metric,
    parse_metrics,
    parse_progress,
    split_segments,
    terminal_lines,
)


def test_reader_splits_on_cr_and_lf_and_keeps_partial(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"a\r\nb\rc")
    reader = SegmentReader(log)
    first = reader.read_new()
    assert [(s.text, s.overwritten) for s in first] == [("a", False), ("b", True)]
    assert reader.partial_text() == "c"
    with log.open("ab") as f:
        f.write(b"d\n")
    assert [s.text for s in reader.read_new()] == ["cd"]
    assert reader.read_new() == []


def test_reader_flushes_on_final_and_restarts_on_truncation(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"one\ntwo")
    reader = SegmentReader(log)
    assert [s.text for s in reader.read_new()] == ["one"]
    assert [s.text for s in reader.read_new(final=True)] == ["two"]
    log.write_bytes(b"x\n")  # replaced by a shorter file
    assert [s.text for s in reader.read_new()] == ["x"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ab", "\r", "\n", "\r\n", "x=1", " "]), max_size=30), st.data())
def test_chunking_does_not_change_the_text(pieces: list[str], data: st.DataObject) -> None:
    whole = "".join(pieces).encode()
    cut = data.draw(st.integers(0, len(whole)))
    segs_whole, rest_whole = split_segments(whole, final=True)
    first, rest = split_segments(whole[:cut], final=False)
    second, _ = split_segments(rest + whole[cut:], final=True)
    joined = "".join(s.text for s in first + second)
    assert joined == "".join(s.text for s in segs_whole)
    assert rest_whole == b""


def test_terminal_lines_collapse_progress_rewrites() -> None:
    segs, _ = split_segments(b"start\n 10%|#  |\r 50%|##  |\r100%|###|\ndone\n", final=True)
    assert terminal_lines(segs) == ["start", "100%|###|", "done"]


def test_metric_forms() -> None:
    assert parse_metrics("Epoch 3/10 - loss: 0.523 - val_loss=0.61 acc: 81") == {
        "loss": 0.523,
        "val_loss": 0.61,
        "acc": 81.0,
    }
    assert parse_metrics('{"step": 4, "loss": 1e-3, "tag": "x", "ok": true}') == {
        "step": 4.0,
        "loss": 0.001,
    }
    assert parse_metrics("at 12:30:45 see http://host:8080/x") == {}
    regex = re.compile(r"(?P<key>\w+)~(?P<value>[0-9.]+)")
    assert parse_metrics("loss~0.5 acc~0.9", regex) == {"loss": 0.5, "acc": 0.9}
    per_group = re.compile(r"L=(?P<loss>[0-9.]+)")
    assert parse_metrics("L=0.7 loss: 3", per_group) == {"loss": 0.7}


def test_progress_forms() -> None:
    assert parse_progress(" 45%|####5     | 450/1000 [00:10<00:12, 44.2it/s]") == Progress(
        450, 1000
    )
    assert parse_progress("100%|##########| 1.2k/1.2k [00:01<00:00]") == Progress(1200, 1200)
    assert parse_progress("sim 30 of 200") == Progress(30, 200)
    assert parse_progress("processed 12,000 rows") == Progress(12000, None)
    assert parse_progress("rows: 500") == Progress(500, None)
    assert parse_progress("date 2024/01/02") is None
    assert parse_progress("nothing here") is None


def test_series_uses_step_keys_and_stays_bounded() -> None:
    series = MetricSeries()
    series.add({"epoch": 1, "loss": 0.9})
    series.add({"epoch": 2, "loss": 0.8, "val_loss": 1.0})
    assert series.points["loss"] == [(1, 0.9), (2, 0.8)]
    assert "epoch" not in series.points
    for i in range(12_000):
        series.add({"x": float(i)})
    assert len(series.points["x"]) <= 5000
    assert series.values("x")[-1] == 11_999.0
    assert series.last()["val_loss"] == 1.0


def test_choose_metric_prefers_validation_loss() -> None:
    series = MetricSeries()
    series.add({"acc": 0.1, "loss": 2.0})
    assert choose_metric(series, None) == "loss"
    series.add({"val_loss": 1.0})
    assert choose_metric(series, None) == "val_loss"
    assert choose_metric(series, "acc") == "acc"
    assert choose_metric(series, "missing") is None


def test_csv_log_rows() -> None:
    parser = CsvRowParser()
    assert parser.parse("epoch,step,train_loss,name") == {}
    assert parser.parse("0,10,0.5,run-a") == {"epoch": 0, "step": 10, "train_loss": 0.5}


def test_name_value_pairs_after_a_step_word_as_people_print_them() -> None:
    assert parse_metrics("epoch 3 loss 0.31 val_loss 0.32") == {
        "epoch": 3.0,
        "loss": 0.31,
        "val_loss": 0.32,
    }
    assert parse_metrics("Epoch 3/20 loss 0.5 acc 0.9") == {"epoch": 3.0, "loss": 0.5, "acc": 0.9}
    assert parse_metrics("loss: 0.5 - val_loss: 0.6") == {"loss": 0.5, "val_loss": 0.6}  # Keras
    assert parse_metrics("reading 3 files") == {}  # no step word: words and numbers stay text


def test_a_grid_search_cv_line_is_parameters_not_metrics() -> None:
    line = "[CV] END max_depth=3, min_samples_leaf=1; total time=   0.1s"
    assert parse_metrics(line) == {}
    assert parse_metrics("Fitting 5 folds for each of 8 candidates, totalling 40 fits") == {}

"""Output summaries: CSV, JSON, JSONL, parquet (and the message without pyarrow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from code_runner.monitor import summarize as summ
from code_runner.monitor.summarize import PARQUET_MISSING, summarize


def test_csv_types_and_statistics(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    path.write_text("id,score,name,flag\n1,0.5,a,true\n2,1.5,b,false\n3,,c,true\n")
    s = summarize(path)
    assert s is not None and s.rows == 3 and not s.sampled
    cols = {c.name: c for c in s.columns}
    assert cols["id"].type == "int" and cols["id"].mean == 2.0 and cols["id"].max == 3
    assert cols["score"].type == "float" and cols["score"].missing == 1
    assert cols["score"].std == pytest.approx(0.5)
    assert cols["name"].type == "str" and cols["name"].distinct == 3
    assert cols["flag"].type == "bool"


def test_large_csv_is_sampled_but_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summ, "SAMPLE_ROWS", 10)
    path = tmp_path / "big.csv"
    path.write_text("x\n" + "".join(f"{i}\n" for i in range(100)))
    s = summarize(path)
    assert s is not None and s.rows == 100 and s.sampled
    assert s.columns[0].max == 9  # statistics from the sample only, and the note says so
    assert s.note and "first 10 rows" in s.note
    monkeypatch.setattr(summ, "FULL_PARSE_BYTES", 10)
    s = summarize(path)
    assert s is not None and s.rows == 100 and "line breaks" in (s.note or "")


def test_jsonl_and_json(tmp_path: Path) -> None:
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"a": 1, "b": "x"}\n{"a": 3}\nnot json\n')
    s = summarize(jsonl)
    assert s is not None and s.rows == 3 and s.format == "jsonl"
    a = next(c for c in s.columns if c.name == "a")
    assert a.mean == 2.0 and "not valid JSON" in (s.note or "")
    table = tmp_path / "table.json"
    table.write_text(json.dumps([{"v": 1.0}, {"v": 2.0}, {"v": None}]))
    s = summarize(table)
    assert s is not None and s.rows == 3 and s.columns[0].missing == 1
    obj = tmp_path / "metrics.json"
    obj.write_text(json.dumps({"accuracy": 0.9, "confusion": [[1, 2]], "name": "m"}))
    s = summarize(obj)
    assert s is not None and s.keys == ("accuracy", "confusion", "name")
    assert {c.name for c in s.columns} == {"accuracy", "name"}


def test_unknown_and_broken_files(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"\0\1")
    assert summarize(tmp_path / "model.bin") is None
    (tmp_path / "bad.json").write_text("{oops")
    s = summarize(tmp_path / "bad.json")
    assert s is not None and s.note and s.note.startswith("could not summarize")


def test_parquet_with_pyarrow(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3, 4], "label": ["a", "b", "a", None]}), path)
    s = summarize(path)
    assert s is not None and s.rows == 4 and s.format == "parquet"
    cols = {c.name: c for c in s.columns}
    assert cols["x"].mean == 2.5 and cols["x"].type == "int64"
    assert cols["label"].missing == 1 and cols["label"].distinct == 2


def test_parquet_without_pyarrow_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1 not really")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    s = summarize(path)
    assert s is not None and s.note == PARQUET_MISSING
    assert "pip install" in PARQUET_MISSING and "pyarrow" in PARQUET_MISSING

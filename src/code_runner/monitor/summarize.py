"""Summaries of structured outputs: rows, columns, types, basic statistics.

The report says what an output holds without judging it. Large files are sampled (the
first `SAMPLE_ROWS` rows feed the statistics; rows are still counted in full, by line breaks
past `FULL_PARSE_BYTES`), so a 10 GB CSV costs a streaming pass, not a load. Parquet needs
the optional `pyarrow`; without it the summary says how to install it instead of failing.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from code_runner.problems import clip

SAMPLE_ROWS = 50_000
FULL_PARSE_BYTES = 64 * 1024 * 1024
MAX_COLUMNS = 200
PARQUET_MISSING = (
    "parquet summary needs pyarrow, which is not installed: "
    "pip install 'code-runner[parquet]' (or pip install pyarrow)"
)


class ColumnSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    type: str
    count: int
    missing: int
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    distinct: int | None = None


class TableSummary(BaseModel):
    """What a structured output holds. `note` explains sampling or why there is no summary."""

    model_config = ConfigDict(frozen=True)

    format: str
    rows: int | None = None
    columns: tuple[ColumnSummary, ...] = ()
    sampled: bool = False
    keys: tuple[str, ...] = ()
    note: str | None = None


def summarize(path: Path) -> TableSummary | None:
    """Summary by file suffix; None for formats we do not summarize."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            return _csv(path, "\t" if suffix == ".tsv" else ",")
        if suffix in (".jsonl", ".ndjson"):
            return _jsonl(path)
        if suffix == ".json":
            return _json(path)
        if suffix in (".parquet", ".pq"):
            return _parquet(path)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as exc:
        return TableSummary(format=suffix.lstrip("."), note=f"could not summarize: {exc}")
    return None


def _csv(path: Path, delimiter: str) -> TableSummary:
    with path.open("r", encoding="utf-8", errors="replace", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader, None)
        if header is None:
            return TableSummary(format="csv", rows=0, note="empty file")
        sample: list[list[str]] = []
        for row in reader:
            sample.append(row)
            if len(sample) >= SAMPLE_ROWS:
                break
        more = next(reader, None) is not None
        if not more:
            rows = len(sample)
        elif path.stat().st_size <= FULL_PARSE_BYTES:
            rows = len(sample) + 1 + sum(1 for _ in reader)
        else:
            rows = _count_lines(path) - 1
    columns = [
        _column(name or f"column_{i + 1}", (_cell(r, i) for r in sample))
        for i, name in enumerate(header[:MAX_COLUMNS])
    ]
    note = f"statistics from the first {SAMPLE_ROWS} rows" if more else None
    if more and path.stat().st_size > FULL_PARSE_BYTES:
        note = f"{note}; rows counted by line breaks"
    return TableSummary(format="csv", rows=rows, columns=tuple(columns), sampled=more, note=note)


def _cell(row: list[str], index: int) -> Any:
    if index >= len(row):
        return None
    text = row[index].strip()
    if text == "" or text.lower() in ("na", "nan", "null", "none"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _count_lines(path: Path) -> int:
    count = 0
    last = b"\n"
    with path.open("rb") as f:
        while chunk := f.read(1024 * 1024):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)


def _jsonl(path: Path) -> TableSummary:
    records: list[Mapping[str, Any]] = []
    rows = 0
    bad = 0
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            rows += 1
            if len(records) >= SAMPLE_ROWS:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            records.append(obj if isinstance(obj, dict) else {"value": obj})
    summary = _records("jsonl", records, rows)
    notes = [summary.note] if summary.note else []
    if bad:
        notes.append(f"{bad} lines were not valid JSON")
    return summary.model_copy(update={"note": "; ".join(notes) or None})


def _json(path: Path) -> TableSummary:
    if path.stat().st_size > FULL_PARSE_BYTES:
        return TableSummary(format="json", note="too large to load for a summary")
    data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    if isinstance(data, list):
        records: list[Mapping[str, Any]] = [
            r if isinstance(r, dict) else {"value": r} for r in data[:SAMPLE_ROWS]
        ]
        return _records("json", records, len(data))
    if isinstance(data, dict):
        scalars = {k: v for k, v in data.items() if not isinstance(v, dict | list)}
        columns = tuple(_column(str(k), [v]) for k, v in list(scalars.items())[:MAX_COLUMNS])
        return TableSummary(format="json", keys=tuple(str(k) for k in data), columns=columns)
    return TableSummary(format="json", note=f"a single {type(data).__name__} value")


def _records(fmt: str, records: list[Mapping[str, Any]], rows: int) -> TableSummary:
    names: list[str] = []
    for record in records:
        for key in record:
            if key not in names and len(names) < MAX_COLUMNS:
                names.append(str(key))
    columns = tuple(_column(n, (r.get(n) for r in records)) for n in names)
    sampled = rows > len(records)
    note = f"statistics from the first {len(records)} rows" if sampled else None
    return TableSummary(format=fmt, rows=rows, columns=columns, sampled=sampled, note=note)


def _parquet(path: Path) -> TableSummary:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return TableSummary(format="parquet", note=PARQUET_MISSING)
    pfile = pq.ParquetFile(str(path))
    rows = int(pfile.metadata.num_rows)
    names = [str(n) for n in pfile.schema_arrow.names][:MAX_COLUMNS]
    sample: dict[str, list[Any]] = {n: [] for n in names}
    taken = 0
    for batch in pfile.iter_batches(batch_size=10_000, columns=names):
        data = batch.to_pydict()
        for name in names:
            sample[name].extend(data[name])
        taken += batch.num_rows
        if taken >= SAMPLE_ROWS:
            break
    types = {str(f.name): str(f.type) for f in pfile.schema_arrow}
    columns = tuple(
        _column(n, sample[n][:SAMPLE_ROWS]).model_copy(update={"type": types[n]}) for n in names
    )
    sampled = rows > taken
    note = f"statistics from the first {min(taken, SAMPLE_ROWS)} rows" if sampled else None
    return TableSummary(format="parquet", rows=rows, columns=columns, sampled=sampled, note=note)


def _column(name: str, values: Iterable[Any]) -> ColumnSummary:
    """Type and statistics of one column: numbers get min/max/mean/std, others a distinct count."""
    numbers: list[float] = []
    others: set[str] = set()
    kinds: set[str] = set()
    count = missing = 0
    for value in values:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            missing += 1
            continue
        count += 1
        if isinstance(value, bool):
            kinds.add("bool")
            others.add(str(value))
        elif isinstance(value, int | float):
            kinds.add("int" if isinstance(value, int) else "float")
            if math.isfinite(value):
                numbers.append(float(value))
        else:
            kinds.add("str" if isinstance(value, str) else type(value).__name__)
            if len(others) < 10_000:
                others.add(_short(value))
    kind = _kind_name(kinds)
    if kind in ("int", "float") and numbers:
        return ColumnSummary(
            name=name,
            type=kind,
            count=count,
            missing=missing,
            min=min(numbers),
            max=max(numbers),
            mean=statistics.fmean(numbers),
            std=statistics.pstdev(numbers) if len(numbers) > 1 else 0.0,
        )
    return ColumnSummary(
        name=name, type=kind, count=count, missing=missing, distinct=len(others) or None
    )


def _kind_name(kinds: set[str]) -> str:
    if not kinds:
        return "empty"
    if kinds <= {"int", "float"}:
        return "float" if "float" in kinds else "int"
    if len(kinds) == 1:
        return next(iter(kinds))
    return "mixed"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return clip(text, 200, marker="")

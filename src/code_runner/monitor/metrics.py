"""Reading what a running command writes: segments, metrics and progress.

Output is read incrementally from files (never pipes) and split on `\\r` as well as `\\n`,
because progress bars rewrite one line with `\\r` and their updates would otherwise arrive
as a single endless line. Parsing is deliberately forgiving: `key: value`, `key=value` and
JSON lines by default, a user regex when the log speaks another dialect.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_MAX_READ_BYTES = 4 * 1024 * 1024
_MAX_SEGMENT_CHARS = 4096
_MAX_POINTS_PER_METRIC = 5000

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)\b"
_KV_RE = re.compile(
    rf"(?<![\w./])([A-Za-z_][\w./-]{{0,63}})\s*[:=]\s*({_NUMBER})(?![\w.:/])", re.IGNORECASE
)
_STEP_KEYS = ("step", "global_step", "iteration", "iter", "epoch", "batch")
# `epoch 3 loss 0.31 val_loss 0.32`: a step word and its number, then name/value pairs
_STEP_WORD_RE = re.compile(
    r"(?<![\w./-])(step|global_step|iteration|iter|epoch|batch)\s*[#]?\s*(\d+)(?:\s*/\s*\d+)?"
    r"(?![\w.])",
    re.IGNORECASE,
)
_PAIR_RE = re.compile(
    rf"(?<![\w./])([A-Za-z_][\w./-]{{0,63}})\s+({_NUMBER})(?![\w.:/])", re.IGNORECASE
)
# lines that are not metrics even though they look like them: a scikit-learn search's
# `[CV] END max_depth=3, min_samples_leaf=1; total time= 0.1s` lists parameters
_NOT_METRICS = re.compile(r"^\s*\[CV\b|^\s*Fitting \d+ folds")
_TQDM_RE = re.compile(r"(\d+)%\|[^|]*\|\s*([\d.]+)([kMG]?)/([\d.]+)([kMG]?)")
_FRACTION_RE = re.compile(r"(?<![\w.:/-])(\d[\d,]*)\s*(?:/|\bof\b)\s*(\d[\d,]*)(?![\w.:/-])")
_COUNTER_RE = re.compile(
    r"(?:\b(rows|records|lines|iterations|iters|sims|simulations|samples|steps|chunks|items|"
    r"draws|batches)\b\s*[:=]?\s*(\d[\d,]*))|(?:(\d[\d,]*)\s+(rows|records|lines|iterations|"
    r"sims|simulations|samples|steps|chunks|items|draws|batches)\b)",
    re.IGNORECASE,
)
_SUFFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


@dataclass(frozen=True)
class Segment:
    """One piece of output between line breaks; `overwritten` when it ended with `\\r`."""

    text: str
    overwritten: bool


class SegmentReader:
    """Reads new bytes of a growing file and returns whole segments, keeping the partial tail."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self.skipped_bytes = 0

    def read_new(self, *, final: bool = False) -> list[Segment]:
        """Segments completed since the last call; `final` flushes an unterminated last line."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if size < self.offset:  # truncated or replaced: start again
            self.offset, self._partial = 0, b""
        if size - self.offset > _MAX_READ_BYTES:
            # Too much at once to parse cheaply: keep the newest part, count what we skip.
            self.skipped_bytes += size - self.offset - _MAX_READ_BYTES
            self.offset = size - _MAX_READ_BYTES
            self._partial = b""
        data = b""
        if size > self.offset:
            try:
                with self.path.open("rb") as f:
                    f.seek(self.offset)
                    data = f.read(size - self.offset)
            except OSError:
                return []
            self.offset += len(data)
        segments, rest = split_segments(self._partial + data, final=final)
        self._partial = rest[-_MAX_SEGMENT_CHARS * 4 :]
        return segments

    def partial_text(self) -> str:
        """The unterminated last piece: a progress bar's current state lives here."""
        return self._partial.decode("utf-8", errors="replace")[-_MAX_SEGMENT_CHARS:]


def split_segments(data: bytes, *, final: bool) -> tuple[list[Segment], bytes]:
    """Split on `\\r\\n`, `\\r` and `\\n`; return the segments and the unterminated rest."""
    segments: list[Segment] = []
    start = 0
    for m in re.finditer(rb"\r\n|\r|\n", data):
        segments.append(_segment(data[start : m.start()], overwritten=m.group(0) == b"\r"))
        start = m.end()
    rest = data[start:]
    if final and rest:
        segments.append(_segment(rest, overwritten=False))
        rest = b""
    return segments, rest


def _segment(raw: bytes, *, overwritten: bool) -> Segment:
    text = raw.decode("utf-8", errors="replace")[:_MAX_SEGMENT_CHARS]
    return Segment(text, overwritten)


def terminal_lines(segments: Iterable[Segment]) -> list[str]:
    """What a terminal would show: `\\r`-rewritten pieces collapse into the line they end on."""
    lines: list[str] = []
    pending: str | None = None
    for seg in segments:
        if seg.overwritten:
            pending = seg.text if seg.text.strip() else pending
            continue
        lines.append(seg.text if seg.text.strip() or pending is None else pending)
        pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def parse_metrics(text: str, regex: re.Pattern[str] | None = None) -> dict[str, float]:
    """Numeric metrics in one segment: a user regex, a JSON object, key: value / key=value,
    or name/value pairs after a step word (`epoch 3 loss 0.31`).

    NaN and inf are kept: a diverged metric must be seen, not dropped."""
    if regex is not None:
        return _parse_regex(text, regex)
    if _NOT_METRICS.search(text):
        return {}
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            return {
                str(k): float(v)
                for k, v in obj.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
    found = {m.group(1): float(m.group(2)) for m in _KV_RE.finditer(text)}
    if not found and (step := _STEP_WORD_RE.search(text)):
        found[step.group(1).lower()] = float(step.group(2))
        for m in _PAIR_RE.finditer(text, step.end()):
            found.setdefault(m.group(1), float(m.group(2)))
    return found


def _parse_regex(text: str, regex: re.Pattern[str]) -> dict[str, float]:
    found: dict[str, float] = {}
    for m in regex.finditer(text):
        groups = m.groupdict()
        if "key" in groups and "value" in groups:
            pairs = [(groups["key"], groups["value"])]
        else:
            pairs = list(groups.items())
        for key, raw in pairs:
            if key is None or raw is None:
                continue
            try:
                value = float(raw)
            except ValueError:
                continue
            found[key] = value
    return found


@dataclass(frozen=True)
class Progress:
    """Work done so far and, when the log says it, the total."""

    done: float
    total: float | None


def parse_progress(text: str) -> Progress | None:
    """Progress in one segment: a tqdm bar, `n/N` or `n of N`, or a counter like `rows: 1200`."""
    if m := _TQDM_RE.search(text):
        done = float(m.group(2)) * _SUFFIX[m.group(3)]
        total = float(m.group(4)) * _SUFFIX[m.group(5)]
        if total > 0 and done <= total:
            return Progress(done, total)
    for m in _FRACTION_RE.finditer(text):
        done, total = _int(m.group(1)), _int(m.group(2))
        if total > 0 and done <= total:
            return Progress(float(done), float(total))
    if m := _COUNTER_RE.search(text):
        raw = m.group(2) or m.group(3)
        return Progress(float(_int(raw)), None)
    return None


def _int(raw: str) -> int:
    return int(raw.replace(",", ""))


@dataclass
class MetricSeries:
    """Points of each metric in arrival order, with the step the log gave (or a counter)."""

    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    dropped: int = 0

    def add(self, values: dict[str, float]) -> None:
        """Record one parsed line. A step-like key in the same line becomes the x value."""
        step_key = next((k for k in _STEP_KEYS if k in values), None)
        for name, value in values.items():
            if name == step_key:
                continue
            series = self.points.setdefault(name, [])
            x = values[step_key] if step_key else float(len(series))
            if len(series) >= _MAX_POINTS_PER_METRIC:
                # Keep memory bounded on endless logs: thin the older half.
                series[:] = series[: len(series) // 2 : 2] + series[len(series) // 2 :]
                self.dropped += 1
            series.append((x, value))

    def names(self) -> list[str]:
        return list(self.points)

    def values(self, name: str) -> list[float]:
        return [v for _, v in self.points.get(name, [])]

    def last(self) -> dict[str, float]:
        return {name: pts[-1][1] for name, pts in self.points.items() if pts}


def choose_metric(series: MetricSeries, wanted: str | None) -> str | None:
    """The metric to watch for a plateau: the user's, else val_loss, loss, any *loss*."""
    names = series.names()
    if wanted is not None:
        return wanted if wanted in names else None
    for preferred in ("val_loss", "validation_loss", "eval_loss", "loss", "train_loss"):
        if preferred in names:
            return preferred
    losses = [n for n in names if "loss" in n.lower()]
    if losses:
        return losses[0]
    ignore = {"lr", "learning_rate", "time", "elapsed", *_STEP_KEYS}
    rest = [n for n in names if n.lower() not in ignore and len(series.points[n]) >= 2]
    return rest[0] if rest else None


class CsvRowParser:
    """Metrics from a CSV log (Lightning's CSVLogger, pandas `to_csv` per epoch): header first."""

    def __init__(self) -> None:
        self.header: list[str] | None = None

    def parse(self, text: str) -> dict[str, float]:
        cells = [c.strip() for c in text.split(",")]
        if self.header is None:
            self.header = cells
            return {}
        found: dict[str, float] = {}
        for name, cell in zip(self.header, cells, strict=False):
            try:
                value = float(cell)
            except ValueError:
                continue
            if name and math.isfinite(value):
                found[name] = value
        return found

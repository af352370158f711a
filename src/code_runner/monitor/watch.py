"""Everything the monitor reads from a running command: output, monitored files, parsed data.

One `OutputWatch` owns the incremental readers, so each byte is read once and feeds the live
tail, the metric series, the progress counter and the stall signature alike. Monitored paths
are resolved again on every pump (a log file may appear after start); directories and binary
files only count as activity.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from code_runner.monitor.collect import expand
from code_runner.monitor.metrics import (
    CsvRowParser,
    MetricSeries,
    Progress,
    SegmentReader,
    choose_metric,
    parse_metrics,
    parse_progress,
    terminal_lines,
)

_BINARY_SUFFIXES = {
    ".parquet",
    ".pq",
    ".png",
    ".jpg",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".hdf5",
    ".npy",
    ".npz",
    ".pkl",
    ".pickle",
    ".bin",
    ".safetensors",
    ".zip",
    ".gz",
    ".arrow",
    ".feather",
    ".db",
}
_MAX_DIR_ENTRIES = 1000
_RECENT_LINES = 200


@dataclass(frozen=True)
class Shown:
    """New whole lines of a stream, and the line being rewritten in place (a progress bar)."""

    lines: tuple[str, ...]
    transient: str | None


class OutputWatch:
    def __init__(
        self,
        stdout_path: Path,
        stderr_path: Path,
        cwd: Path,
        monitor: tuple[str, ...],
        *,
        parse_metrics: bool,
        parse_progress: bool = True,
        metric_regex: re.Pattern[str] | None = None,
    ) -> None:
        self.cwd = cwd
        self.patterns = monitor
        self.parse_metrics = parse_metrics
        self.parse_progress = parse_progress
        self.metric_regex = metric_regex
        self.streams = {"stdout": SegmentReader(stdout_path), "stderr": SegmentReader(stderr_path)}
        self.files: dict[Path, SegmentReader] = {}
        self.csv: dict[Path, CsvRowParser] = {}
        self.series = MetricSeries()
        self.progress: Progress | None = None
        self._recent: deque[str] = deque(maxlen=_RECENT_LINES)
        self.diverged: dict[str, float] = {}  # metric -> the first NaN/inf it showed
        self._refreshed: dict[str, float] = {}  # the latest `\r`-refreshed values (tqdm)

    def _monitored(self) -> list[Path]:
        return [path for pattern in self.patterns for path in expand(self.cwd, pattern)]

    def pump(self, *, final: bool = False) -> dict[str, Shown]:
        """Read what is new; parse it; return what a terminal shows of stdout and stderr."""
        shown: dict[str, Shown] = {}
        for name, reader in self.streams.items():
            segments = reader.read_new(final=final)
            for seg in segments:
                self._parse(seg.text, None, refreshed=seg.overwritten)
            cut = len(segments)
            while cut and segments[cut - 1].overwritten:
                cut -= 1
            lines = terminal_lines(segments[:cut])
            rewriting = next((g.text for g in reversed(segments[cut:]) if g.text.strip()), None)
            partial = reader.partial_text()
            self._recent.extend(lines)
            shown[name] = Shown(tuple(lines), (partial.strip() and partial) or rewriting)
            if self.parse_progress and not final and partial and (p := parse_progress(partial)):
                self._progressed(p)
        for path in self._monitored():
            if path.is_dir() or path.suffix.lower() in _BINARY_SUFFIXES:
                continue
            reader = self.files.setdefault(path, SegmentReader(path))
            csv_parser = (
                self.csv.setdefault(path, CsvRowParser()) if path.suffix == ".csv" else None
            )
            for seg in reader.read_new(final=final):
                self._parse(seg.text, csv_parser)
        if final:
            self.sample_refreshed()
        return shown

    def sample_refreshed(self) -> None:
        """Take the latest `\r`-refreshed values (a tqdm postfix) as one point: once per
        check, so a bar redrawn 50 times a second does not make 50 points."""
        if self._refreshed:
            self._add(self._refreshed)
            self._refreshed = {}

    def _add(self, values: dict[str, float]) -> None:
        finite = {k: v for k, v in values.items() if math.isfinite(v)}
        for name, value in values.items():
            if not math.isfinite(value):
                self.diverged.setdefault(name, value)
        if finite:
            self.series.add(finite)

    def _parse(
        self, text: str, csv_parser: CsvRowParser | None, *, refreshed: bool = False
    ) -> None:
        if not text.strip():
            return
        if self.parse_metrics:
            values = (
                csv_parser.parse(text) if csv_parser else parse_metrics(text, self.metric_regex)
            )
            if values and refreshed:
                self._refreshed = values
            elif values:
                self._refreshed = {}  # a whole line supersedes the bar's last redraw
                self._add(values)
        if self.parse_progress and csv_parser is None and (p := parse_progress(text)):
            self._progressed(p)

    def _progressed(self, new: Progress) -> None:
        """A bare count (`wrote 40256 rows`) never replaces progress against a total
        (`processed 50000/50000`): it counts something else."""
        if new.total is None and self.progress is not None and self.progress.total is not None:
            return
        self.progress = new

    def start_at_current_sizes(self) -> None:
        """Monitored files that exist before launch are read from their current size:
        bytes an earlier run appended are not this run's."""
        for path in self._monitored():
            if path.is_file():
                reader = self.files.setdefault(path, SegmentReader(path))
                reader.offset = _stat(path)[0]

    def activity(self) -> tuple[tuple[str, int, int], ...]:
        """(name, size, mtime_ns) of everything watched: any change means "not stalled"."""
        sig: list[tuple[str, int, int]] = []
        for name, reader in self.streams.items():
            sig.append((name, *_stat(reader.path)))
        for path in self._monitored():
            if path.is_dir():
                count = size = newest = 0
                for i, entry in enumerate(path.rglob("*")):
                    if i >= _MAX_DIR_ENTRIES:
                        break
                    s, m = _stat(entry)
                    count, size, newest = count + 1, size + s, max(newest, m)
                sig.append((str(path), size + count, newest))
            else:
                sig.append((str(path), *_stat(path)))
        return tuple(sig)

    def output_bytes(self) -> int:
        return sum(_stat(r.path)[0] for r in self.streams.values())

    def skipped_bytes(self) -> int:
        readers = [*self.streams.values(), *self.files.values()]
        return sum(r.skipped_bytes for r in readers)

    def watched_metric(self, wanted: str | None) -> str | None:
        return choose_metric(self.series, wanted)

    def recent_lines(self) -> list[str]:
        return list(self._recent)


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, 0)
    return (st.st_size, st.st_mtime_ns)

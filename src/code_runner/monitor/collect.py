"""After the process ends: expected outputs with sizes and summaries, and the stderr tail.

Only declared paths are read (expected outputs, given relative to the experiment's cwd; a
directory lists its files, a glob its matches), so the record never wanders through a
user's disk. A missing output is flagged, not fatal: the report says what happened.
"""

from __future__ import annotations

import glob
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from code_runner.monitor.metrics import split_segments, terminal_lines
from code_runner.monitor.summarize import TableSummary, summarize
from code_runner.proc import read_head_tail

MAX_FILES_PER_PATTERN = 200
MAX_SUMMARIES = 20
STDERR_TAIL_LINES = 50
_TAIL_BYTES = 64 * 1024


class OutputFile(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    size_bytes: int
    summary: TableSummary | None = None


class ExpectedOutput(BaseModel):
    """One `--expect` entry and what it matched; `missing` when it matched nothing."""

    model_config = ConfigDict(frozen=True)

    pattern: str
    missing: bool
    files: tuple[OutputFile, ...] = ()
    truncated: bool = False


def expand(cwd: Path, pattern: str) -> list[Path]:
    """A declared path: relative to cwd, with glob magic (`*`, `?`, `[`, `**`) expanded."""
    path = Path(pattern)
    if not glob.has_magic(pattern):
        return [path if path.is_absolute() else cwd / path]
    if path.is_absolute():
        root, relative = Path(path.anchor), str(path.relative_to(path.anchor))
    else:
        root, relative = cwd, pattern
    return sorted(root.glob(relative))


def _matches(cwd: Path, pattern: str) -> list[Path]:
    found = [p for p in expand(cwd, pattern) if p.exists()]
    files: list[Path] = []
    for path in found:
        if path.is_dir():
            files.extend(p for p in sorted(path.rglob("*")) if p.is_file())
        elif path.is_file():
            files.append(path)
        if len(files) > MAX_FILES_PER_PATTERN:
            break
    return files


def count_present(cwd: Path, patterns: tuple[str, ...]) -> int:
    """How many expected outputs exist now: the analysis type's intermediate-output count."""
    return sum(1 for pattern in patterns if _matches(cwd, pattern))


def collect_outputs(cwd: Path, patterns: tuple[str, ...]) -> tuple[ExpectedOutput, ...]:
    """List each expected output with its size; summarize structured ones (bounded count)."""
    results: list[ExpectedOutput] = []
    summaries_left = MAX_SUMMARIES
    for pattern in patterns:
        files = _matches(cwd, pattern)
        entries: list[OutputFile] = []
        for path in files[:MAX_FILES_PER_PATTERN]:
            try:
                size = path.stat().st_size
            except OSError:
                continue
            summary = None
            if summaries_left > 0:
                summary = summarize(path)
                summaries_left -= summary is not None
            entries.append(OutputFile(path=_shown(path, cwd), size_bytes=size, summary=summary))
        results.append(
            ExpectedOutput(
                pattern=pattern,
                missing=not entries,
                files=tuple(entries),
                truncated=len(files) > MAX_FILES_PER_PATTERN,
            )
        )
    return tuple(results)


def _shown(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def tail_lines(path: Path, count: int = STDERR_TAIL_LINES) -> list[str]:
    """The last `count` lines as a terminal shows them (progress-bar rewrites collapsed)."""
    text, size = read_head_tail(path, 0, _TAIL_BYTES)
    if size > _TAIL_BYTES:
        text = text.split("\n", 3)[-1]  # drop the marker and the cut first line
    segments, _ = split_segments(text.encode("utf-8"), final=True)
    lines = terminal_lines(segments)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines[-count:]

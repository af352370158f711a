"""`code-runner exec compare RUN_DIR...`: finished runs side by side.

One row per run: the command, the flags parsed from its argv (`--lr 0.1`, `--seed=3`), the
state, the duration, and each metric's final and best value (best is the lowest for a loss or
an error, else the highest). As a table for people, or as JSON or CSV for tools.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from code_runner.monitor.result import ExperimentResult, load_result

Row = dict[str, str | float | None]


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """`--name value`, `--name=value` and bare `--flag` (as "true") from a command's argv."""
    flags: dict[str, str] = {}
    args = list(argv)
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg in ("-", "--") or _is_number(arg):
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if not name:
            continue
        if eq:
            flags[name] = value
        elif i + 1 < len(args) and (not args[i + 1].startswith("-") or _is_number(args[i + 1])):
            flags[name] = args[i + 1]
        else:
            flags[name] = "true"
    return flags


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _lower_is_better(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in ("loss", "error", "err", "mse", "mae", "rmse", "perplexity"))


def row_of(run_dir: Path, result: ExperimentResult) -> Row:
    row: Row = {
        "run": run_dir.name,
        "command": result.display_command,
        "state": result.state.value,
        "success": "yes" if result.success else "no",
        "duration_s": result.duration_s,
    }
    for name, value in parse_flags(result.command).items():
        row[f"--{name}"] = value
    for metric in result.metrics:
        best = metric.min if _lower_is_better(metric.name) else metric.max
        row[f"{metric.name} final"] = metric.last
        row[f"{metric.name} best"] = best
    return row


def compare_runs(run_dirs: Sequence[Path]) -> list[Row]:
    """One row per run dir (RecordError when one holds no finished result)."""
    return [row_of(run_dir, load_result(run_dir)) for run_dir in run_dirs]


def columns(rows: Sequence[Row]) -> list[str]:
    """Every key, in first-seen order (runs with other flags or metrics add columns)."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def _cell(value: str | float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return value


def render_compare_table(rows: Sequence[Row]) -> str:
    """Runs as columns, fields as rows: a long command or many metrics still fit a terminal."""
    keys = columns(rows)
    width = max(len(k) for k in keys)
    cells = [[_cell(row.get(key)) for row in rows] for key in keys]
    widths = [max(len(c[i]) for c in cells) for i in range(len(rows))]
    lines = []
    for key, line in zip(keys, cells, strict=True):
        padded = "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True))
        lines.append(f"{key.ljust(width)}  {padded}".rstrip())
    return "\n".join(lines)


def render_compare_csv(rows: Sequence[Row]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns(rows), restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()

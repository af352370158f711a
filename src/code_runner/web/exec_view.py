"""What the exec run page and Compare show, read through `monitor`.

Metric points are parsed from the run's own `stdout.log` with the monitor's parser
(`monitor.metrics`: the same segments, the same metric syntax the live checks use), so the
page needs nothing the record does not already hold. Memory over time is the record's
samples once the run has finished, and `status.json`'s snapshots while it runs.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_runner import monitor
from code_runner.errors import RecordError
from code_runner.monitor.alerts import AlertKind, Option, options_for
from code_runner.monitor.metrics import MetricSeries, parse_metrics, split_segments, terminal_lines
from code_runner.web.catalog import exec_result, read_json
from code_runner.web.roots import OutsideRoots, Roots, open_file
from code_runner.web.task_view import read_events, tail

MAX_LOG_BYTES = 16 * 1024 * 1024  # metrics are parsed from at most this much of stdout.log


def locate_exec(roots: Roots, root: int, rel: str) -> Path:
    """The run dir an exec URL names; `OutsideRoots` for anything else."""
    run_dir = roots.resolve(root, rel)
    if not (run_dir / "status.json").is_file() or not (run_dir / "spec.json").is_file():
        raise OutsideRoots("no such exec run")
    return run_dir


def _regex(spec: dict[str, Any]) -> re.Pattern[str] | None:
    raw = spec.get("metric_regex")
    try:
        return re.compile(raw) if isinstance(raw, str) and raw else None
    except re.error:
        return None


def metric_points(run_dir: Path) -> dict[str, list[list[float | None]]]:
    """Each metric's points as [[x...], [y...]], parsed from stdout.log and stderr.log."""
    series = MetricSeries()
    regex = _regex(read_json(run_dir / "spec.json"))
    for name in ("stdout.log", "stderr.log"):
        try:
            with open_file(run_dir / name) as handle:
                data = handle.read(MAX_LOG_BYTES)
        except OSError:
            continue
        segments, _ = split_segments(data, final=True)
        for line in terminal_lines(segments):
            values = parse_metrics(line, regex)
            if values:
                series.add(values)
    return {
        name: [[x for x, _ in points], [y if math.isfinite(y) else None for _, y in points]]
        for name, points in series.points.items()
        if points
    }


@dataclass(frozen=True)
class PendingAlert:
    """The alert waiting for an answer, and the buttons that answer it."""

    kind: str
    check_no: int
    detail: str
    options: tuple[Option, ...]

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.check_no}"


def pending_alert(status: dict[str, Any], events: list[dict[str, Any]]) -> PendingAlert | None:
    """From `status.json`: the alert the monitor waits on, with its detail from the events."""
    kind, check_no = status.get("pending_alert"), status.get("pending_check_no")
    if status.get("finished") or kind not in AlertKind.__members__ or not isinstance(check_no, int):
        return None
    detail = next(
        (
            str(e.get("detail", ""))
            for e in reversed(events)
            if e.get("kind") in ("alert", "alert_repeated") and e.get("alert") == kind
        ),
        "",
    )
    return PendingAlert(str(kind), check_no, detail, options_for(AlertKind(str(kind))))


@dataclass(frozen=True)
class ExecPage:
    run_dir: Path
    status: dict[str, Any]
    spec: dict[str, Any]
    result: monitor.ExperimentResult | None
    events: list[dict[str, Any]]
    stdout_tail: str
    stderr_tail: str

    @property
    def finished(self) -> bool:
        return self.result is not None or bool(self.status.get("finished"))

    @property
    def pending(self) -> PendingAlert | None:
        return None if self.finished else pending_alert(self.status, self.events)

    @property
    def answers(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") == "answer"]

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") in ("alert", "alert_repeated")]

    @property
    def command(self) -> str:
        if self.result is not None:
            return self.result.display_command
        return " ".join(str(part) for part in self.spec.get("command") or [])

    @property
    def events_offset(self) -> int:
        try:
            return (self.run_dir / "events.jsonl").stat().st_size
        except OSError:
            return 0


def load_exec(run_dir: Path) -> ExecPage:
    result = exec_result(run_dir)
    return ExecPage(
        run_dir=run_dir,
        status=read_json(run_dir / "status.json"),
        spec=read_json(run_dir / "spec.json"),
        result=result,
        events=read_events(run_dir / "events.jsonl"),
        stdout_tail=tail(run_dir / "stdout.log", 16 * 1024),
        stderr_tail=tail(run_dir / "stderr.log", 16 * 1024),
    )


def chart_data(page: ExecPage) -> dict[str, Any]:
    """What the page's charts draw: metric series and memory over time."""
    memory: list[list[float | None]] = [[], [], []]
    if page.result is not None:
        for t_s, rss, pss in page.result.memory_samples:
            memory[0].append(t_s)
            memory[1].append(rss / 2**20)
            memory[2].append(None if pss is None else pss / 2**20)
    return {
        "metrics": metric_points(page.run_dir),
        "memory": memory,
        "stdout_tail": page.stdout_tail,
        "stderr_tail": page.stderr_tail,
    }


def compare_rows(run_dirs: list[Path]) -> tuple[list[str], list[dict[str, Any]]]:
    """`exec compare`'s rows for finished runs; a run without a result gets a note."""
    rows: list[dict[str, Any]] = []
    for run_dir in run_dirs:
        if exec_result(run_dir) is None:
            rows.append({"run": run_dir.name, "state": "no result yet"})
            continue
        try:
            rows.extend(monitor.compare_runs([run_dir]))
        except RecordError as exc:
            rows.append({"run": run_dir.name, "state": f"no result ({exc.message})"})
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return list(columns), rows


def dumps(value: object) -> str:
    """JSON for a `<script type="application/json">` block: `<` never appears raw."""
    return json.dumps(value, allow_nan=False, default=str).replace("<", "\\u003c")


__all__ = [
    "ExecPage",
    "PendingAlert",
    "chart_data",
    "compare_rows",
    "dumps",
    "load_exec",
    "locate_exec",
    "metric_points",
    "pending_alert",
]

"""After the command ends: collect outputs, judge the user's criteria, plot, write the record.

Collection reads only declared paths and the run's own logs, and the result is rendered into
`experiment_result.md` from the same value that goes into `result.json`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from typing import Any

import code_runner.monitor.figures as figures
from code_runner import files
from code_runner.clock import utc_now
from code_runner.monitor.checks import ProgressCheck
from code_runner.monitor.collect import collect_outputs, tail_lines
from code_runner.monitor.criteria import Evidence, judge
from code_runner.monitor.detect import Detection
from code_runner.monitor.plot import line_chart, sparkline
from code_runner.monitor.record import ExperimentRecord, MonitorEvent
from code_runner.monitor.report import render_report
from code_runner.monitor.result import (
    AlertRecord,
    AnswerRecord,
    ExperimentResult,
    KillSummary,
    MetricSummary,
    ProgressSummary,
)
from code_runner.monitor.spec import ExperimentSpec, ExperimentType
from code_runner.monitor.state import ExperimentState
from code_runner.monitor.watch import OutputWatch
from code_runner.proc import read_head_tail

MAX_PLOTS = 8
_EVIDENCE_BYTES = 16 * 1024 * 1024
PROVENANCE_FILE = "provenance.json"


@dataclass(frozen=True)
class Outcome:
    """What the monitor loop knows when the command has ended.

    Each field is the `ExperimentResult` field of the same name, so the record takes it as is.
    """

    state: ExperimentState
    exit_code: int | None
    signal: int | None
    duration_s: float
    started_at: str
    kill: KillSummary | None
    leftovers_killed: int
    checks: int
    peak_rss_bytes: int
    peak_pss_bytes: int | None
    peak_processes: int
    memory_baseline_bytes: int | None
    cpu_s: float
    memory_samples: tuple[tuple[float, int, int | None], ...]
    alerts: tuple[AlertRecord, ...]
    answers: tuple[AnswerRecord, ...]
    stop_reason: str | None
    interrupted: bool

    def result_fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def make_watch(spec: ExperimentSpec, kind: ExperimentType, record: ExperimentRecord) -> OutputWatch:
    """The output watch an experiment of `kind` gets (the monitor's, or a watchdog's at the end)."""
    return OutputWatch(
        record.stdout_path,
        record.stderr_path,
        spec.cwd,
        spec.monitor,
        parse_metrics=kind is ExperimentType.TRAINING
        or spec.metric is not None
        or spec.metric_regex is not None,
        parse_progress=kind in (ExperimentType.ETL, ExperimentType.SIMULATION)
        or spec.progress_total is not None,
        metric_regex=re.compile(spec.metric_regex) if spec.metric_regex else None,
    )


def finish_run(
    spec: ExperimentSpec,
    kind: ExperimentType,
    detection: Detection,
    record: ExperimentRecord,
    watch: OutputWatch,
    progress: ProgressCheck,
    outcome: Outcome,
) -> ExperimentResult:
    outputs = collect_outputs(spec.cwd, spec.expect)
    record.emit(
        MonitorEvent.OUTPUTS_COLLECTED,
        expected=len(outputs),
        missing=[o.pattern for o in outputs if o.missing],
    )
    evidence = Evidence(
        exit_code=outcome.exit_code,
        cwd=spec.cwd,
        stdout_text=read_head_tail(record.stdout_path, _EVIDENCE_BYTES, _EVIDENCE_BYTES)[0],
        stderr_text=read_head_tail(record.stderr_path, _EVIDENCE_BYTES, _EVIDENCE_BYTES)[0],
        last_metrics=watch.series.last(),
    )
    criteria = tuple(judge(c, evidence) for c in spec.criteria())
    success = (
        outcome.state in (ExperimentState.COMPLETED, ExperimentState.STOPPED_BY_USER)
        and all(c.passed for c in criteria)
        and not any(o.missing for o in outputs)
    )
    metrics = _metric_summaries(watch, record)
    watched = watch.watched_metric(spec.metric) if watch.parse_metrics else None
    result = ExperimentResult(
        **outcome.result_fields(),
        run_id=record.run_dir.name,
        memory_plot=_memory_plot(record, outcome),
        provenance=_provenance(record),
        success=success,
        command=spec.command,
        display_command=spec.display_command,
        cwd=str(spec.cwd),
        type=kind.value,
        type_reasons=() if spec.type else detection.reasons,
        finished_at=utc_now(),
        timeout_s=spec.timeout_s,
        interval_s=spec.interval_s,
        stderr_tail=tuple(tail_lines(record.stderr_path)),
        stdout_tail=tuple(tail_lines(record.stdout_path)),
        criteria=criteria,
        outputs=outputs,
        metrics=metrics,
        watched_metric=watched,
        progress=_progress(progress, watch),
        skipped_output_bytes=watch.skipped_bytes(),
        settings={
            "stall_checks": spec.stall_checks,
            "memory_factor": spec.memory_factor,
            "memory_warmup_s": spec.memory_warmup_s,
            "patience": spec.patience,
            "min_delta": spec.min_delta,
            "slow_ratio": spec.slow_ratio,
            "grace_s": spec.grace_s,
        },
    )
    files.atomic_write_text(record.result_path, result.model_dump_json(indent=2) + "\n")
    files.atomic_write_text(record.report_path, render_report(result))
    record.emit(
        MonitorEvent.RUN_FINISHED,
        state=result.state.value,
        success=result.success,
        exit_code=result.exit_code,
        duration_s=result.duration_s,
    )
    return result


def _provenance(record: ExperimentRecord) -> dict[str, Any]:
    try:
        data = json.loads(files.read_regular(record.run_dir / PROVENANCE_FILE))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _metric_summaries(watch: OutputWatch, record: ExperimentRecord) -> tuple[MetricSummary, ...]:
    plots = _plots(watch, record)
    summaries: list[MetricSummary] = []
    for name in watch.series.names():
        values = [v for _, v in watch.series.points[name]]
        if not values:
            continue
        summaries.append(
            MetricSummary(
                name=name,
                points=len(values),
                first=values[0],
                last=values[-1],
                min=min(values),
                max=max(values),
                sparkline=sparkline(values),
                plot=plots.get(name),
            )
        )
    return tuple(summaries)


def _plots(watch: OutputWatch, record: ExperimentRecord) -> dict[str, str]:
    """Plot file per metric: a family (`loss` with `val_loss`) shares one with matplotlib."""
    points = {n: p for n, p in watch.series.points.items() if len(p) >= 2}
    if not points:  # nothing to draw: no import of matplotlib (a second of CPU) either
        return {}
    groups = figures.families(list(points)) if figures.available() else {n: [n] for n in points}
    plots: dict[str, str] = {}
    for family, names in list(groups.items())[:MAX_PLOTS]:
        path = record.plot_path(family)
        if figures.available():
            png = figures.metric_figure(family, {n: points[n] for n in names})
        else:
            png = line_chart(family, points[family])
        files.atomic_write_bytes(path, png)
        plots.update(dict.fromkeys(names, path.name))
    return plots


def _memory_plot(record: ExperimentRecord, outcome: Outcome) -> str | None:
    samples = outcome.memory_samples
    if len(samples) < 2:
        return None
    path = record.plot_path("memory")
    if figures.available():
        png = figures.memory_figure(samples)
    else:
        png = line_chart("memory MiB (RSS)", [(t, r / 2**20) for t, r, _ in samples])
    files.atomic_write_bytes(path, png)
    return path.name


def _progress(progress: ProgressCheck, watch: OutputWatch) -> ProgressSummary | None:
    """The last progress the output showed (after the last check too), with the check's rate."""
    last = watch.progress
    if last is None:
        return None
    total = last.total or progress.total
    finished = total is not None and last.done >= total
    return ProgressSummary(
        done=last.done,
        total=total,
        rate_per_s=progress.rate,
        eta_s=0.0 if finished else progress.eta_s,
    )

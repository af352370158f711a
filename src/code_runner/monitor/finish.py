"""After the command ends: collect outputs, judge the user's criteria, plot, write the record.

Collection reads only declared paths and the run's own logs, and the result is rendered into
`experiment_result.md` from the same value that goes into `result.json`.
"""

from __future__ import annotations

from dataclasses import dataclass

from code_runner import files
from code_runner.clock import utc_now
from code_runner.monitor.checks import ProgressCheck
from code_runner.monitor.collect import collect_outputs, tail_lines
from code_runner.monitor.criteria import Evidence, judge
from code_runner.monitor.detect import Detection
from code_runner.monitor.launch import KillReport
from code_runner.monitor.plot import line_chart, sparkline
from code_runner.monitor.record import ExperimentRecord, MonitorEvent
from code_runner.monitor.report import render_report
from code_runner.monitor.result import (
    AlertRecord,
    AnswerRecord,
    CriterionOutcome,
    ExperimentResult,
    KillSummary,
    MetricSummary,
    ProgressSummary,
)
from code_runner.monitor.spec import ExperimentSpec, ExperimentType
from code_runner.monitor.state import ExperimentState
from code_runner.monitor.watch import OutputWatch
from code_runner.proc import TIMEOUT_EXIT_CODE, read_head_tail

MAX_PLOTS = 8
_EVIDENCE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Outcome:
    """What the monitor loop knows when the command has ended."""

    state: ExperimentState
    returncode: int | None
    timed_out: bool
    duration_s: float
    started_at: str
    kill: KillReport | None
    kill_reason: str
    leftovers: int
    checks: int
    peak_rss: int
    peak_pss: int | None
    peak_processes: int
    cpu_s: float
    memory_baseline: int | None
    alerts: tuple[AlertRecord, ...]
    answers: tuple[AnswerRecord, ...]
    stop_reason: str | None
    interrupted: bool


def exit_fields(returncode: int | None, timed_out: bool) -> tuple[int | None, int | None]:
    """(exit_code, signal) as a shell reports them: 124 on timeout, 128+N for a signal."""
    signal_no = -returncode if returncode is not None and returncode < 0 else None
    if timed_out:
        return TIMEOUT_EXIT_CODE, signal_no
    if signal_no is not None:
        return 128 + signal_no, signal_no
    return returncode, None


def finish_run(
    spec: ExperimentSpec,
    kind: ExperimentType,
    detection: Detection,
    record: ExperimentRecord,
    watch: OutputWatch,
    progress: ProgressCheck,
    outcome: Outcome,
) -> ExperimentResult:
    exit_code, signal_no = exit_fields(outcome.returncode, outcome.timed_out)
    outputs = collect_outputs(spec.cwd, spec.expect)
    record.emit(
        MonitorEvent.OUTPUTS_COLLECTED,
        expected=len(outputs),
        missing=[o.pattern for o in outputs if o.missing],
    )
    evidence = Evidence(
        exit_code=exit_code,
        cwd=spec.cwd,
        stdout_text=read_head_tail(record.stdout_path, _EVIDENCE_BYTES, _EVIDENCE_BYTES)[0],
        stderr_text=read_head_tail(record.stderr_path, _EVIDENCE_BYTES, _EVIDENCE_BYTES)[0],
        last_metrics=watch.series.last(),
    )
    criteria = tuple(
        CriterionOutcome(text=r.text, passed=r.passed, observed=r.observed)
        for r in (judge(c, evidence) for c in spec.criteria())
    )
    success = (
        outcome.state is ExperimentState.COMPLETED
        and all(c.passed for c in criteria)
        and not any(o.missing for o in outputs)
    )
    metrics = _metric_summaries(watch, record)
    watched = watch.watched_metric(spec.metric) if watch.parse_metrics else None
    kill = None
    if outcome.kill is not None:
        k = outcome.kill
        kill = KillSummary(
            reason=outcome.kill_reason,
            signalled=k.signalled,
            needed_sigkill=k.needed_sigkill,
            last_gone_s=round(k.last_gone_s, 3),
            survivors=k.survivors,
        )
    result = ExperimentResult(
        state=outcome.state,
        success=success,
        command=spec.command,
        display_command=spec.display_command,
        cwd=str(spec.cwd),
        type=kind.value,
        type_reasons=() if spec.type else detection.reasons,
        exit_code=exit_code,
        signal=signal_no,
        duration_s=round(outcome.duration_s, 3),
        started_at=outcome.started_at,
        finished_at=utc_now(),
        timeout_s=spec.timeout_s,
        interval_s=spec.interval_s,
        checks=outcome.checks,
        peak_rss_bytes=outcome.peak_rss,
        peak_pss_bytes=outcome.peak_pss,
        peak_processes=outcome.peak_processes,
        memory_baseline_bytes=outcome.memory_baseline,
        cpu_s=round(outcome.cpu_s, 3),
        stop_reason=outcome.stop_reason,
        interrupted=outcome.interrupted,
        kill=kill,
        leftovers_killed=outcome.leftovers,
        stderr_tail=tuple(tail_lines(record.stderr_path)),
        criteria=criteria,
        outputs=outputs,
        metrics=metrics,
        watched_metric=watched,
        progress=_progress(progress, watch),
        alerts=outcome.alerts,
        answers=outcome.answers,
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


def _metric_summaries(watch: OutputWatch, record: ExperimentRecord) -> tuple[MetricSummary, ...]:
    summaries: list[MetricSummary] = []
    for name in watch.series.names():
        points = watch.series.points[name]
        values = [v for _, v in points]
        if not values:
            continue
        plot = None
        if len(values) >= 2 and len(summaries) < MAX_PLOTS:
            path = record.plot_path(name)
            files.atomic_write_bytes(path, line_chart(name, points))
            plot = path.name
        summaries.append(
            MetricSummary(
                name=name,
                points=len(values),
                first=values[0],
                last=values[-1],
                min=min(values),
                max=max(values),
                sparkline=sparkline(values),
                plot=plot,
            )
        )
    return tuple(summaries)


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

"""Finishing the record of a run whose monitor died, from what the record holds.

The watchdog (and `gc`) call `finish_orphan`: the spec the monitor saved (`spec.json`), its
last `status.json` and its events give the result the monitor would have written, except
what only the monitor knew (the exit code of a command that ended on its own).
"""

from __future__ import annotations

from typing import Any

from code_runner import files
from code_runner.clock import utc_now
from code_runner.monitor.checks import ProgressCheck
from code_runner.monitor.detect import Detection
from code_runner.monitor.finish import Outcome, finish_run, make_watch
from code_runner.monitor.launch import KillReport
from code_runner.monitor.record import ExperimentRecord, MonitorEvent, _since
from code_runner.monitor.result import AlertRecord, ExperimentResult, KillSummary
from code_runner.monitor.spec import ExperimentSpec, ExperimentType
from code_runner.monitor.state import ExperimentState


def finish_orphan(
    record: ExperimentRecord,
    *,
    timed_out: bool,
    kill: KillReport | None,
    stopped: str | None = None,
) -> ExperimentResult:
    """Write the result of a run whose monitor died, from what its record holds.

    `stopped` says why a person ended it (`code-runner stop`), when one did."""
    record = ExperimentRecord.reopen(record.run_dir)
    spec = ExperimentSpec.model_validate_json(record.spec_path.read_text(encoding="utf-8"))
    status = record.read_status()
    events: list[dict[str, Any]] = files.read_jsonl(record.events_path)
    kind = ExperimentType(str(status.get("type") or (spec.type or "generic")))
    reasons = next(
        (tuple(e.get("reasons", ())) for e in events if e.get("kind") == "type_detected"), ()
    )
    started = next((str(e["at"]) for e in events if e.get("kind") == "run_started"), utc_now())
    state, reason = _ending(timed_out, stopped, status.get("monitor_pid", "?"))
    record.emit(
        MonitorEvent.STATE_CHANGED, from_state="running", to_state=state.value, by="watchdog"
    )
    watch = make_watch(spec, kind, record)
    watch.pump(final=True)
    outcome = Outcome(
        state=state,
        exit_code=124 if timed_out else None,
        signal=None,
        duration_s=round(_since(started), 3),
        started_at=started,
        kill=KillSummary(reason=stopped or "timeout", **kill.model_dump()) if kill else None,
        leftovers_killed=0,
        checks=int(status.get("check_no", 0)),
        peak_rss_bytes=int(status.get("rss_bytes") or 0),
        peak_pss_bytes=status.get("pss_bytes"),
        peak_processes=int(status.get("processes") or 0),
        memory_baseline_bytes=status.get("memory_baseline_bytes"),
        cpu_s=float(status.get("cpu_s") or 0.0),
        memory_samples=(),
        alerts=tuple(_alerts(events)),
        answers=(),
        stop_reason=reason,
        interrupted=False,
    )
    detection = Detection(kind, reasons, False, ())
    progress = ProgressCheck(spec.slow_ratio, spec.progress_total)
    result = finish_run(spec, kind, detection, record, watch, progress, outcome)
    record.write_status(
        {**status, "state": state.value, "finished": True, "finished_by": "watchdog"}
    )
    return result


def _ending(timed_out: bool, stopped: str | None, monitor: object) -> tuple[ExperimentState, str]:
    if timed_out:
        return (
            ExperimentState.TIMEOUT,
            f"timeout, enforced by the watchdog: the monitor (pid {monitor}) had died",
        )
    if stopped is not None:
        return ExperimentState.STOPPED_BY_USER, f"{stopped}; the monitor (pid {monitor}) had died"
    return (
        ExperimentState.CRASHED,
        f"the monitor (pid {monitor}) died; the command ended before its timeout with an "
        "exit code nobody could read",
    )


def _alerts(events: list[dict[str, Any]]) -> list[AlertRecord]:
    return [
        AlertRecord(
            kind=str(e.get("alert")),
            check_no=int(e.get("check_no", 0)),
            elapsed_s=float(e.get("elapsed_s", 0.0)),
            detail=str(e.get("detail", "")),
            data=e.get("data") or {},
            repeated=e.get("kind") == "alert_repeated",
        )
        for e in events
        if e.get("kind") in ("alert", "alert_repeated")
    ]

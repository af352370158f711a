"""Experiment records whose monitor is gone: finish them, and let `code-runner gc` find them.

Every exec run registers its run dir in the state dir (`exec-runs/`). `gc` walks that list:
a finished record is dropped from it, a live monitor is left alone, a dead monitor whose
watchdog lives is reported (the watchdog holds the timeout), and a record that has neither is
taken over: a new watchdog if the deadline is still ahead and the command runs, else the tree
is ended and the record finished now.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import code_runner.monitor.watchdog as watchdog
from code_runner import dirs, files
from code_runner.clock import utc_now
from code_runner.monitor.checks import ProgressCheck
from code_runner.monitor.detect import Detection
from code_runner.monitor.finish import Outcome, finish_run, make_watch
from code_runner.monitor.launch import KillReport
from code_runner.monitor.record import ExperimentRecord, MonitorEvent, _since
from code_runner.monitor.result import AlertRecord, ExperimentResult, KillSummary
from code_runner.monitor.spec import ExperimentSpec, ExperimentType
from code_runner.monitor.state import ExperimentState


def registry_dir() -> Path:
    return dirs.state_dir() / "exec-runs"


def _entry(run_dir: Path) -> Path:
    key = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:20]
    return registry_dir() / f"{key}.json"


def unregister(run_dir: Path) -> None:
    """The record is complete: gc has nothing to look for."""
    _entry(run_dir).unlink(missing_ok=True)


def register(run_dir: Path) -> Path:
    """Note a run dir so `gc` can find it if its monitor dies."""
    path = _entry(run_dir)
    files.atomic_write_json(path, {"run_dir": str(run_dir.resolve()), "registered_at": utc_now()})
    return path


def finish_orphan(
    record: ExperimentRecord, *, timed_out: bool, kill: KillReport | None
) -> ExperimentResult:
    """Write the result of a run whose monitor died, from what its record holds."""
    record = ExperimentRecord.reopen(record.run_dir)
    spec = ExperimentSpec.model_validate_json(record.spec_path.read_text(encoding="utf-8"))
    status = record.read_status()
    events: list[dict[str, Any]] = files.read_jsonl(record.events_path)
    kind = ExperimentType(str(status.get("type") or (spec.type or "generic")))
    reasons = next(
        (tuple(e.get("reasons", ())) for e in events if e.get("kind") == "type_detected"), ()
    )
    started = next((str(e["at"]) for e in events if e.get("kind") == "run_started"), utc_now())
    state = ExperimentState.TIMED_OUT if timed_out else ExperimentState.CRASHED
    monitor = status.get("monitor_pid", "?")
    reason = (
        f"timeout, enforced by the watchdog: the monitor (pid {monitor}) had died"
        if timed_out
        else f"the monitor (pid {monitor}) died; the command ended before its timeout with an "
        "exit code nobody could read"
    )
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
        kill=KillSummary(reason="timeout", **kill.model_dump()) if kill else None,
        leftovers_killed=0,
        checks=int(status.get("check_no", 0)),
        peak_rss_bytes=int(status.get("rss_bytes") or 0),
        peak_pss_bytes=status.get("pss_bytes"),
        peak_processes=int(status.get("processes") or 0),
        memory_baseline_bytes=status.get("memory_baseline_bytes"),
        cpu_s=float(status.get("cpu_s") or 0.0),
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


@dataclass(frozen=True)
class Orphan:
    """An exec record whose monitor is gone, and what `gc` did about it."""

    run_dir: str
    reason: str
    action: str
    killed: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "run_dir": self.run_dir,
            "reason": self.reason,
            "action": self.action,
            "killed": self.killed,
        }


def collect_orphans(*, dry_run: bool = False) -> list[Orphan]:
    """Find exec records whose monitor is gone; finish or re-guard them unless `dry_run`."""
    found: list[Orphan] = []
    for entry in sorted(registry_dir().glob("*.json")):
        try:
            run_dir = Path(json.loads(entry.read_text(encoding="utf-8"))["run_dir"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        record = ExperimentRecord.reopen(run_dir)
        if record.result_path.exists() or not run_dir.is_dir():
            if not dry_run:
                entry.unlink(missing_ok=True)  # finished, or its record was removed
            continue
        if not record.watchdog_path.exists():
            continue  # still starting
        orphan = _take_over(record, dry_run=dry_run)
        if orphan is not None:
            found.append(orphan)
    return found


def _take_over(record: ExperimentRecord, *, dry_run: bool) -> Orphan | None:
    config = watchdog.load_config(record)
    if watchdog.is_alive(config.monitor_pid, config.monitor_started_at):
        return None
    status = record.read_status()
    why = f"monitor pid {config.monitor_pid} is gone"
    guard = status.get("watchdog_pid")
    if isinstance(guard, int) and _is_watchdog(guard, record.run_dir):
        return Orphan(str(record.run_dir), why, f"watched: watchdog pid {guard} holds the timeout")
    tree = watchdog.Tree(config)
    tree.scan(monitor_alive=False)
    running = bool(tree.alive())
    past = time.time() >= watchdog.deadline_at(record, config)
    if dry_run:
        action = "would restart its watchdog" if running and not past else "would finish it"
        return Orphan(str(record.run_dir), why + " and so is its watchdog", action)
    if running and not past:
        pid = watchdog.restart(record)
        record.write_status({**status, "watchdog_pid": pid})
        return Orphan(
            str(record.run_dir),
            why + " and so is its watchdog",
            f"restarted its watchdog (pid {pid})",
        )
    kill = tree.kill(config.grace_s) if running else None
    result = finish_orphan(record, timed_out=running, kill=kill)
    return Orphan(
        str(record.run_dir),
        why + " and so is its watchdog",
        f"finished it as {result.state.value}",
        kill.signalled if kill else 0,
    )


def _is_watchdog(pid: int, run_dir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"code_runner.monitor.watchdog" in cmdline and str(run_dir.resolve()).encode() in cmdline

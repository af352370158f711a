"""`status.json`: a snapshot of a running experiment, for `code-runner status` and people.

A pure function of the experiment at one moment; the loop writes it after every check.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from code_runner.monitor.collect import count_present
from code_runner.monitor.spec import ExperimentType

if TYPE_CHECKING:
    from code_runner.monitor.experiment import Experiment


def status(experiment: Experiment, *, pid: int, now_s: float, finished: bool) -> dict[str, object]:
    """The snapshot of `experiment` at monotonic time `now_s`."""
    e = experiment
    s = e.peaks.last
    pending = e.dialogue.pending
    snapshot: dict[str, object] = {
        "state": e.state.value,
        "finished": finished,
        "pid": pid,
        "monitor_pid": os.getpid(),
        "watchdog_pid": e.watchdog_pid,
        "deadline_at": round(e.deadline_at(), 3),
        "type": e.kind.value,
        "check_no": e.check_no,
        "elapsed_s": round(now_s - e.started_s, 3),
        "timeout_s": e.spec.timeout_s,
        "remaining_s": round(max(0.0, e.deadline_s - now_s), 3),
        "processes": s.processes,
        "cpu_s": round(s.cpu_s, 3),
        "rss_bytes": s.rss_bytes,
        "pss_bytes": s.pss_bytes,
        "memory_baseline_bytes": e.memory.baseline_bytes,
        "output_bytes": e.watch.output_bytes(),
        "pending_alert": pending.kind.value if pending else None,
        "pending_check_no": pending.check_no if pending else None,
        "alerts": len(e.alerts),
    }
    if e.spec.expect and e.kind is ExperimentType.ANALYSIS:
        snapshot["outputs_present"] = count_present(e.spec.cwd, e.spec.expect)
        snapshot["outputs_expected"] = len(e.spec.expect)
    if e.progress.done is not None:
        snapshot["progress"] = {
            "done": e.progress.done,
            "total": e.progress.total,
            "rate_per_s": e.progress.rate,
            "eta_s": e.progress.eta_s,
        }
    metric = e.watch.watched_metric(e.spec.metric) if e.watch.parse_metrics else None
    if metric:
        snapshot["metric"] = {"name": metric, "last": e.watch.series.last().get(metric)}
    return snapshot

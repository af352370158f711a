"""The run record of one experiment: a directory of files a person or a tool can read later.

`events.jsonl` gets one line per state change, alert, answer and adjustment (appended whole,
via `files.append_jsonl`); `status.json` is rewritten atomically at every check so a reader
never sees half of it; `result.json` and `experiment_result.md` are written once at the end.
Times in events are monotonic seconds since the record was opened, plus a wall-clock stamp
for people.
"""

from __future__ import annotations

import json
import secrets
import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner import files
from code_runner.clock import utc_now
from code_runner.errors import UsageError

DEFAULT_PARENT = "code-runner-exec"


class MonitorEvent(StrEnum):
    RUN_STARTED = "run_started"
    TYPE_DETECTED = "type_detected"
    STATE_CHANGED = "state_changed"
    ALERT = "alert"
    ALERT_REPEATED = "alert_repeated"
    ANSWER = "answer"
    THRESHOLDS_ADJUSTED = "thresholds_adjusted"
    TIMEOUT = "timeout"
    TREE_KILLED = "tree_killed"
    LEFTOVERS_KILLED = "leftovers_killed"
    SIGNAL_RECEIVED = "signal_received"
    OUTPUTS_COLLECTED = "outputs_collected"
    RUN_FINISHED = "run_finished"
    WATCHDOG_STARTED = "watchdog_started"
    DETACHED = "detached"
    MONITOR_LOST = "monitor_lost"
    NOTIFIED = "notified"


def default_run_dir(base: Path) -> Path:
    """`./code-runner-exec/<UTC timestamp>-<random>`: sortable by time, unique per run."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return base / DEFAULT_PARENT / f"{stamp}-{secrets.token_hex(3)}"


DETACHED_LOG = "monitor.log"  # a detached monitor's own output, opened before the record
DETACHED_SPEC = "detach.json"  # the spec `exec --detach` hands its background monitor
_PRESEEDED = frozenset({DETACHED_LOG, DETACHED_SPEC})


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run dir that already holds files (a record is never mixed with another) or
    is not a directory."""
    fix = "pass a new --run-dir, or leave it out to get a fresh timestamped one"
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"run dir {run_dir} exists and is not a directory", fix=fix)
    if run_dir.exists() and any(p.name not in _PRESEEDED for p in run_dir.iterdir()):
        raise UsageError(f"run dir {run_dir} already exists and is not empty", fix=fix)


class ExperimentRecord:
    """Paths and writers of one exec run dir (the task record is `record.writer.RunRecord`)."""

    def __init__(self, run_dir: Path, *, reopen: bool = False) -> None:
        if not reopen:
            check_run_dir(run_dir)
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(
                    f"run dir {run_dir} cannot be created: {exc.strerror or exc}",
                    fix="pass a --run-dir that can be created, or leave it out",
                ) from None
        self.run_dir = run_dir
        self.events_path = run_dir / "events.jsonl"
        self.status_path = run_dir / "status.json"
        self.stdout_path = run_dir / "stdout.log"
        self.stderr_path = run_dir / "stderr.log"
        self.result_path = run_dir / "result.json"
        self.report_path = run_dir / "experiment_result.md"
        self.spec_path = run_dir / "spec.json"
        self.watchdog_path = run_dir / "watchdog.json"
        self.stop_request_path = run_dir / "stop.json"  # written by `code-runner stop`
        self.opened_s = time.monotonic()
        self._seq = 0
        if reopen:  # a watchdog finishing a dead monitor's record: events continue its count
            events = files.read_jsonl(self.events_path) if self.events_path.exists() else []
            self._seq = max((int(e.get("seq", 0)) for e in events), default=0)
            first = events[0] if events else {}
            self.opened_s -= _since(str(first.get("at", ""))) - float(first.get("t_s", 0.0))

    @classmethod
    def reopen(cls, run_dir: Path) -> ExperimentRecord:
        """The record of a run whose monitor is gone, to finish it."""
        return cls(run_dir, reopen=True)

    def emit(self, kind: MonitorEvent, /, **data: Any) -> None:
        self._seq += 1
        event = {
            "seq": self._seq,
            "kind": kind.value,
            "at": utc_now(),
            "t_s": round(time.monotonic() - self.opened_s, 3),
            **data,
        }
        files.append_jsonl(self.events_path, event)

    def write_status(self, status: dict[str, Any]) -> None:
        files.atomic_write_json(self.status_path, {"updated_at": utc_now(), **status})

    def read_status(self) -> dict[str, Any]:
        """The last `status.json` ({} when there is none or it cannot be read)."""
        try:
            data = json.loads(files.read_regular(self.status_path))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def stop_reason(self) -> str | None:
        """Why the run is being stopped, when `code-runner stop` asked (None otherwise)."""
        try:
            data = json.loads(files.read_regular(self.stop_request_path))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            data = {}
        pid, by = data.get("by_pid"), data.get("by")
        if data.get("via") == "web":
            return "stopped from the dashboard" + (f" by {str(by)[:120]}" if by else "")
        if data.get("via") == "mcp":
            return "stopped through the MCP server (exec_stop)" + (
                f" (pid {pid})" if isinstance(pid, int) else ""
            )
        return "stopped by `code-runner stop`" + (f" (pid {pid})" if isinstance(pid, int) else "")

    def plot_path(self, metric: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in metric)[:60]
        return self.run_dir / f"plot-{safe}.png"


def _since(stamp: str) -> float:
    """Seconds since an ISO time stamp (0 when it cannot be read)."""
    try:
        return max(0.0, (datetime.now(UTC) - datetime.fromisoformat(stamp)).total_seconds())
    except ValueError:
        return 0.0

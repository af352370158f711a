"""Experiments under a folder, one line each, for `code-runner summarize`.

An exec run dir is a folder holding `spec.json` and `status.json`; a finished one also holds
`result.json`. A run still going is listed from its status (state `running`); a folder whose
files cannot be read is counted as skipped, never fatal.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from code_runner import files
from code_runner.errors import RecordError
from code_runner.monitor.result import load_result

MAX_RUNS = 100_000


@dataclass(frozen=True)
class ExperimentLine:
    run_dir: str
    started_at: str
    state: str
    success: bool | None  # None while it runs
    duration_s: float
    command: str
    alerts: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _run_dirs(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in files.walk_records(root):
        if "spec.json" in filenames and "status.json" in filenames:
            dirnames[:] = []  # a run dir holds no other run
            yield Path(dirpath)


def _line(run_dir: Path) -> ExperimentLine:
    if (run_dir / "result.json").exists():
        result = load_result(run_dir)
        return ExperimentLine(
            run_dir=str(run_dir),
            started_at=result.started_at,
            state=result.state.value,
            success=result.success,
            duration_s=result.duration_s,
            command=result.display_command,
            alerts=len(result.alerts),
        )
    try:
        status = json.loads(files.read_regular(run_dir / "status.json"))
        spec = json.loads(files.read_regular(run_dir / "spec.json"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{run_dir} cannot be read ({exc})", fix="") from None
    if not isinstance(status, dict) or not isinstance(spec, dict):
        raise RecordError(f"{run_dir} is not an experiment record", fix="")
    return ExperimentLine(
        run_dir=str(run_dir),
        started_at=_first_event_at(run_dir) or str(status.get("updated_at") or ""),
        state=str(status.get("state", "?")),
        success=None,
        duration_s=float(status.get("elapsed_s") or 0.0),
        command=str(spec.get("display_command") or " ".join(map(str, spec.get("command", [])))),
        alerts=int(status.get("alerts") or 0) if isinstance(status.get("alerts"), int) else 0,
    )


def _first_event_at(run_dir: Path) -> str | None:
    try:
        with (run_dir / "events.jsonl").open("rb") as stream:
            first = json.loads(stream.readline(64 * 1024))
    except (OSError, ValueError):
        return None
    return str(first["at"]) if isinstance(first, dict) and "at" in first else None


def _started(stamp: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def collect_experiments(
    root: Path, *, since: datetime | None = None
) -> tuple[list[ExperimentLine], int]:
    """(experiments under `root`, oldest first; number of run dirs that could not be read).

    Runs that started before `since` are left out."""
    lines: list[ExperimentLine] = []
    skipped = 0
    for number, run_dir in enumerate(_run_dirs(root)):
        if number >= MAX_RUNS:
            break
        try:
            line = _line(run_dir)
        except RecordError:
            skipped += 1
            continue
        started = _started(line.started_at)
        if since is not None and (started is None or started < since):
            continue
        lines.append(line)
    lines.sort(key=lambda line: (line.started_at, line.run_dir))
    return lines, skipped


def experiment_totals(lines: list[ExperimentLine]) -> dict[str, Any]:
    return {
        "experiments": len(lines),
        "by_state": dict(Counter(line.state for line in lines)),
        "succeeded": sum(1 for line in lines if line.success),
        "duration_s": round(sum(line.duration_s for line in lines), 3),
    }

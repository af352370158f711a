"""A summary across many runs: one line per run and totals, for every backend.

Reads the `*.result.json` files under a root (a run's output dir, or a folder of them).
The status of a run is the normalized one (SUCCESS / PARTIAL / BLOCKED_NEEDS_DECISION /
FAILED) the runner derived from evidence; records written before the result contract
existed are normalized here the same way. A file that is not a task result (an
experiment's, a half-written one) is skipped and counted, never fatal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from code_runner import files
from code_runner.errors import RecordError, UsageError
from code_runner.record.result import RunResult, load_result
from code_runner.task.contract import WorkerStatus, evidence_status

MAX_RESULTS = 100_000


@dataclass(frozen=True)
class RunLine:
    path: str
    run_id: str
    task_id: str
    backend: str
    status: str  # normalized
    runner_status: str
    reason: str
    dod_passed: bool
    duration_s: float
    mismatches: int
    claimed: str | None
    started_at: str
    skill_review: str | None = None  # the skills' recommendation, for runs that named skills
    tokens: int | None = None  # model tokens of the run (None: the backend reported none)
    cost_usd: float | None = None  # None: unknown (no price, or usage not reported)
    apply: str = ""  # what became of the patch: committed, applied, rolled back, rejected

    @property
    def backend_name(self) -> str:
        return self.backend.split(":", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "backend": self.backend,
            "backend_name": self.backend_name,
            "status": self.status,
            "runner_status": self.runner_status,
            "reason": self.reason,
            "dod_passed": self.dod_passed,
            "duration_s": self.duration_s,
            "mismatches": self.mismatches,
            "claimed_status": self.claimed,
            "started_at": self.started_at,
            "skill_review": self.skill_review,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "apply": self.apply,
        }


def parse_since(text: str) -> datetime:
    """`2026-01-31` or an ISO date-time (UTC when no zone is given)."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {text!r} is not a date.",
            fix="give a date like 2026-01-31 or a date-time like 2026-01-31T12:00:00Z.",
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _result_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, _dirnames, filenames in files.walk_records(root):
        for name in filenames:
            if name.endswith(".result.json"):
                yield Path(dirpath, name)


def _line(path: Path, result: RunResult) -> RunLine:
    contract = result.result_contract
    status = contract.evidence_status if contract else evidence_status(result.evidence()).value
    return RunLine(
        path=str(path),
        run_id=result.run_id,
        task_id=result.task_id,
        backend=result.backend or "?",
        status=status,
        runner_status=result.status.value,
        reason=result.reason.value,
        dod_passed=result.dod_passed,
        duration_s=result.duration_s,
        mismatches=len(contract.mismatches) if contract else 0,
        claimed=contract.claimed_status if contract else None,
        started_at=result.started_at,
        skill_review=_skill_verdict(result),
        tokens=result.usage.total_tokens if result.usage else None,
        cost_usd=result.usage.cost_usd if result.usage else None,
        apply=apply_word(result),
    )


def _skill_verdict(result: RunResult) -> str | None:
    found = result.skill_review or {}
    verdict = found.get("verdict")
    return str(verdict) if verdict and found.get("skills") else None


def apply_word(result: RunResult) -> str:
    """One word for what became of a run's patch in the source ("" when nothing did)."""
    if result.decision == "rejected":
        return "rejected"
    if result.source_commit:
        return "committed"
    if result.applied_in_source:
        return "applied"
    if result.source_rollback_applied:
        return "rolled back"
    if result.source_apply_error:
        return "apply refused"
    return ""


def collect(root: Path, *, since: datetime | None = None) -> tuple[list[RunLine], int]:
    """(runs under `root`, oldest first; number of files skipped as not task results)."""
    if not root.exists():
        raise UsageError(f"{root} does not exist.", fix="pass a folder that holds run records.")
    lines: list[RunLine] = []
    skipped = 0
    for number, path in enumerate(_result_files(root)):
        if number >= MAX_RESULTS:
            break
        try:
            line = _line(path, load_result(path))
        except RecordError:
            skipped += 1
            continue
        if since is not None and not _after(line.started_at, since):
            continue
        lines.append(line)
    lines.sort(key=lambda r: (r.started_at, r.path))
    return lines, skipped


def _after(stamp: str, since: datetime) -> bool:
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return False
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) >= since


def totals(lines: list[RunLine]) -> dict[str, Any]:
    by_status = Counter(line.status for line in lines)
    by_backend = Counter(line.backend_name for line in lines)
    return {
        "runs": len(lines),
        "by_status": {s.value: by_status.get(s.value, 0) for s in WorkerStatus},
        "by_backend": dict(sorted(by_backend.items())),
        "dod_passed": sum(1 for line in lines if line.dod_passed),
        "runs_with_mismatch": sum(1 for line in lines if line.mismatches),
        "skill_review": dict(Counter(line.skill_review for line in lines if line.skill_review)),
        "mismatches": sum(line.mismatches for line in lines),
        "duration_s": round(sum(line.duration_s for line in lines), 3),
        "tokens": sum(line.tokens or 0 for line in lines),
        # the known costs; runs whose cost is unknown are counted, never taken as $0
        "cost_usd": round(sum(line.cost_usd or 0.0 for line in lines), 6),
        "runs_cost_unknown": sum(
            1 for line in lines if line.cost_usd is None and line.tokens is not None
        ),
        "applied": dict(sorted(Counter(line.apply for line in lines if line.apply).items())),
    }


__all__ = ["RunLine", "apply_word", "collect", "parse_since", "totals"]

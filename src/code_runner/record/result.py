"""`TASK.result.json`: how one task run ended, as a validated, immutable, versioned value.

`RunResult` is the documented contract of result.json. The runner builds one at the end of a
run, `RunRecord` writes it, and every reader goes through `load_result`, which validates the
file (a hand-edited or truncated one is a `RecordError` that says what to fix) and upgrades a
record written by an older code-runner, one named step per version (`UPGRADES`).

A key is written when it was given: the sections that only exist once something happened
(the exported patch, the apply step, a person's decision) are absent until then, as they
always were. Files are written with sorted keys, so equal results are equal bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from code_runner import files, problems
from code_runner.errors import RecordError
from code_runner.record.state import Reason, ResultStatus
from code_runner.task.contract import Evidence

SCHEMA_VERSION = 3

_FIX = (
    "result.json is written by code-runner and must not be edited: restore it from a copy, "
    "or re-run the task."
)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ChangedFile(_Record):
    """One path the patch changes (or an audit found), as `workspace.Change.to_dict()`."""

    path: str
    kind: str
    old_mode: str = ""
    new_mode: str = ""


class DroppedChange(ChangedFile):
    """A change the audit took out of the work tree, and why."""

    reason: str = ""
    refused: bool = False
    round: int | None = None


class AuditRecord(_Record):
    allowed: tuple[ChangedFile, ...] = ()
    rejected: tuple[DroppedChange, ...] = ()
    violations: tuple[str, ...] = ()


class VerdictRecord(_Record):
    """One DoD run's verdict, as `verify.Verdict.to_dict()`."""

    passed: bool
    reason: str
    assertion: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    tests_passed: int | None = None
    tests_failed: int | None = None


class RoundDetail(_Record):
    """One round: round 0 is the base (verdict and score only)."""

    round: int
    agent_stop: str | None = None
    agent_turns: int | None = None
    agent_error: str | None = None
    agent_usage: dict[str, Any] | None = None
    audit: AuditRecord | None = None
    verdict: VerdictRecord | None = None
    score: float | None = None
    passed: bool | None = None
    kept: bool | None = None
    restored_to_round: int | None = None
    duration_s: float | None = None
    agent_processes_killed: tuple[int, ...] = ()  # what the agent left running, ended


class RunUsage(_Record):
    """The model usage of the whole run: tokens as the provider reported them, and the cost
    at the backend's configured prices. `cost_usd` is None when it cannot be known (no price
    configured, or a call came without usage): an unknown cost is never shown as $0.

    `reported_by` names the agent CLI whose own report these are (`codex`, `claude-code`):
    then `cost_usd` is the CLI's own figure, and what it does not report (Codex's cost and
    model calls) is None."""

    model_calls: int | None = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    usage_reported: bool = True
    price_known: bool = False
    cost_usd: float | None = None
    reported_by: str | None = None

    def describe(self) -> str:
        """The usage in words: `3 model calls, 1,234 tokens (1,000 in, 234 out), $0.0042`."""
        tokens = (
            f"{self.total_tokens:,} tokens ({self.prompt_tokens:,} in, "
            f"{self.completion_tokens:,} out)"
        )
        if not self.usage_reported:
            some = "rounds" if self.reported_by else "calls"
            tokens += f", some {some} reported no usage"
        if self.model_calls is None:
            return f"{tokens}, {self.cost()}"
        calls = f"{self.model_calls} model call{'' if self.model_calls == 1 else 's'}"
        return f"{calls}, {tokens}, {self.cost()}"

    def cost(self) -> str:
        by = self.reported_by
        if self.cost_usd is not None:
            return f"${self.cost_usd:.4f}" + (f" (as {by} reported it)" if by else "")
        if by and not self.usage_reported:
            return f"cost unknown ({by} reported no usage for some rounds)"
        if by:
            return f"cost unknown ({by} reports no cost)"
        if not self.price_known:
            return "cost unknown (no price configured for the backend)"
        return "cost unknown (the provider reported no usage for some calls)"


_USAGE_KEYS = frozenset(RunUsage.model_fields)


def run_usage(round_details: Sequence[Mapping[str, Any]]) -> RunUsage | None:
    """The run's usage from its rounds: a backend reports the run's usage so far at the end
    of each round, so the last report is the run's. None when no round reported one."""
    for details in reversed(round_details):
        usage = details.get("agent_usage")
        if isinstance(usage, Mapping) and "model_calls" in usage:
            try:
                return RunUsage.model_validate({k: usage[k] for k in _USAGE_KEYS & set(usage)})
            except ValidationError:
                return None
    return None


class Claim(_Record):
    status: str | None = None
    raw_status: str = ""
    summary: str = ""
    changed_files: tuple[str, ...] = ()
    verification: str = ""
    open_decisions: tuple[str, ...] = ()
    skill_behavior_notes: tuple[str, ...] = ()


class Assessment(_Record):
    """The worker's claimed result against the evidence (`task.contract.assess`)."""

    claimed_status: str | None = None
    evidence_status: str
    mismatch: bool = False
    mismatches: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    claim: Claim | None = None


class RunResult(_Record):
    kind: Literal["task"] = "task"
    schema_version: int = SCHEMA_VERSION
    run_id: str
    task_id: str
    title: str = ""
    status: ResultStatus
    reason: Reason
    dod_passed: bool
    error: str | None = None
    backend: str = ""
    base: str = ""
    rounds: int = 0
    max_rounds: int = 0
    best_score: float = 0.0
    best_round: int | None = None
    # the exported patch (absent when the run ended before the export)
    patch_artifact: str | None = None
    patch_sha256: str | None = None
    patch_bytes: int | None = None
    patch_applies_on_base: bool | None = None
    changed_files: tuple[ChangedFile, ...] = ()
    worktree_path: str | None = None
    worktree_removed: bool = True
    source_head_before: str | None = None
    source_head_after: str | None = None
    source_status_before: tuple[str, ...] = ()
    source_status_after: tuple[str, ...] = ()
    source_unchanged: bool = True
    source_differences: tuple[str, ...] = ()
    safety_violations: tuple[str, ...] = ()
    dropped_changes: tuple[DroppedChange, ...] = ()
    sandbox: dict[str, Any] | None = None
    round_details: tuple[RoundDetail, ...] = ()
    usage: RunUsage | None = None  # model tokens and cost of the whole run (model backends)
    # complete-task mode and `code-runner apply`
    apply_to_source: bool = False
    source_patch_applied: bool = False
    source_dod_passed: bool | None = None
    source_commit: str | None = None
    source_rollback_applied: bool = False
    source_apply_error: str | None = None
    source_apply: dict[str, Any] | None = None
    applied_by: str | None = None
    applied_at: str | None = None
    # a person's decision: "applied" or "rejected"
    decision: Literal["applied", "rejected"] | None = None
    decided_at: str | None = None
    decision_reason: str | None = None
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    record_files: dict[str, str] = {}
    result_contract: Assessment | None = None
    # the skills' recommendation (`record.skill_review`): verdict, skills, notes, changes
    skill_review: dict[str, Any] | None = None

    # --- reading -----------------------------------------------------------------------

    @property
    def passed(self) -> bool:
        return self.status in (ResultStatus.PASSED, ResultStatus.ALREADY_SATISFIED)

    @property
    def interrupted(self) -> bool:
        return self.status is ResultStatus.INTERRUPTED

    @property
    def applied_in_source(self) -> bool:
        """The patch is in the source now (applied and not rolled back)."""
        return self.source_patch_applied and not self.source_rollback_applied

    def verdict_of(self, round_index: int | None) -> VerdictRecord | None:
        for details in self.round_details:
            if details.round == round_index:
                return details.verdict
        return None

    def last_verdict(self) -> VerdictRecord | None:
        """The last verdict after an agent's round (round 0 is the base)."""
        for details in reversed(self.round_details):
            if details.round and details.verdict is not None:
                return details.verdict
        return None

    def evidence(self) -> Evidence:
        """What the result contract weighs a worker's claim against."""
        base, best = self.verdict_of(0), self.verdict_of(self.best_round)
        return Evidence(
            status=self.status.value,
            reason=self.reason.value,
            source_unchanged=self.source_unchanged,
            changed_paths=tuple(c.path for c in self.changed_files),
            dropped_paths=tuple(d.path for d in self.dropped_changes),
            tests_passed_base=base.tests_passed if base else None,
            tests_passed_best=best.tests_passed if best else None,
        )

    # --- writing -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The file's content: every key that was given, plus the kind and version."""
        data = self.model_dump(mode="json", exclude_unset=True)
        return {"kind": self.kind, "schema_version": self.schema_version, **data}

    def updated(self, **fields: Any) -> RunResult:
        """A copy with `fields` set (validated, and written from now on)."""
        return RunResult.model_validate(self.to_json() | _plain(fields))


def _plain(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: value.model_dump(mode="json", exclude_unset=True)
        if isinstance(value, BaseModel)
        else value
        for key, value in fields.items()
    }


# --- older versions ------------------------------------------------------------------------

Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had no `kind`, so a task result could not be told from an experiment's.

    A run `gc` marked abandoned wrote a partial v1 result (no title, backend, base...); the
    fields it lacks take their "nothing happened" defaults, which is what they meant.
    """
    return {**data, "kind": "task", "schema_version": 2}


def v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 3 has the run's model usage and cost at the top level (`usage`); version 2
    had it only in the round details, where it is read from for an older record."""
    rounds = data.get("round_details")
    found = (
        run_usage([r for r in rounds if isinstance(r, Mapping)])
        if isinstance(rounds, list)
        else None
    )
    usage = {"usage": found.model_dump(mode="json", exclude_unset=True)} if found else {}
    return {**data, **usage, "schema_version": 3}


UPGRADES: dict[int, Upgrade] = {1: v1_to_v2, 2: v2_to_v3}


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a result of any known version to `SCHEMA_VERSION`, one named step at a time."""
    version = data.get("schema_version", 1)
    while version != SCHEMA_VERSION:
        step = UPGRADES.get(version) if isinstance(version, int) else None
        if step is None:
            raise ValueError(f"schema_version {version!r} is not one this code-runner reads")
        data = step(data)
        version = data["schema_version"]
    return data


# --- loading -------------------------------------------------------------------------------


def _damaged(path: Path, what: str) -> RecordError:
    return RecordError(f"the run result {path} {what}.", fix=_FIX)


def parse_result(data: object, path: Path) -> RunResult:
    """Validate (and upgrade) the content of a result file; `path` names it in errors."""
    if not isinstance(data, dict):
        raise _damaged(path, "does not hold a JSON object")
    if data.get("kind", "task") != "task":
        raise RecordError(
            f"{path} is the result of an {data.get('kind')}, not of a task run.",
            fix="use `code-runner status RUN_DIR` for an experiment's run dir.",
        )
    try:
        # strict: a value of the wrong type is an edit, never something to coerce
        return RunResult.model_validate_json(json.dumps(upgrade(dict(data))), strict=True)
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            lines = problems.describe_all(exc, model_at=problems.single_model(RunResult))
            what = "is not a valid run result: " + "; ".join(lines[:5])
            if len(lines) > 5:
                what += f" (and {len(lines) - 5} more)"
            raise _damaged(path, what) from None
        raise RecordError(
            f"the run result {path} cannot be read: {exc}.",
            fix="read it with the code-runner version that wrote it, or re-run the task.",
        ) from None


def load_result(path: Path) -> RunResult:
    """Read a `*.result.json`, or say clearly why it cannot be read."""
    try:
        text = files.read_regular(path).decode("utf-8")
    except FileNotFoundError:
        raise RecordError(
            f"{path} does not exist.",
            fix="the run may still be going (see its status.json), or the path is wrong.",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _damaged(path, f"cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _damaged(path, f"is not JSON (truncated or edited? {exc})") from None
    return parse_result(data, path)


__all__ = [
    "SCHEMA_VERSION",
    "UPGRADES",
    "Assessment",
    "ChangedFile",
    "DroppedChange",
    "RoundDetail",
    "RunResult",
    "RunUsage",
    "VerdictRecord",
    "load_result",
    "parse_result",
    "run_usage",
    "upgrade",
    "v1_to_v2",
    "v2_to_v3",
]

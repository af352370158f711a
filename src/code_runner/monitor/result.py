"""`result.json`: what happened to one experiment, as a validated, immutable value.

The monitor reports, it does not judge: `state` says how the process ended, `success` only
says whether the user's own criteria held (exit code 0 when none were given) and the
expected outputs exist. `load_result` is how `code-runner status RUN_DIR` reads it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from code_runner.errors import RecordError
from code_runner.monitor.collect import ExpectedOutput
from code_runner.monitor.criteria import CriterionOutcome
from code_runner.monitor.launch import KillReport
from code_runner.monitor.state import RENAMED, ExperimentState

SCHEMA_VERSION = 2

__all__ = [
    "AlertRecord",
    "AnswerRecord",
    "CriterionOutcome",
    "ExperimentResult",
    "KillReport",
    "KillSummary",
    "MetricSummary",
    "ProgressSummary",
    "load_result",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class AlertRecord(_Frozen):
    kind: str
    check_no: int
    elapsed_s: float
    detail: str
    data: dict[str, float | int | str | None] = {}
    repeated: bool = False


class AnswerRecord(_Frozen):
    alert_kind: str | None
    answer: str
    action: str
    elapsed_s: float
    note: str = ""
    via: str = "terminal"  # or "cli" (`code-runner answer`), "web" (the dashboard)
    by: str = ""  # who, for an answer through the run dir: user and pid


class MetricSummary(_Frozen):
    name: str
    points: int
    first: float
    last: float
    min: float
    max: float
    sparkline: str
    plot: str | None = None


class ProgressSummary(_Frozen):
    done: float
    total: float | None
    rate_per_s: float | None
    eta_s: float | None


class KillSummary(KillReport):
    """A tree kill as the record keeps it: the report, and why the tree was killed."""

    reason: str


class ExperimentResult(_Frozen):
    kind: Literal["experiment"] = "experiment"
    schema_version: int = SCHEMA_VERSION
    state: ExperimentState
    success: bool
    command: tuple[str, ...]
    display_command: str
    cwd: str
    type: str
    type_reasons: tuple[str, ...] = ()
    exit_code: int | None
    signal: int | None = None
    duration_s: float
    started_at: str
    finished_at: str
    timeout_s: float
    interval_s: float
    checks: int
    peak_rss_bytes: int = 0
    peak_pss_bytes: int | None = None
    peak_processes: int = 0
    memory_baseline_bytes: int | None = None
    cpu_s: float = 0.0
    memory_samples: tuple[tuple[float, int, int | None], ...] = ()
    memory_plot: str | None = None
    stop_reason: str | None = None
    interrupted: bool = False
    kill: KillSummary | None = None
    leftovers_killed: int = 0
    stderr_tail: tuple[str, ...] = ()
    stdout_tail: tuple[str, ...] = ()
    criteria: tuple[CriterionOutcome, ...] = ()
    outputs: tuple[ExpectedOutput, ...] = ()
    metrics: tuple[MetricSummary, ...] = ()
    watched_metric: str | None = None
    progress: ProgressSummary | None = None
    alerts: tuple[AlertRecord, ...] = ()
    answers: tuple[AnswerRecord, ...] = ()
    skipped_output_bytes: int = 0
    settings: dict[str, float | int | str | None] = {}
    run_id: str = ""
    provenance: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Read an older record as today's (each version's change named in `v1_to_v2`)."""
        if isinstance(data, dict) and data.get("schema_version", 1) == 1:
            return v1_to_v2(data)
        return data


def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 speaks the seed's status words: `timed_out` is `timeout`, `killed` is
    `stopped_by_user` (only a person's kill, Ctrl-C or `stop` ended a run that way)."""
    state = data.get("state")
    renamed = RENAMED.get(state) if isinstance(state, str) else None
    return {**data, "schema_version": 2, **({"state": renamed.value} if renamed else {})}


def load_result(run_dir: Path) -> ExperimentResult:
    """Read `RUN_DIR/result.json`, or say clearly why it cannot be read."""
    path = run_dir / "result.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(
            f"{path} does not exist",
            fix="the experiment may still be running (see status.json) or the path is wrong",
        ) from None
    try:
        result = ExperimentResult.model_validate_json(text)
    except ValidationError as exc:
        raise RecordError(
            f"{path} is not a valid experiment result: {exc.error_count()} problems",
            fix="the file was edited or written by another version; re-run the experiment",
        ) from None
    if result.schema_version > SCHEMA_VERSION:
        raise RecordError(
            f"{path} was written by a newer code-runner (schema {result.schema_version}; this "
            f"one reads up to {SCHEMA_VERSION})",
            fix="upgrade code-runner to read it",
        )
    return result

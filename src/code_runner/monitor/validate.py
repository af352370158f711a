"""Validate mode: re-run a recorded experiment and say whether it reproduced.

`code-runner exec --validate RUN_DIR` runs the recorded command again in the recorded cwd
(from `spec.json`, with the variables the monitor added; the rest of the environment is the
current one: a record never stores secrets), into a fresh run dir beside the original, then
compares the two records. Per metric (final values): MATCH when equal, WITHIN_TOLERANCE
when the relative difference is under 5 % (against the mean of the two magnitudes, so two
values near zero are not judged on a vanishing denominator), else MISMATCH. Outputs compare
by presence and size. Per run: REPRODUCIBLE when everything matches or is within tolerance
and the state is the same, PARTIALLY_REPRODUCIBLE when some comparisons mismatch,
NOT_REPRODUCIBLE when the state differs or nothing agrees, CANNOT_VERIFY when there is
nothing to compare.
"""

from __future__ import annotations

import math
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from code_runner.errors import RecordError
from code_runner.monitor.result import ExperimentResult, load_result
from code_runner.monitor.spec import ExperimentSpec

TOLERANCE = 0.05
_NEAR_ZERO = 1e-12


class Verdict(StrEnum):
    MATCH = "MATCH"
    WITHIN_TOLERANCE = "WITHIN_TOLERANCE"
    MISMATCH = "MISMATCH"


class RunVerdict(StrEnum):
    REPRODUCIBLE = "REPRODUCIBLE"
    PARTIALLY_REPRODUCIBLE = "PARTIALLY_REPRODUCIBLE"
    NOT_REPRODUCIBLE = "NOT_REPRODUCIBLE"
    CANNOT_VERIFY = "CANNOT_VERIFY"


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    original: float | str | None
    rerun: float | str | None
    relative_diff: float | None
    verdict: Verdict


class Validation(BaseModel):
    model_config = ConfigDict(frozen=True)

    original_run_dir: str
    rerun_run_dir: str
    original_state: str
    rerun_state: str
    metrics: tuple[Comparison, ...]
    outputs: tuple[Comparison, ...]
    verdict: RunVerdict
    note: str = ""


def recorded_spec(run_dir: Path) -> ExperimentSpec:
    """The spec a run was recorded with (RecordError when the record has none)."""
    path = run_dir / "spec.json"
    try:
        return ExperimentSpec.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise RecordError(
            f"{path} is missing or unreadable: this record cannot be re-run",
            fix="validate a run recorded by this version of `code-runner exec`",
        ) from None


def relative_diff(a: float, b: float) -> float:
    """|a - b| over the mean of |a| and |b| (0 when both are zero)."""
    if a == b:
        return 0.0
    scale = (abs(a) + abs(b)) / 2
    return abs(a - b) / scale if scale > _NEAR_ZERO else math.inf


def compare_metric(name: str, original: float, rerun: float) -> Comparison:
    diff = relative_diff(original, rerun)
    verdict = (
        Verdict.MATCH
        if original == rerun
        else Verdict.WITHIN_TOLERANCE
        if diff < TOLERANCE
        else Verdict.MISMATCH
    )
    return Comparison(
        name=name,
        original=original,
        rerun=rerun,
        relative_diff=round(diff, 6) if math.isfinite(diff) else None,
        verdict=verdict,
    )


def _metrics(first: ExperimentResult, second: ExperimentResult) -> list[Comparison]:
    again = {m.name: m.last for m in second.metrics}
    found = []
    for metric in first.metrics:
        if metric.name in again:
            found.append(compare_metric(metric.name, metric.last, again[metric.name]))
        else:
            found.append(
                Comparison(
                    name=metric.name,
                    original=metric.last,
                    rerun=None,
                    relative_diff=None,
                    verdict=Verdict.MISMATCH,
                )
            )
    return found


def _outputs(first: ExperimentResult, second: ExperimentResult) -> list[Comparison]:
    sizes = {f.path: f.size_bytes for o in second.outputs for f in o.files}
    found = []
    for output in first.outputs:
        for item in output.files:
            size = sizes.get(item.path)
            verdict = Verdict.MATCH if size == item.size_bytes else Verdict.MISMATCH
            found.append(
                Comparison(
                    name=item.path,
                    original=f"{item.size_bytes} bytes",
                    rerun=None if size is None else f"{size} bytes",
                    relative_diff=None,
                    verdict=verdict,
                )
            )
    return found


def judge_runs(first_dir: Path, second_dir: Path) -> Validation:
    """Compare a run and its re-run."""
    first, second = load_result(first_dir), load_result(second_dir)
    metrics, outputs = _metrics(first, second), _outputs(first, second)
    verdicts = [c.verdict for c in (*metrics, *outputs)]
    note = ""
    if first.state != second.state:
        verdict = RunVerdict.NOT_REPRODUCIBLE
        note = f"the run ended {first.state.value}, the re-run {second.state.value}"
    elif not verdicts:
        verdict = RunVerdict.CANNOT_VERIFY
        note = "no metric and no expected output to compare (see --metric, --expect)"
    elif Verdict.MISMATCH not in verdicts:
        verdict = RunVerdict.REPRODUCIBLE
    elif all(v is Verdict.MISMATCH for v in verdicts):
        verdict = RunVerdict.NOT_REPRODUCIBLE
    else:
        verdict = RunVerdict.PARTIALLY_REPRODUCIBLE
    return Validation(
        original_run_dir=str(first_dir),
        rerun_run_dir=str(second_dir),
        original_state=first.state.value,
        rerun_state=second.state.value,
        metrics=tuple(metrics),
        outputs=tuple(outputs),
        verdict=verdict,
        note=note,
    )


def render_validation(validation: Validation) -> str:
    lines = [
        f"{validation.verdict.value}: {validation.original_run_dir} re-run as "
        f"{validation.rerun_run_dir}"
    ]
    if validation.note:
        lines.append(f"  {validation.note}")
    for c in (*validation.metrics, *validation.outputs):
        diff = "" if c.relative_diff is None else f" (relative diff {c.relative_diff:.2%})"
        lines.append(f"  {c.name}: {c.original} -> {c.rerun}: {c.verdict.value}{diff}")
    return "\n".join(lines)

"""Success criteria: the small language users write after `--success`.

A criterion is parsed once into a typed value so that a typo is a usage error before the
experiment starts, not a surprise hours later. Judging happens after the process ends, on
evidence the runner holds (its exit code, the files it sees, the metrics it parsed).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict

SUPPORTED_FORMS = (
    "exit_code == 0",
    "file PATH exists",
    "file PATH > 0 bytes (units: bytes, KB, MB, GB)",
    "stdout contains TEXT",
    "stderr contains TEXT",
    "metric NAME < 0.5 (the last parsed value)",
)

_OPS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
_OP = r"(==|!=|<=|>=|<|>)"
_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}

_EXIT_RE = re.compile(rf"^exit[_ ]code\s*{_OP}?\s*(-?\d+)$", re.IGNORECASE)
_FILE_EXISTS_RE = re.compile(r"^file\s+(.+?)\s+exists$", re.IGNORECASE)
_FILE_SIZE_RE = re.compile(rf"^file\s+(.+?)\s*{_OP}\s*{_NUM}\s*([a-zA-Z]+)?$", re.IGNORECASE)
_CONTAINS_RE = re.compile(r"^(stdout|stderr)\s+contains\s+(.+)$", re.IGNORECASE)
_METRIC_RE = re.compile(rf"^metric\s+(\S+)\s*{_OP}\s*{_NUM}$", re.IGNORECASE)


class CriterionKind(StrEnum):
    EXIT_CODE = "exit_code"
    FILE_EXISTS = "file_exists"
    FILE_SIZE = "file_size"
    STDOUT_CONTAINS = "stdout_contains"
    STDERR_CONTAINS = "stderr_contains"
    METRIC = "metric"


@dataclass(frozen=True)
class Criterion:
    """One parsed criterion. `text` is what the user wrote, kept for the report."""

    text: str
    kind: CriterionKind
    op: str = "=="
    number: float = 0.0
    subject: str = ""


@dataclass(frozen=True)
class Evidence:
    """What the runner observed, the only input a verdict may use."""

    exit_code: int | None
    cwd: Path
    stdout_text: str
    stderr_text: str
    last_metrics: Mapping[str, float]


class CriterionOutcome(BaseModel):
    """One criterion judged: the record keeps this value as it is (`result.json`)."""

    model_config = ConfigDict(frozen=True)

    text: str
    passed: bool
    observed: str


def parse_criterion(text: str) -> Criterion:
    """Parse one criterion or raise ValueError naming the forms that are understood."""
    raw = " ".join(text.split())
    if m := _EXIT_RE.match(raw):
        return Criterion(raw, CriterionKind.EXIT_CODE, m.group(1) or "==", float(m.group(2)))
    if m := _FILE_EXISTS_RE.match(raw):
        return Criterion(raw, CriterionKind.FILE_EXISTS, subject=_unquote(m.group(1)))
    if m := _FILE_SIZE_RE.match(raw):
        unit = (m.group(4) or "bytes").lower()
        if unit not in _UNITS:
            raise ValueError(f"unknown size unit {m.group(4)!r} in {text!r}; use bytes, KB, MB, GB")
        size = float(m.group(3)) * _UNITS[unit]
        return Criterion(raw, CriterionKind.FILE_SIZE, m.group(2), size, _unquote(m.group(1)))
    if m := _CONTAINS_RE.match(raw):
        kind = (
            CriterionKind.STDOUT_CONTAINS
            if m.group(1).lower() == "stdout"
            else CriterionKind.STDERR_CONTAINS
        )
        return Criterion(raw, kind, subject=_unquote(m.group(2)))
    if m := _METRIC_RE.match(raw):
        return Criterion(raw, CriterionKind.METRIC, m.group(2), float(m.group(3)), m.group(1))
    forms = "; ".join(SUPPORTED_FORMS)
    raise ValueError(f"cannot understand success criterion {text!r}; supported forms: {forms}")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def judge(criterion: Criterion, evidence: Evidence) -> CriterionOutcome:
    """Decide one criterion from evidence; `observed` says what was seen, for the report."""
    kind = criterion.kind
    compare = _OPS[criterion.op]
    if kind is CriterionKind.EXIT_CODE:
        if evidence.exit_code is None:
            return _verdict(criterion, False, "no exit code (process did not exit)")
        ok = compare(float(evidence.exit_code), criterion.number)
        return _verdict(criterion, ok, f"exit code {evidence.exit_code}")
    if kind in (CriterionKind.FILE_EXISTS, CriterionKind.FILE_SIZE):
        path = evidence.cwd / criterion.subject
        if not path.exists():
            return _verdict(criterion, False, f"{criterion.subject} is missing")
        size = path.stat().st_size
        ok = kind is CriterionKind.FILE_EXISTS or compare(float(size), criterion.number)
        return _verdict(criterion, ok, f"{criterion.subject} is {size} bytes")
    if kind in (CriterionKind.STDOUT_CONTAINS, CriterionKind.STDERR_CONTAINS):
        stream = "stdout" if kind is CriterionKind.STDOUT_CONTAINS else "stderr"
        text = evidence.stdout_text if stream == "stdout" else evidence.stderr_text
        found = criterion.subject in text
        return _verdict(criterion, found, f"{stream} {'contains' if found else 'lacks'} the text")
    value = evidence.last_metrics.get(criterion.subject)
    if value is None:
        return _verdict(criterion, False, f"metric {criterion.subject} never parsed")
    ok = compare(value, criterion.number)
    return _verdict(criterion, ok, f"last {criterion.subject} = {value:g}")


def _verdict(criterion: Criterion, passed: bool, observed: str) -> CriterionOutcome:
    return CriterionOutcome(text=criterion.text, passed=passed, observed=observed)

"""Option C: thresholds changed while running are validated like the command line."""

from __future__ import annotations

import pytest

from code_runner.monitor.adjust import adjusted_spec, diagnosis
from code_runner.monitor.spec import build_spec


def test_changes_apply_and_report_only_what_changed() -> None:
    spec = build_spec({}, {"command": ("true",)}, source="cli")
    new, changed = adjusted_spec(spec, "timeout=2h stall-checks=6 patience=5")
    assert new.timeout_s == 7200 and new.stall_checks == 6
    assert changed == {"timeout_s": 7200.0, "stall_checks": 6}  # patience was already 5
    assert spec.timeout_s == 1800  # the old spec is untouched


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("timeout=soon", "cannot read duration"),
        ("memory_factor=0.5", "memory_factor"),
        ("colour=red", "not understood"),
        ("timeout", "not understood"),
        ("interval=1", "outside"),
    ],
)
def test_bad_changes_are_refused(line: str, needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODE_RUNNER_MIN_INTERVAL_S", raising=False)
    spec = build_spec({}, {"command": ("true",)}, source="cli")
    with pytest.raises(ValueError, match=needle):
        adjusted_spec(spec, line)


def test_diagnosis_text() -> None:
    text = diagnosis(["a", "b"], ((7, "python", 50 * 1024 * 1024),))
    assert "  b" in text and "7 python 50 MiB" in text
    assert "(none)" in diagnosis([], ())

"""Spec validation: every problem at once, durations, interval bounds, file + CLI merge."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from code_runner.errors import SpecError, UsageError
from code_runner.monitor.spec import (
    MIN_INTERVAL_ENV,
    ExperimentType,
    build_spec,
    load_experiment_spec,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("30m", 1800),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("2d", 172800),
        ("250ms", 0.25),
        (45, 45),
        (0.5, 0.5),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "soon", "10x", "m30", True, None, [1]])
def test_bad_durations_say_what_is_accepted(bad: object) -> None:
    with pytest.raises(ValueError, match=r"duration"):
        parse_duration(bad)


@given(st.integers(0, 10_000), st.integers(0, 59), st.integers(0, 59))
def test_duration_parts_add_up(h: int, m: int, s: int) -> None:
    assert parse_duration(f"{h}h{m}m{s}s") == h * 3600 + m * 60 + s


def test_defaults_follow_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIN_INTERVAL_ENV, raising=False)
    spec = build_spec({}, {"command": ("python", "x.py")}, source="cli")
    assert spec.timeout_s == 1800
    assert spec.interval_s == 30
    assert spec.stall_checks == 3
    assert spec.memory_factor == 3
    assert spec.argv == ("python", "x.py")
    assert [c.text for c in spec.criteria()] == ["exit_code == 0"]


def test_interval_bounds_and_the_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIN_INTERVAL_ENV, raising=False)
    with pytest.raises(SpecError, match=r"interval: check interval 5 s is outside 10\.\.300 s"):
        build_spec({}, {"command": ("true",), "interval": "5s"}, source="cli")
    with pytest.raises(SpecError, match=r"outside"):
        build_spec({}, {"command": ("true",), "interval": "6m"}, source="cli")
    monkeypatch.setenv(MIN_INTERVAL_ENV, "0.05")
    assert build_spec({}, {"command": ("true",), "interval": "0.1"}, source="c").interval_s == 0.1
    monkeypatch.setenv(MIN_INTERVAL_ENV, "99")  # can lower the bound, never raise it
    assert build_spec({}, {"command": ("true",), "interval": "10s"}, source="c").interval_s == 10
    monkeypatch.setenv(MIN_INTERVAL_ENV, "fast")
    with pytest.raises(UsageError, match=MIN_INTERVAL_ENV) as info:
        build_spec({}, {"command": ("true",)}, source="c")
    assert info.value.fix


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(SpecError) as info:
        build_spec(
            {"timeout": "later", "bogus": 1, "type": "magic", "memory_factor": 0.5},
            {"command": (), "success": ("exit code is fine",), "metric_regex": "(unclosed"},
            source="exp.yaml",
        )
    text = info.value.render()
    for needle in (
        "command:",
        "timeout:",
        "unknown field 'bogus'; remove it (valid fields: command, shell, cwd, timeout,",
        "type:",
        "memory_factor:",
        "success: cannot understand",
        "metric_regex: metric regex does not compile",
    ):
        assert needle in text, needle
    assert text.startswith("exp.yaml: 7 problems")
    assert "Fix:" in text
    assert "Traceback" not in text


def test_metric_regex_needs_named_groups() -> None:
    with pytest.raises(SpecError, match="named groups"):
        build_spec({}, {"command": ("x",), "metric_regex": r"loss=([0-9.]+)"}, source="c")
    spec = build_spec(
        {}, {"command": ("x",), "metric_regex": r"loss=(?P<loss>[0-9.]+)"}, source="c"
    )
    assert spec.metric_regex


def test_spec_file_merge(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    spec_file = tmp_path / "exp.yaml"
    spec_file.write_text(
        "command: python train.py --epochs 3 | tee log.txt\n"
        "cwd: work\n"
        "timeout: 2h\n"
        "expect: [model.pt]\n"
        "stall-checks: 4\n"
        "type: training\n"
    )
    options = load_experiment_spec(spec_file)
    spec = build_spec(options, {"expect": ("metrics.csv",), "timeout": "10m"}, source="exp.yaml")
    assert spec.shell is True
    assert spec.argv[-2:] == ("-c", "python train.py --epochs 3 | tee log.txt")
    assert spec.cwd == (tmp_path / "work").resolve()
    assert spec.timeout_s == 600  # the command line wins for single values
    assert spec.expect == ("model.pt", "metrics.csv")  # and adds to lists
    assert spec.stall_checks == 4
    assert spec.type is ExperimentType.TRAINING
    cli_command = build_spec(options, {"command": ("python", "other.py")}, source="exp.yaml")
    assert cli_command.argv == ("python", "other.py")
    assert cli_command.shell is False


@pytest.mark.parametrize(
    ("content", "needle"),
    [("command: [unclosed", "YAML syntax error at line 1"), ("- a\n- b\n", "must be a mapping")],
)
def test_bad_spec_files(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(SpecError, match=needle):
        load_experiment_spec(path)


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="the file does not exist") as info:
        load_experiment_spec(tmp_path / "nope.yaml")
    assert "--spec" in (info.value.fix or "")

"""Success criteria: the forms users write, and verdicts from evidence only."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_runner.monitor.criteria import CriterionKind, Evidence, judge, parse_criterion


def _evidence(tmp_path: Path, exit_code: int | None = 0) -> Evidence:
    return Evidence(exit_code, tmp_path, "all done\n", "warning: x\n", {"loss": 0.25})


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("exit_code == 0", CriterionKind.EXIT_CODE),
        ("exit code 0", CriterionKind.EXIT_CODE),
        ("exit_code != 3", CriterionKind.EXIT_CODE),
        ("file out.csv exists", CriterionKind.FILE_EXISTS),
        ("file out.csv > 0 bytes", CriterionKind.FILE_SIZE),
        ("file 'my out.csv' >= 1 KB", CriterionKind.FILE_SIZE),
        ("stdout contains all done", CriterionKind.STDOUT_CONTAINS),
        ("stderr contains warning", CriterionKind.STDERR_CONTAINS),
        ("metric loss < 0.5", CriterionKind.METRIC),
    ],
)
def test_forms(text: str, kind: CriterionKind) -> None:
    assert parse_criterion(text).kind is kind


@pytest.mark.parametrize("bad", ["it works", "exit_code ~ 0", "file x > 3 parsecs", "metric loss"])
def test_bad_forms_list_the_supported_ones(bad: str) -> None:
    with pytest.raises(ValueError, match=r"exit_code == 0|unit"):
        parse_criterion(bad)


def test_judging(tmp_path: Path) -> None:
    (tmp_path / "out.csv").write_text("a\n1\n")
    (tmp_path / "empty.txt").write_text("")
    ev = _evidence(tmp_path)
    verdicts = {
        text: judge(parse_criterion(text), ev).passed
        for text in (
            "exit_code == 0",
            "exit_code != 0",
            "file out.csv > 0 bytes",
            "file empty.txt > 0 bytes",
            "file empty.txt exists",
            "file gone.txt exists",
            "stdout contains all done",
            "stderr contains error",
            "metric loss < 0.5",
            "metric acc > 0.9",
        )
    }
    assert verdicts == {
        "exit_code == 0": True,
        "exit_code != 0": False,
        "file out.csv > 0 bytes": True,
        "file empty.txt > 0 bytes": False,
        "file empty.txt exists": True,
        "file gone.txt exists": False,
        "stdout contains all done": True,
        "stderr contains error": False,
        "metric loss < 0.5": True,
        "metric acc > 0.9": False,
    }
    no_exit = judge(parse_criterion("exit_code == 0"), _evidence(tmp_path, None))
    assert not no_exit.passed and "no exit code" in no_exit.observed
    assert "never parsed" in judge(parse_criterion("metric acc > 0.9"), ev).observed

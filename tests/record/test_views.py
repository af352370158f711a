"""Agent text in the files a person reads (result.md, eval.md, response.txt) carries no
terminal escapes: a real run whose agent answers with ESC sequences (colour, a window
title, a screen clear, a one-byte CSI, a carriage-return overwrite) and names a file with an
ESC in its RESULT block leaves every such byte written as its escape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from code_runner import runner
from code_runner import task as spec_mod
from tests.helpers.tasks import FIXED_BOTH, calc_repo, write, write_task

pytestmark = pytest.mark.integration

ANSWER = (
    "RESULT_STATUS: SUCCESS\x1b[2J\x1b[H\n"
    "SUMMARY: fixed \x1b[31mall\x1b[0m of it\x1b]0;pwned\x07 \x9b2J done\rOVERWRITE\n"
    "CHANGED_FILES: calc.py, \x1b[8mhidden.py\n"
    "VERIFICATION: pytest\n"
    "OPEN_DECISIONS: none\n"
)
RAW = ("\x1b", "\x07", "\x9b", "\r")


def test_agent_text_is_written_without_terminal_escapes(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec_path = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]])
    script = tmp_path / "fix-calc.script.json"
    data = json.loads(script.read_text())
    data["rounds"][0]["response"] = ANSWER
    script.write_text(json.dumps(data))
    result = runner.run_task(runner.preflight(spec_mod.load_spec(spec_path), base_dir=tmp_path))
    assert result.status.value == "passed"
    out = tmp_path / "out"
    for name in ("fix-calc.result.md", "fix-calc.eval.md", "fix-calc.response.txt"):
        text = (out / name).read_bytes().decode("utf-8")  # strict: valid UTF-8 too
        assert not any(c in text for c in RAW), (name, text)
    response = (out / "fix-calc.response.txt").read_text()
    assert "fixed \\x1b[31mall\\x1b[0m of it\\x1b]0;pwned\\x07 \\x9b2J done\\x0dOVERWRITE" in (
        response
    )
    assert "\\x1b[8mhidden.py" in (out / "fix-calc.result.md").read_text()


def fences_balanced(markdown: str) -> bool:
    return sum(1 for line in markdown.splitlines() if line.startswith("```")) % 2 == 0


@pytest.mark.parametrize("rounds", [[[]], [[write("calc.py", FIXED_BOTH)]]], ids=["empty", "fix"])
def test_eval_md_code_fences_are_balanced_with_or_without_a_patch(
    tmp_path: Path, rounds: list[list[dict[str, Any]]]
) -> None:
    source = calc_repo(tmp_path)
    spec_path = write_task(tmp_path, source, rounds)
    runner.run_task(runner.preflight(spec_mod.load_spec(spec_path), base_dir=tmp_path))
    eval_md = (tmp_path / "out" / "fix-calc.eval.md").read_text()
    assert fences_balanced(eval_md), eval_md
    diff = eval_md.split("## Diff\n\n", 1)[1].split("## Proof", 1)[0]
    if rounds == [[]]:
        assert diff.strip() == "- no changes", diff
    else:
        assert diff.startswith("```\n") and "calc.py" in diff, diff

"""Agent text in the files a person reads (result.md, eval.md, response.txt) carries no
terminal escapes: a real run whose agent answers with ESC sequences (colour, a window
title, a screen clear, a one-byte CSI, a carriage-return overwrite) and names a file with an
ESC in its RESULT block leaves every such byte written as its escape."""

from __future__ import annotations

import json
from pathlib import Path

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

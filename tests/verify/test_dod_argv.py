"""The argv form of a DoD: programs with literal arguments, run in order with no shell."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from code_runner.task import DefinitionOfDone
from code_runner.verify import run_dod

PY = sys.executable
ECHO = "import json, sys; print(json.dumps(sys.argv[1:]))"
# Every word a shell would give a meaning to: each must reach the program unchanged.
HOSTILE = ["a;b", "$HOME", "*", "`id`", "$(touch pwned)", "x > y", "&&", "|", "'", '"', "~"]


def env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}


def argv_dod(*argvs: list[str], assertion: str = "exit_code == 0") -> DefinitionOfDone:
    return DefinitionOfDone.model_validate({"argv": list(argvs), "assertion": assertion})


def test_shell_metacharacters_reach_the_program_literally(tmp_path: Path) -> None:
    dod = argv_dod([PY, "-c", ECHO, *HOSTILE])
    verdict = run_dod(dod, cwd=tmp_path, env=env())
    assert verdict.passed, verdict.reason
    assert json.loads(verdict.stdout_tail.strip()) == HOSTILE
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "y").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_no_shell_is_the_parent_of_any_command(tmp_path: Path) -> None:
    parent = "import os, sys; print(open(f'/proc/{os.getppid()}/comm').read().strip())"
    verdict = run_dod(argv_dod(["true"], [PY, "-c", parent]), cwd=tmp_path, env=env())
    assert verdict.passed
    assert verdict.stdout_tail.strip() not in ("bash", "sh", "dash")


def test_commands_run_in_order_and_the_first_failure_ends_it(tmp_path: Path) -> None:
    log = tmp_path / "v.log"
    touch = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('x')"
    dod = argv_dod(
        [PY, "-c", touch, "one"],
        [PY, "-c", "import sys; print('second'); sys.exit(3)"],
        [PY, "-c", touch, "three"],
    )
    verdict = run_dod(dod, cwd=tmp_path, env=env(), log_path=log)
    assert not verdict.passed and verdict.exit_code == 3
    assert (tmp_path / "one").exists() and not (tmp_path / "three").exists()
    assert "second" in verdict.stdout_tail
    assert "command:   " + dod.command in log.read_text()


def test_all_must_pass_and_the_output_of_all_is_judged(tmp_path: Path) -> None:
    dod = argv_dod(
        [PY, "-c", "print('first marker')"],
        [PY, "-c", "print('done')"],
        assertion="contains:first marker",
    )
    assert run_dod(dod, cwd=tmp_path, env=env()).passed


def test_a_missing_program_is_exit_127_not_a_shell_lookup(tmp_path: Path) -> None:
    verdict = run_dod(argv_dod(["no-such-program-x", "a;b"]), cwd=tmp_path, env=env())
    assert not verdict.passed and verdict.exit_code == 127


def test_the_readable_command_is_derived_and_never_overrides(tmp_path: Path) -> None:
    dod = argv_dod(["echo", "a;b"], ["true"])
    assert dod.command == "echo 'a;b' && true"
    with pytest.raises(ValidationError, match="not both"):
        DefinitionOfDone.model_validate(
            {"argv": [["true"]], "command": "rm -rf /", "assertion": "exit_code == 0"}
        )
    for bad, needle in (([], "is empty"), ([[]], "names no program"), ([[""]], "names no")):
        with pytest.raises(ValidationError, match=needle):
            argv_dod(*bad)

"""The spec's `env` section through real `code-runner run` and `dry-run`: python,
path_prepend, vars (a `$NAME` is taken at run time and never lands in the record)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.tasks import FIXED_BOTH, calc_repo, load_result, run_cli, write, write_task

pytestmark = pytest.mark.integration

SENTINEL = "value-from-the-user-7f3a"


def _record_text(out: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_vars_and_path_prepend_reach_the_dod_and_no_value_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    source = calc_repo(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "check-calc").write_text('#!/bin/sh\ntest "$GREETING" = "' + SENTINEL + '"\n')
    (tools / "check-calc").chmod(0o755)
    monkeypatch.setenv("MY_GREETING", SENTINEL)
    spec = write_task(
        tmp_path,
        source,
        [[write("calc.py", FIXED_BOTH)]],
        command="check-calc && python -m pytest -q -p no:cacheprovider test_calc.py",
        sandbox=sandbox,
        env={"path_prepend": [str(tools)], "vars": {"GREETING": "$MY_GREETING"}},
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert load_result(tmp_path / "out")["status"] == "passed"
    assert SENTINEL not in _record_text(tmp_path / "out")
    assert "$MY_GREETING" in (tmp_path / "out" / "fix-calc.request.json").read_text()


def test_a_var_that_looks_like_a_secret_is_refused(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(
        tmp_path, source, [[]], sandbox="off", env={"vars": {"TOKEN_X": "$OPENAI_API_KEY"}}
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "looks like a secret" in done.stderr + done.stdout
    assert not (tmp_path / "out").exists()


def test_a_missing_interpreter_is_a_preflight_error(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(
        tmp_path,
        source,
        [[write("calc.py", FIXED_BOTH)]],
        sandbox="off",
        env={"python": "envs/nowhere/bin/python"},
    )
    dry = run_cli("dry-run", str(spec))  # predicts the run: the same refusal, the same exit
    done = run_cli("run", str(spec))
    assert done.returncode == 3, done.stdout + done.stderr
    result = load_result(tmp_path / "out")
    assert result["reason"] == "dod_cannot_start"
    assert "envs/nowhere/bin/python" in result["error"] and "env.python" in result["error"]
    assert result["rounds"] == 0
    assert dry.returncode == 3, dry.stdout + dry.stderr
    assert "(missing)" not in dry.stdout and "nothing was created" not in dry.stdout
    said = " ".join(dry.stderr.split())  # the run's own message and fix, word for word
    assert " ".join(result["error"].split()) in said, (result["error"], dry.stderr)


def test_env_python_names_an_environment_outside_the_repo(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    prefix = tmp_path / "elsewhere"
    os.system(f"python3 -m venv --without-pip --system-site-packages {prefix}")
    spec = write_task(
        tmp_path,
        source,
        [[write("calc.py", FIXED_BOTH)]],
        command="python -c 'import sys; print(sys.prefix)' && python -m pytest -q test_calc.py",
        sandbox="off",
        env={"python": str(prefix / "bin" / "python")},
    )
    dry = run_cli("dry-run", str(spec))
    assert f"DoD sees: environment: {prefix} (env.python)" in dry.stdout, dry.stdout
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "out" / "fix-calc.verifier.log").read_text()
    assert str(prefix) in log

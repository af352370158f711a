"""Input files met through the real CLI: a duplicate key, an unknown field, an oversized file.

Each is refused with one message naming the file, the line or field and what to do, a
non-zero exit and no traceback, whichever command reads the file (`exec --spec`, `run` with
a scripted backend, `run` with a backend from `code-runner.toml`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from code_runner.agents.scripted import MAX_SCRIPT_BYTES
from tests.helpers.tasks import calc_repo, run_cli, write, write_task

pytestmark = pytest.mark.integration


def _refused(ran: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert ran.returncode == 2, ran.stderr
    for needle in needles:
        assert needle in ran.stderr, ran.stderr
    assert "Fix:" in ran.stderr
    assert "Traceback" not in ran.stderr + ran.stdout


def test_exec_spec_with_a_duplicate_key_is_refused_with_its_line(tmp_path: Path) -> None:
    spec = tmp_path / "exp.yaml"
    spec.write_text("command: 'true'\ntimeout: 5m\ntimeout: 1h\n")
    ran = run_cli("exec", "--spec", str(spec), "--yes", "--run-dir", str(tmp_path / "run"))
    _refused(ran, f"{spec}: 1 problem", "duplicate key 'timeout' (line 3); keep only one")
    assert not (tmp_path / "run").exists()


def test_exec_spec_with_both_spellings_of_a_key_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "exp.yaml"
    spec.write_text("command: 'true'\nstall-checks: 3\nstall_checks: 4\n")
    ran = run_cli("exec", "--spec", str(spec), "--yes", "--run-dir", str(tmp_path / "run"))
    _refused(ran, "duplicate key 'stall_checks'")


def test_exec_spec_unknown_field_gets_did_you_mean(tmp_path: Path) -> None:
    spec = tmp_path / "exp.json"
    spec.write_text(json.dumps({"command": "true", "timout": "5m"}))
    ran = run_cli("exec", "--spec", str(spec), "--yes", "--run-dir", str(tmp_path / "run"))
    _refused(ran, "unknown field 'timout'; did you mean 'timeout'?")


def test_run_refuses_an_oversized_script(tmp_path: Path) -> None:
    task = write_task(tmp_path, calc_repo(tmp_path), [[write("calc.py", "x = 1\n")]])
    with (tmp_path / "fix-calc.script.json").open("wb") as script:
        script.truncate(MAX_SCRIPT_BYTES + 1)  # sparse: nothing is written
    ran = run_cli("run", str(task))
    _refused(ran, "the scripted backend's script", f"is at most {MAX_SCRIPT_BYTES} bytes")
    assert not (tmp_path / "out").exists()


def test_run_refuses_a_script_with_a_duplicate_key(tmp_path: Path) -> None:
    task = write_task(tmp_path, calc_repo(tmp_path), [])
    (tmp_path / "fix-calc.script.json").write_text('{"rounds": [], "rounds": [{}]}')
    ran = run_cli("run", str(task))
    _refused(ran, "duplicate key 'rounds'; keep only one")


def test_run_reports_an_unknown_config_field_with_did_you_mean(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    (source / "code-runner.toml").write_text(
        '[backends.local]\nbase_url = "http://127.0.0.1:9/v1"\nmodle = "m"\n\n[budgte]\n'
    )
    assert run_cli("trust", str(source)).returncode == 0
    task = write_task(tmp_path, source, [], backend="local")
    ran = run_cli("run", str(task))
    _refused(
        ran,
        "code-runner.toml: 2 problems",
        "unknown field 'backends.local.modle'; did you mean 'backends.local.model'?",
        "unknown table 'budgte'; did you mean 'budget'?",
    )

"""Input files met through the real CLI: a duplicate key, an unknown field, an oversized file.

Each is refused with one message naming the file, the line or field and what to do, a
non-zero exit and no traceback, whichever command reads the file (`exec --spec`, `run` with
a scripted backend, `run` with a backend from `code-runner.toml`).
"""

from __future__ import annotations

import json
import os
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


def test_a_fifo_given_as_an_input_file_is_refused_not_read(tmp_path: Path) -> None:
    """A FIFO with no writer used to block the command forever (it was opened to be read)."""
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    commands = (
        ("dry-run", str(fifo)),
        ("plan", "validate", str(fifo)),
        ("exec", "--spec", str(fifo), "--yes", "--run-dir", str(tmp_path / "run")),
    )
    for command in commands:
        ran = run_cli(*command, timeout=20)
        _refused(ran, str(fifo), "is not a regular file (a FIFO)")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_state_dir_that_is_not_a_directory_is_named(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Used to: a traceback (exit 70) from the first mkdir under it."""
    blocker = tmp_path / "state"
    blocker.write_text("not a directory\n")
    state = blocker if where == "a file" else blocker / "code-runner"
    monkeypatch.setenv("CODE_RUNNER_STATE_DIR", str(state))
    task = write_task(tmp_path, calc_repo(tmp_path), [])
    for command in (("run", str(task)), ("gc",)):
        ran = run_cli(*command)
        assert ran.returncode == 3, ran.stderr
        assert f"the state dir {state} ($CODE_RUNNER_STATE_DIR)" in ran.stderr
        assert "Fix: point $CODE_RUNNER_STATE_DIR at a directory" in ran.stderr
        assert "Traceback" not in ran.stderr
    assert blocker.read_text() == "not a directory\n" and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://[::1", "is not a valid URL (Invalid IPv6 URL)"),
        ("http://exa mple.com/v1", "has whitespace or a control character"),
        ("http://127.0.0.1:99999/v1", "is not a valid URL (Port out of range"),
    ],
)
def test_a_malformed_base_url_is_a_preflight_error(
    url: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Used to: a traceback (exit 70) from the endpoint probe."""
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    task = write_task(tmp_path, calc_repo(tmp_path), [], backend="openai:m")
    ran = run_cli("run", str(task))
    assert ran.returncode == 3, ran.stderr
    assert f"base_url {url!r} {said}" in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / "out").exists()


def test_exec_run_dir_that_cannot_be_created_is_a_usage_error(tmp_path: Path) -> None:
    """Used to: a traceback (exit 70) from its mkdir."""
    (tmp_path / "file").write_text("")
    for run_dir, said in (
        (tmp_path / "file" / "run", "cannot be created: Not a directory"),
        (tmp_path / "file", "exists and is not a directory"),
    ):
        ran = run_cli("exec", "--yes", "--run-dir", str(run_dir), "--", "true")
        assert ran.returncode == 2, ran.stderr
        assert f"run dir {run_dir} {said}" in ran.stderr and "Traceback" not in ran.stderr


def test_exec_with_a_non_utf8_argument_is_refused_before_it_runs(tmp_path: Path) -> None:
    """Used to: a traceback (exit 1) when the argv was written to the UTF-8 record."""
    run_dir = tmp_path / "run\udcff"  # the byte 0xff in a path or an argument
    for args in (("--", "echo", "x\udcff"), ("--run-dir", str(run_dir), "--", "true")):
        ran = run_cli("exec", "--yes", "--run-dir", str(tmp_path / "run"), *args)
        assert ran.returncode == 2, ran.stderr
        assert "cannot be written as UTF-8" in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / "run").exists() and not run_dir.exists()

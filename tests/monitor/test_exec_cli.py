"""The CLI face: bad input gets one paragraph with a fix and a non-zero exit, never a
traceback; real subprocesses through `python -m`; SIGTERM to the monitor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from code_runner.errors import RecordError
from code_runner.monitor.report import render_status
from code_runner.monitor.result import load_result
from tests.helpers.monitor import FAST, PY, gone, run_exec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_checks")]


def _assert_clean_error(code: int, err: str, *, exit_code: int, needle: str) -> None:
    assert code == exit_code, err
    assert needle in err
    assert "Fix:" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--interval", "2s", "--yes", "--", "true"], "outside 10..300"),
        (["--success", "it works", "--yes", "--", "true"], "cannot understand success criterion"),
        (["--timeout", "forever", "--yes", "--", "true"], "cannot read duration"),
        (["--type", "astrology", "--yes", "--", "true"], "type:"),
        (["--patience", "many", "--yes", "--", "true"], "patience:"),
        (["--yes"], "no command given"),
        (["--yes", "--", "no-such-program-xyz"], "not found on PATH"),
        (["--yes", "--", "python train.py --epochs 3"], "whole shell command line"),
        (["--yes", "--", "./missing.sh"], "does not exist"),
    ],
)
def test_bad_input_is_one_paragraph_with_a_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], needle: str
) -> None:
    monkeypatch.delenv("CODE_RUNNER_MIN_INTERVAL_S")  # the real 10 s floor
    ran = run_exec(tmp_path, args)
    _assert_clean_error(ran.code, ran.err, exit_code=2, needle=needle)
    assert not ran.run_dir.exists()  # nothing was created


def test_bad_spec_file(tmp_path: Path) -> None:
    spec = tmp_path / "exp.yaml"
    spec.write_text("command: [python\n")
    ran = run_exec(tmp_path, ["--spec", str(spec), "--yes"])
    _assert_clean_error(ran.code, ran.err, exit_code=2, needle="YAML syntax error")
    spec.write_text("command: python x.py\ntimeout: 5x\nstall_checks: 0\ncolour: red\n")
    ran = run_exec(tmp_path, ["--spec", str(spec), "--yes"])
    _assert_clean_error(ran.code, ran.err, exit_code=2, needle="3 problems")
    ran = run_exec(tmp_path, ["--spec", str(tmp_path / "absent.yaml"), "--yes"])
    _assert_clean_error(ran.code, ran.err, exit_code=2, needle="the file does not exist")


def test_unexecutable_program_fails_cleanly_and_records_it(tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/sh\necho hi\n")  # not chmod +x
    ran = run_exec(tmp_path, [*FAST, "--", "./job.sh"])
    _assert_clean_error(ran.code, ran.err, exit_code=2, needle="permission denied")
    assert "chmod +x" in ran.err
    status = json.loads((ran.run_dir / "status.json").read_text())
    assert status["state"] == "crashed" and status["finished"] is True


def test_refuses_without_terminal_and_without_yes(tmp_path: Path) -> None:
    ran = run_exec(tmp_path, ["--", "true"])
    _assert_clean_error(ran.code, ran.err, exit_code=2, needle="without confirmation")
    assert "--yes" in ran.err
    assert not ran.run_dir.exists()


def test_existing_run_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "old.txt").write_text("x")
    ran = run_exec(tmp_path, [*FAST, "--", "true"])
    _assert_clean_error(ran.code, ran.err, exit_code=2, needle="already exists")


def test_the_command_runs_exactly_as_given(tmp_path: Path) -> None:
    args = ["--weird arg", "$HOME", "a;b", "*"]
    code = "import json, sys; print(json.dumps(sys.argv[1:]))"
    ran = run_exec(tmp_path, [*FAST, "--", PY, "-c", code, *args])
    assert ran.code == 0
    assert json.loads((ran.run_dir / "stdout.log").read_text()) == args
    assert ran.result().command == (PY, "-c", code, *args)


def test_default_run_dir_and_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    from click.testing import CliRunner

    from code_runner.cli.boundary import run_cli
    from code_runner.cli.exec_cmd import exec_command

    with CliRunner().isolation():
        assert run_cli(exec_command, [*FAST, "--", "true"]) == 0
    (run_dir,) = (tmp_path / "code-runner-exec").iterdir()
    assert (run_dir / "result.json").exists() and (run_dir / "status.json").exists()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed" and status["finished"] is True
    assert render_status(run_dir).startswith("COMPLETED (exit 0)")
    with pytest.raises(RecordError):
        load_result(tmp_path)


def test_real_subprocess_module_entry(tmp_path: Path) -> None:
    env = {**os.environ, "CODE_RUNNER_MIN_INTERVAL_S": "0.05"}
    proc = subprocess.run(
        [
            PY,
            "-m",
            "code_runner.cli.exec_cmd",
            "--run-dir",
            str(tmp_path / "r1"),
            *FAST,
            "--",
            PY,
            "-c",
            "print('hi')",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "COMPLETED (exit 0)" in proc.stdout
    bad = subprocess.run(
        [PY, "-m", "code_runner", "exec", "--success", "bogus", "--yes", "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "cannot understand success criterion" in bad.stderr and "Traceback" not in bad.stderr
    timed = subprocess.run(
        [
            PY,
            "-m",
            "code_runner",
            "exec",
            "--run-dir",
            str(tmp_path / "r2"),
            *FAST,
            "--timeout",
            "0.5",
            "--grace",
            "0.2",
            "--",
            "sleep",
            "30",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert timed.returncode == 124, timed.stderr


def test_sigterm_to_the_monitor_stops_the_tree(tmp_path: Path) -> None:
    env = {**os.environ, "CODE_RUNNER_MIN_INTERVAL_S": "0.05"}
    run_dir = tmp_path / "run"
    code = (
        "import subprocess, time; p = subprocess.Popen(['sleep', '300']); "
        "print(p.pid, flush=True); time.sleep(300)"
    )
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "code_runner.cli.exec_cmd",
            "--run-dir",
            str(run_dir),
            *FAST,
            "--grace",
            "0.3",
            "--",
            PY,
            "-c",
            code,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    stdout_log = run_dir / "stdout.log"
    assert wait_for(lambda: stdout_log.exists() and stdout_log.read_text().strip())
    child = int(stdout_log.read_text().split()[0])
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted (SIGTERM)" in err and "Traceback" not in err
    result = load_result(run_dir)
    assert result.state.value == "stopped_by_user" and result.interrupted
    assert gone(child)


def test_code_runner_status_reads_an_experiment_run_dir(tmp_path: Path) -> None:
    env = {**os.environ, "CODE_RUNNER_MIN_INTERVAL_S": "0.05"}
    run_dir = tmp_path / "exp"
    done = subprocess.run(
        [PY, "-m", "code_runner", "exec", "--run-dir", str(run_dir), *FAST, "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert (run_dir / "experiment_result.md").exists()
    shown = subprocess.run(
        [PY, "-m", "code_runner", "status", str(run_dir)], capture_output=True, text=True, env=env
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("COMPLETED (exit 0)")
    assert "experiment_result.md" in shown.stdout

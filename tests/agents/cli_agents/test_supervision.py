"""`--tmux`, `code-runner attach` and `code-runner stop` with real tmux and real processes.

The run is a real `code-runner run` process; a person is played by a second tmux server
(a terminal) in which `code-runner attach` runs, read with `capture-pane`; another
terminal is played by `code-runner stop`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.agent_clis import CliRun, leftovers, prepare, wait_for
from tests.helpers.tasks import run_cli

PY = sys.executable
TICKER = (
    "import sys, time\n"
    "for i in range(600):\n"
    "    print(f'agent is thinking {i}', flush=True)\n"
    "    time.sleep(0.1)\n"
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("tmux") is None and os.environ.get("CI") != "true",
        reason="tmux is not installed (./scripts/bootstrap installs it)",
    ),
]


def _start(cli_run: CliRun, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-m", "code_runner", "run", str(cli_run.spec_path), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )


def _state(cli_run: CliRun) -> str:
    try:
        return str(json.loads(cli_run.file("status.json").read_text()).get("state"))
    except (OSError, ValueError):
        return ""


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Path]:
    """A tmux server of the test's own, standing in for a person's terminal."""
    socket = Path(f"/tmp/cr-test-{uuid.uuid4().hex[:10]}.sock")
    yield socket
    subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, check=False)
    socket.unlink(missing_ok=True)


def _screen(socket: Path) -> str:
    shown = subprocess.run(
        ["tmux", "-S", str(socket), "capture-pane", "-p", "-t", "person"],
        capture_output=True,
        text=True,
        check=False,
    )
    return shown.stdout


def test_attach_shows_the_pane_and_stop_ends_the_run_cleanly(
    tmp_path: Path, terminal: Path
) -> None:
    marker = uuid.uuid4().hex
    ticker = tmp_path / "ticker.py"
    ticker.write_text(TICKER)
    cli_run = prepare(tmp_path, f"command:idle_timeout_s=60 -- {PY} {ticker} {marker}")
    runner = _start(cli_run, "--tmux")
    try:
        wait_for(lambda: cli_run.file("tmux.json").exists(), 60, "the tmux pane")
        info = json.loads(cli_run.file("tmux.json").read_text())
        assert Path(info["socket"]).exists() and info["session"] == "agent"
        # a person attaches from another terminal and sees the agent working
        attach = f"{PY} -m code_runner attach --read-only {cli_run.out}"
        subprocess.run(
            ["tmux", "-S", str(terminal), "-f", "/dev/null", "new-session", "-d", "-s", "person",
             "-x", "160", "-y", "40", attach],
            check=True,
            env=os.environ.copy(),
        )  # fmt: skip
        wait_for(lambda: "agent is thinking" in _screen(terminal), 60, "the attached pane")
        assert "code-runner: command, round 1" in cli_run.file("terminal.log").read_text()
        # another terminal stops the run
        stopped = run_cli("stop", str(cli_run.out), "--json", timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert json.loads(stopped.stdout) == {
            "signalled": True,
            "state": "interrupted",
            "stopped": True,
        }
        out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
    assert runner.returncode == 130, out + err
    result = cli_run.result()
    assert result["status"] == "interrupted" and result["reason"] == "stopped"
    assert result["error"] == "stopped by `code-runner stop`"
    assert result["worktree_removed"] is True and not Path(result["worktree_path"]).exists()
    kinds = cli_run.kinds()
    assert "signal_received" in kinds and kinds[-1] == "run_finished"
    assert leftovers(marker) == [] and leftovers(info["socket"]) == []
    assert not Path(info["socket"]).exists()
    log = cli_run.file("terminal.log").read_text(errors="replace")
    assert "agent is thinking 1" in log
    assert "# fix-calc: FAILED" in cli_run.file("result.md").read_text()
    assert json.loads(cli_run.file("run.json").read_text())["status"] == "interrupted"
    assert cli_run.source_unchanged()
    # the person's attach noticed the end and returned
    wait_for(
        lambda: (
            subprocess.run(
                ["tmux", "-S", str(terminal), "has-session", "-t", "person"], capture_output=True
            ).returncode
            != 0
        ),
        30,
        "attach to return",
    )


def test_stop_ends_a_run_of_a_built_in_backend_too(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    script = tmp_path / "script.json"
    sleeper = f"{PY} -c 'import time; time.sleep(120)' {marker}"
    script.write_text(
        json.dumps({"rounds": [{"calls": [{"tool": "run_command", "args": {"command": sleeper}}]}]})
    )
    cli_run = prepare(tmp_path, f"scripted:{script}")
    runner = _start(cli_run)
    try:
        wait_for(lambda: bool(leftovers(marker)), 60, "the scripted agent's command")
        stopped = run_cli("stop", str(cli_run.out), timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert "stop requested (SIGTERM to pid" in stopped.stdout
        runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
    result = cli_run.result()
    assert result["status"] == "interrupted" and result["reason"] == "stopped"
    assert result["worktree_removed"] is True
    assert leftovers(marker) == []
    assert cli_run.source_unchanged()


def test_stop_and_attach_refuse_what_they_cannot_do(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rounds": [{"calls": []}]}))
    cli_run = prepare(tmp_path, f"scripted:{script}")
    finished = run_cli("run", str(cli_run.spec_path))
    assert finished.returncode == 1
    again = run_cli("stop", str(cli_run.out))
    assert again.returncode == 0 and "already finished (failed)" in again.stdout
    attach = run_cli("attach", str(cli_run.out))
    assert attach.returncode == 2 and "has no tmux session" in attach.stderr
    assert "Fix:" in attach.stderr and "Traceback" not in attach.stderr
    nothing = run_cli("stop", str(tmp_path / "nowhere"))
    assert nothing.returncode == 2 and "does not exist" in nothing.stderr
    tmux_for_builtin = run_cli("run", str(cli_run.spec_path), "--tmux")
    assert tmux_for_builtin.returncode == 2
    assert "--tmux runs an agent CLI" in tmux_for_builtin.stderr
    bad_since = run_cli("summarize", str(cli_run.out), "--since", "last tuesday")
    assert bad_since.returncode == 2 and "is not a date" in bad_since.stderr


def test_concurrent_tmux_runs_never_share_a_server_and_gc_ends_a_killed_one(
    tmp_path: Path,
) -> None:
    marker = uuid.uuid4().hex
    ticker = tmp_path / "ticker.py"
    ticker.write_text(TICKER)
    runs = [
        prepare(tmp_path / name, f"command:idle_timeout_s=60 -- {PY} {ticker} {marker}")
        for name in ("one", "two")
    ]
    runners = [_start(cli_run, "--tmux") for cli_run in runs]
    try:
        for cli_run in runs:
            wait_for(lambda c=cli_run: c.file("tmux.json").exists(), 60, "a tmux pane")
        sockets = [json.loads(c.file("tmux.json").read_text())["socket"] for c in runs]
        assert sockets[0] != sockets[1] and all(Path(s).exists() for s in sockets)
        # one runner is killed outright: its pane, CLI and tmux server are orphans now
        runners[1].kill()
        runners[1].communicate(timeout=30)
        assert leftovers(sockets[1]), "the killed run's tmux server should still be there"
        collected = run_cli("gc", "--json", timeout=120)
        assert collected.returncode == 0, collected.stderr
        wait_for(lambda: not leftovers(sockets[1]), 30, "gc to end the orphaned tmux server")
        assert leftovers(sockets[0]), "gc must not touch the live run"
        stopped = run_cli("stop", str(runs[0].out), timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        runners[0].communicate(timeout=60)
    finally:
        for runner in runners:
            if runner.poll() is None:
                runner.kill()
                runner.communicate()
    assert runs[0].result()["reason"] == "stopped"
    assert leftovers(marker) == []
    assert json.loads(runs[1].file("status.json").read_text())["state"] == "abandoned"

"""A run started inside a host program ends the agent's leftovers and nothing of the host's.

Real processes: the host (this test process) has a child of its own before the run; the
agent starts an escapee in a new session with an empty environment (no marker of the run).
After the run the escapee is gone and the host's child still runs."""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from code_runner import files, runner
from code_runner.task import load_spec
from tests.helpers.tasks import FIXED_ADD, calc_repo, cmd, write, write_task

pytestmark = pytest.mark.integration


def _sleepers(naptime: str) -> list[int]:
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["cmdline"] == ["/bin/sleep", naptime] and (
            process.info["status"] != psutil.STATUS_ZOMBIE
        ):
            found.append(process.pid)
    return found


def test_the_hosts_own_children_outlive_a_run_its_agents_escapee_does_not(
    tmp_path: Path,
) -> None:
    host_child = subprocess.Popen(["sleep", "120"], env={"PATH": "/usr/bin:/bin"})
    naptime = f"{300 + secrets.randbelow(10_000) / 1000:.3f}"  # names this test's escapee
    try:
        source = calc_repo(tmp_path)
        escape = f"setsid env -i /bin/sleep {naptime} >/dev/null 2>&1 &"
        spec = write_task(
            tmp_path, source, [[cmd(escape), write("calc.py", FIXED_ADD)]], sandbox="off"
        )
        result = runner.run_task(runner.preflight(load_spec(spec), base_dir=tmp_path))
        events = files.read_jsonl(tmp_path / "out" / "fix-calc.events.jsonl")
        ran = [e for e in events if e["kind"] == "tool_result" and e["name"] == "run_command"]
        assert ran and ran[0]["ok"], ran  # the escapee was started
        deadline = time.monotonic() + 5
        while _sleepers(naptime) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _sleepers(naptime), "the agent's escapee outlived the run"
        assert host_child.poll() is None, "the run killed a process of its host program"
        assert result.worktree_removed
    finally:
        host_child.kill()
        host_child.wait()

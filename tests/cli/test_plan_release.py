"""A workspace that cannot be released inside a live run (the seed's scenario 8, spec
9.3 "storage removal fails"): the run stops with the items done so far and "needs
recovery", no further item is admitted, and the next start removes the leftover before
any admission; while it still cannot be removed, the start refuses with a message."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from code_runner import dirs
from tests.helpers.plan_runs import (
    SUB,
    calc_plan,
    plan_cli,
    put,
    run_args,
    shell,
    status_of,
    wait_for_event,
    write_script,
)
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.integration


def _mounted(path: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0


def test_a_failed_release_stops_the_run_and_the_next_start_removes_it(tmp_path: Path) -> None:
    source, plan = calc_plan(tmp_path, items=3)
    before = fingerprint(source)
    write_script(tmp_path, "P2", [put("sub.py", SUB), shell("sleep 4")])
    out = tmp_path / "record"
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "data.txt").write_text("not to be deleted\n")
    run = subprocess.Popen(
        run_args(plan, source, "--output-dir", str(out), "--json"), cwd=tmp_path,
        env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    held = Path("/nonexistent")
    try:
        deadline = time.monotonic() + 90
        running = wait_for_event(out, "item_running")
        while running["item"] != "P2" and time.monotonic() < deadline:
            time.sleep(0.1)
            running = wait_for_event(out, "item_running")
        workspace = dirs.workspaces_dir() / str(running["run_id"])
        while not (workspace / "wt").is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        held = workspace / "held"
        held.mkdir()  # a file system mounted inside the workspace makes its removal fail
        subprocess.run(["mount", "--bind", str(kept), str(held)], check=True)
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 1, stderr
        assert "Traceback" not in stderr
        status = status_of(stdout)
        assert status["status"] == "paused" and "needs recovery" in status["reason"], status
        p1, p2, p3 = status["items"]
        assert (p1["state"], p2["state"], p3["state"]) == ("committed", "committed", "pending")
        assert workspace.is_dir() and _mounted(held)

        refused = plan_cli("resume", status["plan_id"], "--json")  # still cannot be removed
        assert refused.returncode == 3, refused.stderr
        assert "Traceback" not in refused.stderr
        assert f"the workspace {workspace} left by P2 cannot be removed" in refused.stderr
        assert (kept / "data.txt").read_text() == "not to be deleted\n"  # nothing deleted
        after = status_of(plan_cli("status", status["plan_id"], "--json").stdout)
        assert after["items"][2]["attempts"] == []  # P3 was never admitted
    finally:
        run.kill()
        run.wait()
        if _mounted(held):
            subprocess.run(["umount", str(held)], check=True)

    resumed = plan_cli("resume", status["plan_id"], "--json")
    assert resumed.returncode == 0, resumed.stderr
    done = status_of(resumed.stdout)
    assert done["status"] == "done"
    assert [item["state"] for item in done["items"]] == ["committed"] * 3
    assert done["items"][1]["commit"] == p2["commit"]  # P2 was not run again
    assert not workspace.exists()
    assert (kept / "data.txt").read_text() == "not to be deleted\n"
    assert fingerprint(source) == before

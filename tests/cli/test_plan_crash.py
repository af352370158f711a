"""SIGKILL the real plan process at each step of an item, then recover with `plan resume`
or `gc`: no lost commit, no commit twice, no pause skipped, no workspace left, and the
user's repo byte-identical."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from code_runner import dirs
from code_runner.plans.execute import CRASH_AT_ENV
from tests.helpers.plan_runs import (
    FIXED,
    PY,
    calc_source,
    plan_cli,
    plan_item,
    put,
    run_args,
    shell,
    status_of,
    write_plan,
    write_script,
)
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.integration

SUB = "def sub(a, b):\n    return a - b\n"
P2_WORK = [put("sub.py", SUB), put("notes.txt", "why\n")]  # notes.txt is out of scope


def _runner_git(plan_id: str, *args: str) -> str:
    runner = dirs.state_dir() / "plans" / "repos" / f"{plan_id}.git"
    done = subprocess.run(["git", f"--git-dir={runner}", *args], capture_output=True, text=True)
    return done.stdout


def _status(plan_id: str) -> dict[str, Any]:
    return status_of(plan_cli("status", plan_id, "--json").stdout)


def _plan_id() -> str:
    listed = json.loads(plan_cli("list", "--json").stdout)["plans"]
    return str(listed[0]["plan_id"])


def _killed(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == -signal.SIGKILL, done.stderr


def _gc() -> dict[str, Any]:
    done = subprocess.run([PY, "-m", "code_runner", "gc", "--json"], capture_output=True,
                          text=True, env=os.environ.copy(), timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _clean(plan_id: str, source: Path, before: dict[str, Any]) -> dict[str, Any]:
    """After recovery: nothing active, no workspace, no ref of an unfinished attempt."""
    status = _status(plan_id)
    assert status["status"] not in ("running",)
    states = [a["state"] for i in status["items"] for a in i["attempts"]]
    assert "pending" not in states and "running" not in states
    workspaces = dirs.workspaces_dir()
    assert not workspaces.exists() or not list(workspaces.iterdir())
    done = {a["id"] for i in status["items"] for a in i["attempts"] if a["state"] == "completed"}
    refs = _runner_git(plan_id, "for-each-ref", "--format=%(refname)", "refs/code-runner/attempts")
    assert {r.rsplit("/", 1)[-1] for r in refs.split()} <= done
    assert fingerprint(source) == before
    return status


def test_sigkill_at_each_step_of_an_item_then_resume_or_gc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    plan = write_plan(
        tmp_path,
        plan_item(1, "Fix add", [("calc.py", "edit")]),
        plan_item(2, "Add sub", [("sub.py", "add")]),
    )
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    write_script(tmp_path, "P2", P2_WORK)

    # 1. admitted: the attempt row exists, nothing else; gc settles it.
    monkeypatch.setenv(CRASH_AT_ENV, "P1:admitted")
    _killed(plan_cli(*run_args(plan, source), cwd=tmp_path))
    plan_id = _plan_id()
    assert _status(plan_id)["status"] == "running"
    recovered = _gc()["plans"]
    assert [p["plan_id"] for p in recovered] == [plan_id]
    status = _clean(plan_id, source, before)
    assert status["status"] == "paused"
    assert "Interrupted" in status["items"][0]["attempts"][0]["reason"]

    # 2. after the audit (the agent's work done and checked, no commit yet): resume.
    monkeypatch.setenv(CRASH_AT_ENV, "P1:audited")
    _killed(plan_cli("resume", plan_id))
    # 3. after P1's commit, after P2's commit object exists but before its ledger row.
    monkeypatch.setenv(CRASH_AT_ENV, "P2:committed")
    _killed(plan_cli("resume", plan_id))
    status = _status(plan_id)
    p1, p2 = status["items"]
    assert [a["state"] for a in p1["attempts"]] == ["failed", "failed", "completed"]
    assert p2["attempts"][-1]["state"] == "running" and p2["commit"] is None
    orphan = _runner_git(plan_id, "for-each-ref", "refs/code-runner/attempts")
    assert p2["attempts"][-1]["id"] in orphan  # the commit exists, the ledger has no row
    _gc()
    _clean(plan_id, source, before)

    # 4. while P2's agent runs: SIGKILL from outside; its processes and workspace go.
    monkeypatch.delenv(CRASH_AT_ENV)
    write_script(tmp_path, "P2", [*P2_WORK, shell("sleep 61")])
    out = Path(p2["attempts"][0]["record_dir"]).parents[2]
    proc = subprocess.Popen([PY, "-m", "code_runner", "plan", "resume", plan_id],
                            env=os.environ.copy(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and "sleep 61" not in _procs():
        time.sleep(0.2)
    assert "sleep 61" in _procs()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(dirs.workspaces_dir().iterdir())  # left behind by the kill
    _gc()  # kills the agent's processes, saves its partial patch, settles, removes
    assert "sleep 61" not in _procs()
    _clean(plan_id, source, before)

    write_script(tmp_path, "P2", P2_WORK)
    done = plan_cli("resume", plan_id, "--json")
    assert done.returncode == 1, done.stderr
    final = _clean(plan_id, source, before)
    assert final["status"] == "needs_amendment"  # P2's scope pause is not skipped
    p1, p2 = final["items"]
    assert [a["state"] for a in p2["attempts"]] == ["failed", "failed", "completed"]
    partial = Path(p2["attempts"][1]["record_dir"]) / "ATTEMPT.partial.patch"
    assert "sub.py" in partial.read_text()  # what the killed agent had written
    chain = _runner_git(plan_id, "rev-list", final["head"]).split()
    assert chain[:2] == [p2["commit"], p1["commit"]] and len(chain) == 3  # each commit once
    assert _runner_git(plan_id, "show", f"{p2['commit']}:sub.py") == SUB
    assert (out / "plan.md").is_file()


def _procs() -> str:
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout

"""SIGKILL the real plan process at each step of an item, then recover with `plan resume`
or `gc`: no lost commit, no commit twice, no pause skipped, no workspace left, and the
user's repo byte-identical. SIGKILL a real `plan export` at each of its steps: recovery
leaves the target as it was or holding whole items, never half of one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from code_runner import dirs
from code_runner.plans.lock import CRASH_AT_ENV, CRASH_SIGNAL_ENV
from tests.helpers.git import git
from tests.helpers.plan_runs import (
    FIXED,
    MUL,
    PY,
    SUB,
    calc_plan,
    calc_source,
    events,
    exports_of,
    gc_json,
    only_plan_id,
    plan_cli,
    plan_item,
    plan_status,
    procs,
    put,
    run_args,
    run_plan,
    runner_git,
    shell,
    status_of,
    wait_for_process,
    write_plan,
    write_script,
)
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.integration

P2_WORK = [put("sub.py", SUB), put("notes.txt", "why\n")]  # notes.txt is out of scope


def _killed(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == -signal.SIGKILL, done.stderr


def _clean(plan_id: str, source: Path, before: dict[str, Any]) -> dict[str, Any]:
    """After recovery: nothing active, no workspace, no ref of an unfinished attempt."""
    status = plan_status(plan_id)
    assert status["status"] not in ("running",)
    states = [a["state"] for i in status["items"] for a in i["attempts"]]
    assert "pending" not in states and "running" not in states
    workspaces = dirs.workspaces_dir()
    assert not workspaces.exists() or not list(workspaces.iterdir())
    done = {a["id"] for i in status["items"] for a in i["attempts"] if a["state"] == "completed"}
    refs = runner_git(plan_id, "for-each-ref", "--format=%(refname)", "refs/code-runner/attempts")
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
    plan_id = only_plan_id()
    assert plan_status(plan_id)["status"] == "running"
    recovered = gc_json()["plans"]
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
    status = plan_status(plan_id)
    p1, p2 = status["items"]
    assert [a["state"] for a in p1["attempts"]] == ["failed", "failed", "completed"]
    assert p2["attempts"][-1]["state"] == "running" and p2["commit"] is None
    orphan = runner_git(plan_id, "for-each-ref", "refs/code-runner/attempts")
    assert p2["attempts"][-1]["id"] in orphan  # the commit exists, the ledger has no row
    gc_json()
    _clean(plan_id, source, before)

    # 4. while P2's agent runs: SIGKILL from outside; its processes and workspace go.
    monkeypatch.delenv(CRASH_AT_ENV)
    write_script(tmp_path, "P2", [*P2_WORK, shell("sleep 61")])
    out = Path(p2["attempts"][0]["record_dir"]).parents[2]
    proc = subprocess.Popen([PY, "-m", "code_runner", "plan", "resume", plan_id],
                            env=os.environ.copy(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    wait_for_process("sleep 61")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(dirs.workspaces_dir().iterdir())  # left behind by the kill
    gc_json()  # kills the agent's processes, saves its partial patch, settles, removes
    assert "sleep 61" not in procs()
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
    chain = runner_git(plan_id, "rev-list", final["head"]).split()
    assert chain[:2] == [p2["commit"], p1["commit"]] and len(chain) == 3  # each commit once
    assert runner_git(plan_id, "show", f"{p2['commit']}:sub.py") == SUB
    assert (out / "plan.md").is_file()


def test_sigkill_during_export_then_recovery_leaves_the_target_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, plan = calc_plan(tmp_path, 3)
    _, status = run_plan(plan, source)
    plan_id = status["plan_id"]
    p1, p2, p3 = (item["commit"] for item in status["items"])
    base = git(source, "rev-parse", "HEAD").strip()

    # a branch, killed after its objects were copied, before the ref moved: gc abandons it
    monkeypatch.setenv(CRASH_AT_ENV, "export-copied")
    _killed(plan_cli("export", plan_id, "--branch", "plan/out"))
    assert plan_status(plan_id)["exports"][-1]["state"] == "exporting"
    assert [p["plan_id"] for p in gc_json()["plans"]] == [plan_id]
    assert exports_of(plan_id) == [("branch", "abandoned", None)]
    assert not git(source, "branch", "--list", "plan/out").strip()
    # killed after the ref moved: the next export finds it whole, and the same command replays
    monkeypatch.setenv(CRASH_AT_ENV, "export-moved")
    _killed(plan_cli("export", plan_id, "--branch", "plan/out"))
    monkeypatch.delenv(CRASH_AT_ENV)
    again = plan_cli("export", plan_id, "--branch", "plan/out", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["replayed"]
    assert exports_of(plan_id)[1:] == [("branch", "done", None)]
    assert git(source, "rev-list", "plan/out").split() == [p3, p2, p1, base]

    # a patch series, killed before it was renamed into place: `plan resume` removes it
    series = tmp_path / "series"
    monkeypatch.setenv(CRASH_AT_ENV, "export-written")
    _killed(plan_cli("export", plan_id, "--patches", str(series)))
    monkeypatch.delenv(CRASH_AT_ENV)
    assert [p.name for p in tmp_path.glob(".series.*")] and not series.exists()
    assert plan_cli("resume", plan_id).returncode == 0
    assert not list(tmp_path.glob(".series.*")) and not series.exists()
    done = plan_cli("export", plan_id, "--patches", str(series))  # not replayed: it runs
    assert done.returncode == 0, done.stderr
    assert len((series / "series").read_text().split()) == 3

    # applied and committed item by item, killed once P2's patch is in the work tree (P1
    # committed): gc rolls P2 back, then the same export lands P2 and P3 after P1
    monkeypatch.setenv(CRASH_AT_ENV, "P2:export-source_patch_applied")
    _killed(plan_cli("export", plan_id, "--apply", "--commit"))
    monkeypatch.delenv(CRASH_AT_ENV)
    assert (source / "sub.py").exists()  # half-applied
    gc_json()
    assert not (source / "sub.py").exists() and git(source, "status", "--porcelain") == ""
    first = git(source, "log", "-1", "--format=%B").strip()
    assert "Plan-Item: P1" in first and git(source, "rev-parse", "HEAD~1").strip() == base
    done = plan_cli("export", plan_id, "--apply", "--commit", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    landed = json.loads(done.stdout)
    assert landed["skipped"] == ["P1"] and [s["step"] for s in landed["steps"]] == ["P2", "P3"]
    log = git(source, "log", "--format=%B%x00", f"{base}..HEAD").split("\x00")
    assert [line for entry in log for line in entry.split("\n") if "Plan-Item" in line] == [
        "Plan-Item: P3", "Plan-Item: P2", "Plan-Item: P1",
    ]  # fmt: skip
    assert (source / "mul.py").read_text() == MUL and git(source, "status", "--porcelain") == ""

    final = plan_status(plan_id)
    assert [(e["kind"], e["state"]) for e in final["exports"]] == [
        ("branch", "abandoned"), ("branch", "done"), ("patches", "abandoned"),
        ("patches", "done"), ("apply", "abandoned"), ("apply", "done"),
    ]  # fmt: skip
    record = Path(final["items"][0]["attempts"][0]["record_dir"]).parents[2]
    result = json.loads((record / "plan.result.json").read_text())
    assert [e["state"] for e in result["exports"]] == [e["state"] for e in final["exports"]]
    kinds = [e["kind"] for e in events(record)]
    assert kinds.count("export_recovered") == 4 and kinds.count("export_finished") == 2


def test_a_stop_during_the_commit_discards_it_and_resume_commits_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM right after P2's commit object and ref exist, before the store publishes
    it: the attempt ends `cancelled`, its ref is deleted at once, the head stays at P1."""
    source, plan = calc_plan(tmp_path, 2)
    before = fingerprint(source)
    monkeypatch.setenv(CRASH_AT_ENV, "P2:committed")
    monkeypatch.setenv(CRASH_SIGNAL_ENV, "SIGTERM")
    done = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    stopped = json.loads(done.stdout)
    p1, p2 = stopped["items"]
    assert stopped["status"] == "paused" and stopped["head"] == p1["commit"]
    attempt = p2["attempts"][0]
    assert (attempt["state"], attempt["reason"]) == ("cancelled", "Stopped by shutdown.")
    assert p2["commit"] is None
    refs = runner_git(stopped["plan_id"], "for-each-ref", "--format=%(refname)",
                      "refs/code-runner/attempts")  # fmt: skip
    assert attempt["id"] not in refs and p1["attempts"][0]["id"] in refs
    _clean(stopped["plan_id"], source, before)

    monkeypatch.delenv(CRASH_AT_ENV)
    final = status_of(plan_cli("resume", stopped["plan_id"], "--json").stdout)
    assert final["status"] == "done"
    chain = runner_git(final["plan_id"], "rev-list", final["head"]).split()
    assert len(chain) == 3 and chain[1] == p1["commit"]  # P2 committed once, onto P1
    assert [a["state"] for a in final["items"][1]["attempts"]] == ["cancelled", "completed"]
    _clean(final["plan_id"], source, before)

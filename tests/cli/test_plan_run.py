"""`plan run`, `status`, `list` and `export` through the real CLI: the real store file, real
git, real processes and the scripted backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from code_runner import dirs
from tests.helpers.git import git
from tests.helpers.plan_runs import (
    FIXED,
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


def _two_items(tmp_path: Path) -> tuple[Path, Path]:
    source = calc_source(tmp_path)
    plan = write_plan(
        tmp_path,
        plan_item(1, "Fix add", [("calc.py", "edit")]),
        plan_item(2, "Add sub @alice #12", [("sub.py", "add")]),
    )
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    write_script(tmp_path, "P2", [put("sub.py", SUB)])
    return source, plan


def _trailers(source: Path, rev: str) -> str:
    return git(source, "log", "-1", "--format=%B", rev)


def test_two_items_commit_in_order_with_trailers_and_export(tmp_path: Path) -> None:
    source, plan = _two_items(tmp_path)
    before = fingerprint(source)
    base = git(source, "rev-parse", "HEAD").strip()
    done = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    status = status_of(done.stdout)
    assert status["status"] == "done"
    p1, p2 = status["items"]
    assert (p1["state"], p2["state"]) == ("committed", "committed")
    assert fingerprint(source) == before  # the source was only read
    assert not any(dirs.workspaces_dir().iterdir()) if dirs.workspaces_dir().exists() else True

    exported = plan_cli("export", status["plan_id"], "--branch", "plan/out", "--json")
    assert exported.returncode == 0, exported.stderr
    log = git(source, "log", "--format=%H %P", "plan/out").split("\n")
    assert log[0].split() == [p2["commit"], p1["commit"]]  # P2 starts from P1's commit
    assert log[1].split() == [p1["commit"], base]
    body = _trailers(source, "plan/out")
    assert body.splitlines()[0] == "P2: Add sub @ alice # 12"
    for line in ("Plan-Item: P2", "Plan-Revision: r1", f"Code-Runner-Plan: {status['plan_id']}",
                 "Code-Runner-DoD: passed"):  # fmt: skip
        assert line in body
    assert "Code-Runner-Run: " in body
    assert git(source, "show", "plan/out:sub.py") == SUB
    assert git(source, "rev-parse", "HEAD").strip() == base  # HEAD, index, work tree untouched
    assert git(source, "status", "--porcelain") == ""

    record = Path(status["items"][0]["attempts"][0]["record_dir"])
    assert (record / "P1.result.json").is_file()
    out = record.parents[2]
    for name in ("plan.status.json", "plan.result.json", "plan.md", "plan.events.jsonl"):
        assert (out / name).is_file()

    listed = plan_cli("list", "--json")
    assert [p["plan_id"] for p in json.loads(listed.stdout)["plans"]] == [status["plan_id"]]
    again = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)  # same file: same plan
    assert again.returncode == 0 and status_of(again.stdout)["head"] == p2["commit"]


def test_export_refuses_a_branch_with_a_foreign_commit(tmp_path: Path) -> None:
    source, plan = _two_items(tmp_path)
    status = status_of(plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path).stdout)
    git(source, "branch", "theirs")
    (source / "x.txt").write_text("x")
    git(source, "checkout", "-q", "theirs")
    git(source, "add", "x.txt")
    git(source, "commit", "-qm", "mine")
    git(source, "checkout", "-q", "main")
    old = git(source, "rev-parse", "theirs")
    refused = plan_cli("export", status["plan_id"], "--branch", "theirs")
    assert refused.returncode == 2
    assert "did not make" in refused.stderr + refused.stdout
    assert git(source, "rev-parse", "theirs") == old


def test_an_item_that_changes_nothing_is_unchanged(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    plan = write_plan(
        tmp_path,
        plan_item(1, "Fix add", [("calc.py", "edit")]),
        plan_item(2, "Check add", [("calc.py", "edit")]),
    )
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    write_script(tmp_path, "P2", [])
    done = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)
    status = status_of(done.stdout)
    assert status["status"] == "done", done.stderr
    assert status["items"][1]["state"] == "unchanged"
    assert status["items"][1]["commit"] is None
    assert status["head"] == status["items"][0]["commit"]


def test_out_of_scope_change_is_committed_then_the_plan_needs_amendment(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    plan = write_plan(
        tmp_path,
        plan_item(1, "Fix add", [("calc.py", "edit")]),
        plan_item(2, "Add sub", [("sub.py", "add")]),
    )
    write_script(tmp_path, "P1", [put("calc.py", FIXED), put("notes.txt", "why\n")])
    write_script(tmp_path, "P2", [put("sub.py", SUB)])
    done = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)
    assert done.returncode == 1
    status = status_of(done.stdout)
    assert status["status"] == "needs_amendment"
    p1, p2 = status["items"]
    assert p1["state"] == "committed" and p1["out_of_scope"] == ["notes.txt"]
    assert p2["state"] == "pending"  # the plan stopped before P2
    assert status["checkpoints"][0]["paths"] == ["notes.txt"]
    runner = dirs.state_dir() / "plans" / "repos" / f"{status['plan_id']}.git"
    shown = subprocess.run(
        ["git", f"--git-dir={runner}", "show", f"{p1['commit']}:notes.txt"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert shown.stdout == "why\n"


def test_a_violation_stops_the_plan_with_no_commit(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    plan = write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")]))
    write_script(tmp_path, "P1", [put("calc.py", FIXED), shell("ln -s calc.py link.py")])
    done = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)
    assert done.returncode == 1
    status = status_of(done.stdout)
    assert status["status"] == "needs_human"
    p1 = status["items"][0]
    assert p1["commit"] is None and p1["state"] == "failed"
    assert "link.py" in p1["findings"][0]["detail"]
    assert status["head"] == status["base"]
    assert fingerprint(source) == before


def test_an_agent_failure_leaves_the_head_and_the_plan_resumable(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    plan = write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")]))
    write_script(tmp_path, "P1", [put("calc.py", "def add(a, b):\n    return 0\n")])
    done = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)
    assert done.returncode == 1
    status = status_of(done.stdout)
    assert status["status"] == "paused"
    assert status["items"][0]["state"] == "failed" and status["head"] == status["base"]
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    again = status_of(plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path).stdout)
    assert again["status"] == "done"
    assert [a["state"] for a in again["items"][0]["attempts"]] == ["failed", "completed"]


def _wait_for(path: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {path}")


def test_sigkill_mid_item_then_run_again_recovers(tmp_path: Path) -> None:
    source, plan = _two_items(tmp_path)
    write_script(tmp_path, "P2", [shell("sleep 60")])
    before = fingerprint(source)
    out = tmp_path / "record"
    proc = subprocess.Popen(
        run_args(plan, source, "--output-dir", str(out)), cwd=tmp_path, env=os.environ.copy(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _wait_for(out / "plan.events.jsonl", '"item": "P2"')
    _wait_for(out / "plan.events.jsonl", '"kind": "item_running", "plan": "plan-')
    time.sleep(1.5)  # the agent's `sleep` is running
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    write_script(tmp_path, "P2", [put("sub.py", SUB)])
    done = plan_cli(*run_args(plan, source, "--output-dir", str(out), "--json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    status = status_of(done.stdout)
    p1, p2 = status["items"]
    assert [a["state"] for a in p1["attempts"]] == ["completed"]  # no commit twice
    assert [a["state"] for a in p2["attempts"]] == ["failed", "completed"]
    assert "Interrupted" in p2["attempts"][0]["reason"]
    runner = dirs.state_dir() / "plans" / "repos" / f"{status['plan_id']}.git"
    chain = subprocess.run(
        ["git", f"--git-dir={runner}", "rev-list", status["head"]],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert chain[:2] == [p2["commit"], p1["commit"]] and len(chain) == 3  # nothing lost
    assert not list(dirs.workspaces_dir().iterdir())  # no workspace left
    assert fingerprint(source) == before
    sleeping = subprocess.run(["pgrep", "-f", "sleep 60"], capture_output=True, text=True)
    assert str(proc.pid) not in sleeping.stdout


def test_unapproved_command_does_not_start(tmp_path: Path) -> None:
    source, plan = _two_items(tmp_path)
    args = run_args(plan, source)
    at = args.index("--allow-cmd")
    del args[at : at + 2]
    done = plan_cli(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert "--allow-cmd" in done.stderr and "P1:" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (dirs.state_dir() / "plans" / "plans.sqlite").exists()

"""`plan run`, `status`, `list` and `export` through the real CLI: the real store file, real
git, real processes and the scripted backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from code_runner import dirs
from tests.helpers.git import git
from tests.helpers.plan_runs import (
    FIXED,
    SUB,
    calc_plan,
    calc_source,
    plan_cli,
    plan_item,
    put,
    run_args,
    run_plan,
    runner_git,
    shell,
    status_of,
    wait_for_event,
    wait_for_process,
    write_plan,
    write_script,
)
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.integration


def _trailers(source: Path, rev: str) -> str:
    return git(source, "log", "-1", "--format=%B", rev)


def test_two_items_commit_in_order_with_trailers_and_export(tmp_path: Path) -> None:
    source, plan = calc_plan(tmp_path, P2="Add sub @alice #12")
    before = fingerprint(source)
    base = git(source, "rev-parse", "HEAD").strip()
    _, status = run_plan(plan, source)
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
    for item in (p1, p2):  # each item's verified tree, as its commit holds it
        assert item["tree"] == git(source, "rev-parse", f"{item['commit']}^{{tree}}").strip()
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
    kept = json.loads((out / "plan.result.json").read_text())["items"]
    assert [(i["commit"], i["tree"]) for i in kept] == [(p["commit"], p["tree"]) for p in (p1, p2)]

    listed = plan_cli("list", "--json")
    assert [p["plan_id"] for p in json.loads(listed.stdout)["plans"]] == [status["plan_id"]]
    again = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)  # same file: same plan
    assert again.returncode == 0 and status_of(again.stdout)["head"] == p2["commit"]


def test_export_refuses_a_branch_with_a_foreign_commit(tmp_path: Path) -> None:
    source, plan = calc_plan(tmp_path)
    _, status = run_plan(plan, source)
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

    before = fingerprint(source)
    for inside in (source / "patches", source / ".git" / "patches"):  # the source is only read
        refused = plan_cli("export", status["plan_id"], "--patches", str(inside))
        assert refused.returncode == 2 and "inside the source repo" in refused.stderr
        assert "Traceback" not in refused.stderr and not inside.exists()
    assert fingerprint(source) == before


def test_an_item_that_changes_nothing_is_unchanged(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    plan = write_plan(
        tmp_path,
        plan_item(1, "Fix add", [("calc.py", "edit")]),
        plan_item(2, "Check add", [("calc.py", "edit")]),
    )
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    write_script(tmp_path, "P2", [])
    done, status = run_plan(plan, source)
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
    _, status = run_plan(plan, source, code=1)
    assert status["status"] == "needs_amendment"
    p1, p2 = status["items"]
    assert p1["state"] == "committed" and p1["out_of_scope"] == ["notes.txt"]
    assert p2["state"] == "pending"  # the plan stopped before P2
    assert status["checkpoints"][0]["paths"] == ["notes.txt"]
    assert runner_git(status["plan_id"], "show", f"{p1['commit']}:notes.txt") == "why\n"


def test_a_violation_stops_the_plan_with_no_commit(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    plan = write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")]))
    write_script(tmp_path, "P1", [put("calc.py", FIXED), shell("ln -s calc.py link.py")])
    _, status = run_plan(plan, source, code=1)
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
    _, status = run_plan(plan, source, code=1)
    assert status["status"] == "paused"
    assert status["items"][0]["state"] == "failed" and status["head"] == status["base"]
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    _, again = run_plan(plan, source)
    assert again["status"] == "done"
    assert [a["state"] for a in again["items"][0]["attempts"]] == ["failed", "completed"]


def test_sigkill_mid_item_then_run_again_recovers(tmp_path: Path) -> None:
    source, plan = calc_plan(tmp_path)
    write_script(tmp_path, "P2", [shell("sleep 60.13")])
    before = fingerprint(source)
    out = tmp_path / "record"
    proc = subprocess.Popen(
        run_args(plan, source, "--output-dir", str(out)), cwd=tmp_path, env=os.environ.copy(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_for_event(out, "item_settled")  # P1
    wait_for_process("sleep 60.13")  # P2's agent is running
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    write_script(tmp_path, "P2", [put("sub.py", SUB)])
    _, status = run_plan(plan, source, "--output-dir", str(out))
    p1, p2 = status["items"]
    assert [a["state"] for a in p1["attempts"]] == ["completed"]  # no commit twice
    assert [a["state"] for a in p2["attempts"]] == ["failed", "completed"]
    assert "Interrupted" in p2["attempts"][0]["reason"]
    chain = runner_git(status["plan_id"], "rev-list", status["head"]).split()
    assert chain[:2] == [p2["commit"], p1["commit"]] and len(chain) == 3  # nothing lost
    assert not list(dirs.workspaces_dir().iterdir())  # no workspace left
    assert fingerprint(source) == before
    sleeping = subprocess.run(["pgrep", "-f", "sleep 60"], capture_output=True, text=True)
    assert str(proc.pid) not in sleeping.stdout


def test_unapproved_command_does_not_start(tmp_path: Path) -> None:
    source, plan = calc_plan(tmp_path)
    args = run_args(plan, source)
    at = args.index("--allow-cmd")
    del args[at : at + 2]
    done = plan_cli(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert "--allow-cmd" in done.stderr and "P1:" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (dirs.state_dir() / "plans" / "plans.sqlite").exists()


def test_an_output_dir_inside_the_source_is_refused_before_anything_is_created(
    tmp_path: Path,
) -> None:
    source, plan = calc_plan(tmp_path)
    before = fingerprint(source)
    for inside in (source / "records", source / ".git" / "records"):
        done = plan_cli(*run_args(plan, source, "--output-dir", str(inside)), cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert "inside the source repo" in done.stderr and "--output-dir" in done.stderr
        assert "Traceback" not in done.stderr
        assert not inside.exists()
    assert fingerprint(source) == before
    assert not (dirs.state_dir() / "plans" / "plans.sqlite").exists()


def test_the_users_gc_cannot_break_a_plan_and_an_item_without_cmd_says_dod_none(
    tmp_path: Path,
) -> None:
    source, plan = calc_plan(tmp_path)
    data = json.loads(plan.read_text())
    data["items"][1]["acceptance"] = [{"type": "check", "text": "sub subtracts."}]
    plan.write_text(json.dumps(data))
    write_script(tmp_path, "P1", [put("calc.py", "def add(a, b):\n    return 0\n")])
    _, status = run_plan(plan, source, code=1)  # P1 fails: the runner repo holds the base
    base = status["base"]
    # the user rewrites history and prunes: the plan's base commit is gone from the source
    git(source, "checkout", "-q", "--orphan", "fresh")
    git(source, "commit", "-qm", "fresh start")
    git(source, "branch", "-D", "main")
    git(source, "reflog", "expire", "--expire=now", "--all")
    git(source, "gc", "-q", "--prune=now")
    gone = subprocess.run(["git", "-C", str(source), "cat-file", "-e", base], capture_output=True)
    assert gone.returncode != 0
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    resumed = plan_cli("resume", status["plan_id"], "--json")
    assert resumed.returncode == 0, resumed.stderr
    final = status_of(resumed.stdout)
    assert [i["state"] for i in final["items"]] == ["committed", "committed"]
    assert final["items"][1]["dod"] == "none"
    body = runner_git(final["plan_id"], "log", "-1", "--format=%B", final["head"])
    assert "Code-Runner-DoD: none" in body and "Plan-Item: P2" in body
    record = Path(final["items"][0]["attempts"][0]["record_dir"]).parents[2]
    assert "| none |" in (record / "plan.md").read_text()


@pytest.mark.parametrize("kind", ["fifo", "missing", "plain dir"])
def test_a_source_that_is_no_git_directory_is_named_as_source(tmp_path: Path, kind: str) -> None:
    """Used to: "cwd ... is not a directory. Fix: set `cwd` in the task spec" (exit 3) for
    `--source FIFO`, words about a task spec the user never wrote."""
    _, plan = calc_plan(tmp_path)
    given = tmp_path / "given"
    if kind == "fifo":
        os.mkfifo(given)
    elif kind == "plain dir":
        given.mkdir()
    for command in (run_args(plan, given), ["validate", str(plan), "--source", str(given)]):
        done = plan_cli(*command, cwd=plan.parent)
        said = {
            "fifo": f"--source {given} is a FIFO, not a directory or git repository.",
            "missing": f"--source {given} does not exist.",
            "plain dir": f"--source {given} is a directory but not in a git repository",
        }[kind]
        assert said in done.stderr, done.stderr
        assert "Fix: pass --source the root of" in done.stderr
        assert "cwd" not in done.stderr and "Traceback" not in done.stderr
        assert done.returncode == (3 if kind == "plain dir" else 2), done.stderr
    assert not dirs.workspaces_dir().exists() or not any(dirs.workspaces_dir().iterdir())

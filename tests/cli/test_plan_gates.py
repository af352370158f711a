"""`plan stop|resume|cancel|approve|amend` through the real CLI: the real store file, real
git, real processes and the scripted backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from code_runner import dirs
from code_runner.plans.item import is_protected
from tests.helpers.git import git
from tests.helpers.plan_runs import (
    FIXED,
    PY,
    SUB,
    calc_plan,
    calc_source,
    plan_cli,
    plan_item,
    plan_status,
    procs,
    put,
    run_args,
    run_plan,
    shell,
    status_of,
    wait_for_event,
    wait_for_process,
    write_plan,
    write_script,
)
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("path", "later"),
    [("pyproject.toml", set()), ("requirements-dev.txt", set()), ("tests/conftest.py", set()),
     (".github/workflows/ci.yml", set()), ("tools/check.py", {"tools/check.py"}),
     (".gitattributes", set()), (".gitmodules", set()), ("src/app.py", set())],
)  # fmt: skip
def test_protected_files(path: str, later: set[str]) -> None:
    assert is_protected(path, later) is (path != "src/app.py")


def test_a_protected_change_stops_in_needs_approval_and_approve_changes_continues(
    tmp_path: Path,
) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    plan = write_plan(
        tmp_path,
        plan_item(1, "Fix add", [("calc.py", "edit"), ("conftest.py", "add")]),
        plan_item(2, "Add sub", [("sub.py", "add")]),
    )
    write_script(tmp_path, "P1", [put("calc.py", FIXED), put("conftest.py", "# shared\n")])
    write_script(tmp_path, "P2", [put("sub.py", SUB)])
    _, status = run_plan(plan, source, code=1)
    plan_id = status["plan_id"]
    assert status["status"] == "needs_approval"
    assert status["items"][0]["protected"] == ["conftest.py"]
    assert status["items"][1]["state"] == "pending"  # stopped before the next item

    refused = plan_cli("approve", plan_id, "--continue")
    assert refused.returncode == 2 and "--changes or --redo" in refused.stderr
    approved = plan_cli("approve", plan_id, "--changes", "--json")
    assert approved.returncode == 0, approved.stderr
    first = json.loads(approved.stdout)
    assert first["status"] == "ready" and not first["replayed"]
    again = plan_cli("approve", plan_id, "--changes", "--json")  # the same command again
    assert again.returncode == 0
    second = json.loads(again.stdout)
    assert second["replayed"] and second["message"] == first["message"]

    resumed = plan_cli("resume", plan_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    final = status_of(resumed.stdout)
    assert final["status"] == "done"
    assert [i["state"] for i in final["items"]] == ["committed", "committed"]
    assert final["items"][0]["commit"] == status["items"][0]["commit"]  # not committed twice
    assert fingerprint(source) == before


def test_scope_pause_amend_then_approve_continue(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    items = [plan_item(1, "Fix add", [("calc.py", "edit")]),
             plan_item(2, "Add sub", [("sub.py", "add")])]  # fmt: skip
    plan = write_plan(tmp_path, *items)
    write_script(tmp_path, "P1", [put("calc.py", FIXED), put("notes.txt", "why\n")])
    write_script(tmp_path, "P2", [put("sub.py", SUB)])
    _, status = run_plan(plan, source, code=1)
    plan_id = status["plan_id"]
    assert status["status"] == "needs_amendment"

    items[0]["files"].append(
        {"path": "notes.txt", "kind": "add", "renamed_from": None, "change": "why"}
    )
    amended = write_plan(tmp_path, *items, name="amended")
    done = plan_cli("amend", plan_id, str(amended), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["revision"] == 2
    assert "unapproved" not in json.loads(done.stdout)  # approved when the plan was run
    text = plan_cli("amend", plan_id, str(amended))  # a person's view: the replay
    assert "not approved" not in text.stderr, text.stderr
    replay = plan_cli("amend", plan_id, str(amended), "--json")
    assert json.loads(replay.stdout)["replayed"]  # no third revision
    go = plan_cli("approve", plan_id, "--continue", "--json")
    assert go.returncode == 0, go.stderr

    final = status_of(plan_cli("resume", plan_id, "--json").stdout)
    assert final["status"] == "done" and final["revision"] == 2
    assert final["items"][0]["commit"] == status["items"][0]["commit"]  # adopted, not rerun
    assert final["items"][1]["state"] == "committed"


def test_approve_redo_moves_the_head_back_and_the_old_commit_is_never_exported(
    tmp_path: Path,
) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    plan = write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")]))
    write_script(tmp_path, "P1", [put("calc.py", FIXED), put("notes.txt", "why\n")])
    _, status = run_plan(plan, source, code=1)
    plan_id, old = status["plan_id"], status["items"][0]["commit"]
    assert status["status"] == "needs_amendment" and old

    redo = plan_cli("approve", plan_id, "--redo", "--json")
    assert redo.returncode == 0, redo.stderr
    row = plan_status(plan_id)
    assert row["head"] == row["base"] and row["items"][0]["commit"] is None
    nothing = plan_cli("export", plan_id, "--branch", "plan/out")
    assert nothing.returncode == 2 and "Traceback" not in nothing.stderr
    assert git(source, "branch", "--list", "plan/out") == ""

    write_script(tmp_path, "P1", [put("calc.py", FIXED)])  # the rerun stays in scope
    final = status_of(plan_cli("resume", plan_id, "--json").stdout)
    new = final["items"][0]["commit"]
    assert final["status"] == "done" and new not in (None, old)
    assert fingerprint(source) == before  # only read until the export
    exported = plan_cli("export", plan_id, "--branch", "plan/out")
    assert exported.returncode == 0, exported.stderr
    history = git(source, "rev-list", "plan/out").split()
    assert history[0] == new and old not in history
    assert "notes.txt" not in git(source, "ls-tree", "-r", "--name-only", "plan/out")
    assert git(source, "status", "--porcelain") == ""


def test_stop_then_resume_and_a_second_run_is_refused_before_writing(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    plan = write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")]))
    write_script(tmp_path, "P1", [shell("sleep 60")])
    out = tmp_path / "record"
    proc = subprocess.Popen(
        run_args(plan, source, "--output-dir", str(out)), cwd=tmp_path, env=os.environ.copy(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        running = wait_for_event(out, "item_running")
        plan_id = str(running["plan"])
        store = dirs.state_dir() / "plans" / "plans.sqlite"
        events = (out / "plan.events.jsonl").read_bytes()
        version = plan_status(plan_id)
        second = plan_cli("resume", plan_id)
        assert second.returncode == 3, second.stderr
        assert f"plan {plan_id} is running in pid {proc.pid}" in second.stderr
        again = plan_cli(*run_args(plan, source), cwd=tmp_path)
        assert again.returncode == 3
        assert (out / "plan.events.jsonl").read_bytes() == events  # nothing written
        assert plan_status(plan_id)["items"] == version["items"]
        assert store.is_file()

        watch = subprocess.Popen(
            [PY, "-m", "code_runner", "plan", "status", plan_id, "--watch", "--json",
             "--interval", "0.2"], stdout=subprocess.PIPE, text=True, env=os.environ.copy(),
        )  # fmt: skip
        stopped = plan_cli("stop", plan_id, "--json", "--wait", "60")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["status"] == "paused"
        assert proc.wait(timeout=60) == 1
        seen, _ = watch.communicate(timeout=60)
        lines = [json.loads(line)["status"] for line in seen.splitlines()]
        # the watch may start after the stop settled: then it shows only the end
        assert set(lines) <= {"running", "paused"} and lines[-1] == "paused"
        assert watch.returncode == 0
    finally:
        proc.kill()
    status = plan_status(plan_id)
    attempt = status["items"][0]["attempts"][0]
    assert (attempt["state"], attempt["reason"]) == ("cancelled", "Cancelled.")
    sleeping = subprocess.run(["pgrep", "-f", "sleep 60"], capture_output=True, text=True)
    assert not sleeping.stdout.strip() or str(proc.pid) not in sleeping.stdout

    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    resumed = plan_cli("resume", plan_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert status_of(resumed.stdout)["status"] == "done"
    assert fingerprint(source) == before

    cancelled = plan_cli("cancel", plan_id, "--json")
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["status"] == "cancelled"
    closed = plan_cli("resume", plan_id)
    assert closed.returncode == 2 and "cancelled" in closed.stderr
    assert "Traceback" not in closed.stderr


def test_sigterm_stops_the_run_cleanly_and_resume_finishes_it(tmp_path: Path) -> None:
    source, plan = calc_plan(tmp_path, 1)
    write_script(tmp_path, "P1", [shell("sleep 60.27")])
    before = fingerprint(source)
    proc = subprocess.Popen(
        run_args(plan, source, "--json"), cwd=tmp_path, env=os.environ.copy(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_process("sleep 60.27")  # the item's agent is running
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    stopped = status_of(out)
    assert stopped["status"] == "paused", stopped["reason"]
    attempt = stopped["items"][0]["attempts"][0]
    assert (attempt["state"], attempt["reason"]) == ("cancelled", "Stopped by shutdown.")
    assert "sleep 60.27" not in procs()  # the agent's processes are gone
    assert not list(dirs.workspaces_dir().iterdir())
    assert "Traceback" not in err and fingerprint(source) == before

    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    resumed = plan_cli("resume", stopped["plan_id"], "--json")
    assert resumed.returncode == 0, resumed.stderr
    final = status_of(resumed.stdout)
    assert final["status"] == "done"
    assert [a["state"] for a in final["items"][0]["attempts"]] == ["cancelled", "completed"]
    assert fingerprint(source) == before

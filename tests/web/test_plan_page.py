"""The plan page over a real plan record: items, state, commits, and each item's diff with
its files marked declared or out of scope."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.helpers.plan_runs import (
    FIXED,
    calc_source,
    plan_cli,
    plan_item,
    put,
    run_args,
    write_plan,
    write_script,
)
from tests.helpers.web import client

pytestmark = pytest.mark.integration


def test_the_plan_page_marks_declared_and_out_of_scope_files(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    items = [plan_item(1, "Fix add", [("calc.py", "edit")]),
             plan_item(2, "Add a note", [("notes.md", "add")])]  # fmt: skip
    plan = write_plan(tmp_path, *items)
    write_script(tmp_path, "P1", [put("calc.py", FIXED), put("extra.txt", "x\n")])
    out = tmp_path / "runs" / "plan1"
    done = plan_cli(*run_args(plan, source, "--output-dir", str(out)), cwd=tmp_path)
    assert "needs_amendment" in done.stdout, done.stdout + done.stderr
    http, _ = client(tmp_path / "runs")
    listing = http.get("/", params={"kind": "plan"}).text
    assert "/plan/0/plan1" in listing and "needs_amendment" in listing
    page = http.get("/plan/0/plan1").text
    assert "Fix add" in page and "committed" in page
    assert "out of scope: extra.txt" in page
    declared = page.index("<code>calc.py</code>")
    assert "declared" in page[declared : declared + 300]
    extra = page.index("<code>extra.txt</code>")
    assert "out of scope" in page[extra : extra + 300]
    assert "/task/0/plan1/items/P1/1/P1" in page  # the item's run, one click away
    later = page[page.index("Add a note</h2>") :]  # P2 waits behind the paused P1
    assert "Not run yet (pending)." in later and "not under the configured roots" not in later
    assert http.get("/plan/0/../plan1").status_code == 404


def test_export_and_cancel_buttons_act_once(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    items = [plan_item(1, "Fix add", [("calc.py", "edit")]),
             plan_item(2, "Add a note", [("notes.md", "add")])]  # fmt: skip
    plan = write_plan(tmp_path, *items)
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    write_script(tmp_path, "P2", [put("notes.md", "# notes\n"), put("extra.txt", "x\n")])
    out = tmp_path / "runs" / "plan1"
    paused = plan_cli(*run_args(plan, source, "--output-dir", str(out)), cwd=tmp_path)
    assert "needs_amendment" in paused.stdout, paused.stdout + paused.stderr
    http, guard = client(tmp_path / "runs")
    csrf = {"X-CSRF-Token": guard.csrf}

    def post(action: str, **form: str) -> str:
        return http.post(f"/act/plan/{action}/0/plan1", headers=csrf, data=form).text

    bad = post("export", branch="../outside")
    assert "not a branch name" in bad and "exit 2" in bad
    assert "not an item id" in post("export", branch="web/export", through="--apply")
    refused = post("export", branch="web/export")  # P2 waits at its checkpoint
    assert "exit 2" in refused and "--through P1" in refused
    export_id = str(uuid.uuid4())
    first = post("export", branch="web/export", through="P1", action_id=export_id)
    assert "exit 0" in first and "--through=P1" in first, first
    again = post("export", branch="web/export", through="P1", action_id=export_id)
    assert "replayed" in again and "exit 0" in again, again  # a retried POST: one export
    status = json.loads((out / "plan.status.json").read_text())
    landed = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "web/export"], capture_output=True, text=True
    )
    assert landed.stdout.strip() == status["items"][0]["commit"]
    action_id = str(uuid.uuid4())
    cancelled = post("cancel", action_id=action_id)
    assert "exit 0" in cancelled and "cancelled" in cancelled, cancelled
    replayed = post("cancel", action_id=action_id)  # a double click: one action
    assert "replayed" in replayed and "exit 0" in replayed, replayed
    assert json.loads((out / "plan.status.json").read_text())["status"] == "cancelled"

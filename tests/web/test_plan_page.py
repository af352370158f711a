"""The plan page over a real plan record: items, state, commits, and each item's diff with
its files marked declared or out of scope."""

from __future__ import annotations

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

"""`plan export` in every form on one real plan run: a patch series, a branch (objects copied
without a fetch), the apply transaction item by item with commits or as one combined diff,
`--through`, rollback, refusals, and each export's row in the store."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

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
    status_of,
    write_plan,
    write_script,
)
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.integration

SUB = "def sub(a, b):\n    return a - b\n"
MUL = "def mul(a, b):\n    return a * b\n"


def _three_items(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    source = calc_source(tmp_path)
    plan = write_plan(
        tmp_path,
        plan_item(1, "Fix add", [("calc.py", "edit")]),
        plan_item(2, "Add sub", [("sub.py", "add")]),
        plan_item(3, "Add mul", [("mul.py", "add")]),
    )
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    write_script(tmp_path, "P2", [put("sub.py", SUB)])
    write_script(tmp_path, "P3", [put("mul.py", MUL)])
    done = plan_cli(*run_args(plan, source, "--json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return source, status_of(done.stdout)


def _exports(plan_id: str) -> list[tuple[str, str, str | None]]:
    db = sqlite3.connect(dirs.state_dir() / "plans" / "plans.sqlite")
    try:
        rows = db.execute(
            "SELECT kind, state, through_item FROM exports WHERE plan_id = ? ORDER BY id",
            (plan_id,),
        )
        return [tuple(row) for row in rows]
    finally:
        db.close()


def _export(plan_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    return plan_cli("export", plan_id, *args)


def test_every_export_form_on_one_plan(tmp_path: Path) -> None:
    source, status = _three_items(tmp_path)
    plan_id, base = status["plan_id"], status["base"]
    p1, p2, p3 = (item["commit"] for item in status["items"])
    before = fingerprint(source)
    pristine = tmp_path / "pristine"
    shutil.copytree(source, pristine)

    # a patch series, through P2: the source is not touched
    series = tmp_path / "series"
    done = _export(plan_id, "--patches", str(series), "--through", "P2", "--json")
    assert done.returncode == 0, done.stderr
    names = (series / "series").read_text().split()
    assert len(names) == 2 and names[0].startswith("0001-P1-")
    first = (series / names[0]).read_text()
    assert first.startswith(f"From {p1} ") and "Plan-Item: P1" in first
    assert "Code-Runner-DoD: passed" in first
    assert "+++ b/sub.py" in (series / "combined.diff").read_text()
    assert "mul.py" not in (series / "combined.diff").read_text()
    assert fingerprint(source) == before
    refused = _export(plan_id, "--patches", str(series))
    assert refused.returncode == 2 and "not an empty directory" in refused.stderr

    # a branch through P1, then moved on to P3 (it holds only the plan's commits)
    assert _export(plan_id, "--branch", "plan/out", "--through", "P1").returncode == 0
    assert git(source, "rev-parse", "plan/out").strip() == p1
    done = _export(plan_id, "--branch", "plan/out", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["old"] == p1
    assert git(source, "rev-list", "plan/out").split() == [p3, p2, p1, base]
    assert git(source, "rev-parse", "HEAD").strip() == base
    assert git(source, "status", "--porcelain") == ""

    # applied and committed item by item, each commit with the plan's trailers
    done = _export(plan_id, "--apply", "--commit", "--through", "P2", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    steps = json.loads(done.stdout)["steps"]
    assert [(s["step"], s["ok"]) for s in steps] == [("P1", True), ("P2", True)]
    log = git(source, "log", "--format=%H%x00%B%x01", "-2").split("\x01")
    assert [entry.strip().split("\x00")[0] for entry in log[:2]] == [
        s["commit"] for s in steps[::-1]
    ]
    assert "Plan-Item: P2" in log[0] and f"Code-Runner-Plan: {plan_id}" in log[0]
    assert (source / "sub.py").read_text() == SUB and not (source / "mul.py").exists()
    assert git(source, "status", "--porcelain") == ""

    # the same again no longer applies: refused, nothing changed, recorded as failed
    head = git(source, "rev-parse", "HEAD")
    again = _export(plan_id, "--apply", "--commit", "--through", "P1", "--json")
    assert again.returncode == 1
    assert not json.loads(again.stdout)["steps"][0]["ok"]
    assert git(source, "rev-parse", "HEAD") == head
    assert "Traceback" not in again.stderr

    # a foreign commit on the branch: refused and untouched
    git(source, "branch", "-f", "theirs", "HEAD")
    refused = _export(plan_id, "--branch", "theirs")
    assert refused.returncode == 2 and "did not make" in refused.stderr

    assert _exports(plan_id) == [
        ("patches", "done", "P2"),
        ("branch", "done", "P1"),
        ("branch", "done", None),
        ("apply", "done", "P2"),
        ("apply", "failed", "P1"),
        ("branch", "failed", None),
    ]
    record = Path(status["items"][0]["attempts"][0]["record_dir"]).parents[2]
    assert sorted(p.name for p in (record / "exports").glob("*.json"))[:2] == ["1.json", "2.json"]

    for args, needle in (
        ((), "choose one export"),
        (("--branch", "x", "--apply"), "choose one export"),
        (("--patches", str(tmp_path / "p"), "--commit"), "--commit goes with --apply"),
        (("--branch", "x", "--through", "P9"), "has no item P9"),
        (("--branch", "x", "--through", "first"), "is not an item id"),
        (("--branch", "main"), "checked out"),
    ):
        done = _export(plan_id, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert needle in done.stderr and "Traceback" not in done.stderr

    # without --commit: the combined diff, one transaction; a failing DoD rolls it back
    shutil.rmtree(source)
    pristine.rename(source)
    (source / "test_calc.py").write_text((source / "test_calc.py").read_text().replace("5", "6"))
    git(source, "commit", "-qam", "stricter")
    before = fingerprint(source)
    failed = _export(plan_id, "--apply", "--json")
    assert failed.returncode == 1
    step = json.loads(failed.stdout)["steps"][0]
    assert step["step"] == "P1-P3" and step["rolled_back"] and "DoD failed" in step["error"]
    assert fingerprint(source) == before
    git(source, "reset", "-q", "--hard", "HEAD~1")
    head = git(source, "rev-parse", "HEAD")
    done = _export(plan_id, "--apply")
    assert done.returncode == 0, done.stderr
    assert git(source, "rev-parse", "HEAD") == head
    assert (source / "mul.py").read_text() == MUL and (source / "calc.py").read_text() == FIXED
    assert _exports(plan_id)[-2:] == [("apply", "failed", None), ("apply", "done", None)]

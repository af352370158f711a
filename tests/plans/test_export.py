"""`plan export` in every form on one real plan run: a patch series, a branch (objects copied
without a fetch), the apply transaction item by item with commits or as one combined diff,
`--through`, rollback, refusals, and each export's row in the store."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.git import git
from tests.helpers.plan_runs import (
    FIXED,
    MUL,
    SUB,
    calc_plan,
    exports_of,
    plan_cli,
    run_plan,
)
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.integration


def _export(plan_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    return plan_cli("export", plan_id, *args)


def test_every_export_form_on_one_plan(tmp_path: Path) -> None:
    source, plan = calc_plan(tmp_path, 3)
    _, status = run_plan(plan, source)
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
    # an export is a user action: its id replays it; another export under it is refused
    named = ("--action-id", "0f6c8a52-7d4e-4b1a-8c3d-2e5f6a7b8c9d")
    once = _export(plan_id, "--branch", "plan/two", "--through", "P2", *named, "--json")
    git(source, "branch", "-D", "plan/two")
    twice = _export(plan_id, "--branch", "plan/two", "--through", "P2", *named, "--json")
    assert json.loads(twice.stdout) == {**json.loads(once.stdout), "replayed": True}
    assert not git(source, "branch", "--list", "plan/two").strip()  # replayed: nothing done
    other = _export(plan_id, "--branch", "plan/three", *named)
    assert other.returncode == 2 and "already used" in other.stderr

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

    assert exports_of(plan_id) == [
        ("patches", "done", "P2"),
        ("branch", "done", "P1"),
        ("branch", "done", None),
        ("branch", "done", "P2"),
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
        (("--branch", "-D"), "is not a branch name"),  # git itself refuses both names
        (("--branch", "HEAD"), "is not a branch name"),
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
    assert exports_of(plan_id)[-2:] == [("apply", "failed", None), ("apply", "done", None)]

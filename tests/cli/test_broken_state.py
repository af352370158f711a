"""Broken state met through the real CLI: a corrupt plan store, bad tuning variables, a bad
user config. Each is named with what to fix and a non-zero exit, and the command still does
the rest of its work."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from code_runner import dirs
from code_runner.plans.database import store_path
from tests.helpers.tasks import run_cli

pytestmark = pytest.mark.integration


def _crashed_at_start() -> Path:
    """A workspace root with no lease, older than gc's grace: what a runner killed before
    writing its lease leaves."""
    root = dirs.workspaces_dir() / "fix-calc-20260101T000000Z-dead01"
    (root / "files").mkdir(parents=True)
    (root / "files" / "calc.py").write_text("x = 1\n")
    old = time.time() - 3600
    os.utime(root, (old, old))
    return root


def _corrupt_store() -> Path:
    store = store_path()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_bytes(b"this is not an SQLite file\n" * 200)
    return store


@pytest.mark.parametrize("as_json", [False, True])
def test_gc_with_a_corrupt_plan_store_still_cleans_up_and_names_the_store(as_json: bool) -> None:
    """Used to: the store error (exit 5) before anything was cleaned up."""
    leftover = _crashed_at_start()
    store = _corrupt_store()
    before = store.read_bytes()
    ran = run_cli("gc", *(["--json"] if as_json else []))
    assert ran.returncode == 5, ran.stderr
    assert "Traceback" not in ran.stderr + ran.stdout
    assert not leftover.exists()
    assert store.read_bytes() == before  # named, never "repaired" behind the user's back
    if as_json:
        report = json.loads(ran.stdout)
        assert any(r["path"] == str(leftover) for r in report["removed"])
        assert f"the plan store {store} cannot be opened" in report["plans_error"]["message"]
        assert "plans.sqlite.v*.bak" in report["plans_error"]["fix"]
    else:
        assert f"removed {leftover}" in ran.stdout
        assert f"plans were not recovered: the plan store {store} cannot be opened" in (
            ran.stderr
        )
        assert "Fix: restore it from a plans.sqlite.v*.bak copy" in ran.stderr

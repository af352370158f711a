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
        assert f"plans were not recovered: the plan store {store} cannot be opened" in (ran.stderr)
        assert "Fix: restore it from a plans.sqlite.v*.bak copy" in ran.stderr


def test_doctor_names_a_bad_user_config_and_exits_2_after_printing_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Used to: the problem in red among the rest, and exit 0."""
    user = tmp_path / "config.toml"
    user.write_text('[backends.mine]\nkind = "openai"\nmodle = "gpt-5"\n')
    monkeypatch.setenv("CODE_RUNNER_CONFIG", str(user))
    ran = run_cli("doctor", "--source", str(tmp_path))
    assert ran.returncode == 2, ran.stderr
    said = " ".join(ran.stdout.split())  # the console wraps long lines
    assert f"config problem: {user}: 1 problem:" in said
    assert "unknown field 'backends.mine.modle'; did you mean 'backends.mine.model'?" in said
    assert "Fix: correct the file as said above" in said
    assert "state dir:" in said and "sandbox:" in said  # the rest is still printed
    assert "doctor found problems" in ran.stderr and "Traceback" not in ran.stderr
    shown = run_cli("doctor", "--json", "--source", str(tmp_path))
    assert shown.returncode == 2, shown.stderr
    report = json.loads(shown.stdout)
    assert (report["ok"], report["exit_code"]) == (False, 2)
    assert "backends.mine.modle" in report["model_backends"]["error"]
    assert report["tools"]["git"]["found"]  # the rest of the report is there
    user.write_text('[backends.mine]\nkind = "openai"\nmodel = "gpt-5"\napi_key_env = ""\n')
    fixed = run_cli("doctor", "--json", "--source", str(tmp_path))
    assert json.loads(fixed.stdout)["exit_code"] == 0 and fixed.returncode == 0, fixed.stderr

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
from tests.helpers.tasks import calc_repo, run_cli, write_task

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


@pytest.mark.parametrize(
    ("variable", "value", "form"),
    [
        ("CODE_RUNNER_CHECKOUT_CACHE", "O", "a whole number from 0 to 1000"),
        ("CODE_RUNNER_CHECKOUT_CACHE", "-1", "a whole number from 0 to 1000"),
        ("CODE_RUNNER_CLI_IDLE_TIMEOUT_S", "5m", "a number of seconds from 0.5 to 86400"),
        ("CODE_RUNNER_MIN_INTERVAL_S", "nan", "a number of seconds from 0.01 to 86400"),
        ("CODE_RUNNER_SANDBOX_RESIDENT", "no", "one of on, off"),
        ("CODE_RUNNER_WORKSPACE", "clones", "one of auto, clone"),
        ("CODE_RUNNER_TMUX", "maybe", "one of 1/true/yes/on or 0/false/no/off"),
    ],
)
def test_a_bad_tuning_variable_is_named_with_its_form_and_exit_2(
    variable: str, value: str, form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Used to: the default put in its place without a word (or, for the CLI idle timeout
    and tmux, an error about a backend option `idle_timeout_s=`/`tmux=` the user never set)."""
    monkeypatch.setenv(variable, value)
    task = write_task(tmp_path, calc_repo(tmp_path), [])
    for command in (("run", str(task)), ("gc", "--dry-run")):
        ran = run_cli(*command)
        assert ran.returncode == 2, (ran.returncode, ran.stderr)
        assert f"${variable}={value!r} is not {form}." in ran.stderr
        assert f"Fix: set {variable} to {form}, or unset it for the default." in ran.stderr
        assert "Traceback" not in ran.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was created

"""The plan store and the plan lock when their paths are links (spec 9.3): a store file
with a second hard link, or reached through a symlink, is refused by the real CLI with a
message and a non-zero exit, and nothing is written through it; a state dir reached
through a symlinked directory is the same lock, so a second run through it exits 3."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from code_runner import dirs
from code_runner.plans.database import default_plan_id, store_path
from code_runner.plans.model import Plan
from code_runner.plans.store import PlanStore
from tests.helpers.plan_runs import calc_plan, plan_cli, run_args

pytestmark = pytest.mark.integration


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def made_store() -> Path:
    """A real, migrated, closed store at the state dir's usual place."""
    path = store_path()
    PlanStore.open(path).close()
    for side in ("-wal", "-shm"):
        Path(f"{path}{side}").unlink(missing_ok=True)
    return path


def refused(done: subprocess.CompletedProcess[str], what: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert what in done.stderr, done.stderr


def test_a_hard_linked_store_is_refused_and_left_unwritten(tmp_path: Path) -> None:
    store = made_store()
    other = tmp_path / "elsewhere.sqlite"
    os.link(store, other)
    before = digest(other)
    source, plan = calc_plan(tmp_path)
    for argv in (["list"], run_args(plan, source)):
        done = plan_cli(*argv, cwd=tmp_path)
        refused(done, "has other hard links")
        assert "remove the other links" in done.stderr
    assert digest(other) == before and other.stat().st_nlink == 2
    assert not Path(f"{store}-wal").exists()  # sqlite never opened it


def test_a_symlinked_store_is_refused_and_its_target_unwritten(tmp_path: Path) -> None:
    target = tmp_path / "target.sqlite"
    made_store().rename(target)
    store_path().symlink_to(target)
    before = digest(target)
    source, plan = calc_plan(tmp_path)
    for argv in (["list"], run_args(plan, source)):
        refused(plan_cli(*argv, cwd=tmp_path), "is a symlink")
    assert digest(target) == before
    assert not Path(f"{target}-wal").exists() and not Path(f"{store_path()}-wal").exists()


_HOLD = """
import sys, time
from code_runner.plans.lock import plan_lock
with plan_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_the_plan_lock_through_a_symlinked_state_dir_is_the_same_lock(tmp_path: Path) -> None:
    real = dirs.state_dir()
    link = tmp_path / "state-link"
    link.symlink_to(real, target_is_directory=True)
    source, plan = calc_plan(tmp_path)
    plan_id = default_plan_id(
        plan.stem, Plan.model_validate_json(plan.read_text()).content_sha256()
    )
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, plan_id], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        env = {**os.environ, dirs.STATE_ENV: str(link)}
        done = subprocess.run(run_args(plan, source), capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=120)  # fmt: skip
        assert done.returncode == 3, (done.returncode, done.stderr)
        assert f"plan {plan_id} is running in pid {holder.pid}" in done.stderr
        assert "Traceback" not in done.stderr
        assert not store_path().exists()  # refused before the store was opened
        assert not (real / "plans" / "repos").exists()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()

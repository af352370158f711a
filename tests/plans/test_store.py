"""The plan store on a real SQLite file: exact schema, migrations, the attempt machine,
publishing in one transaction, recovery, and the one-run-per-plan lock."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from code_runner.errors import IllegalTransition, LockHeld, UsageError
from code_runner.plans.database import PlanRefused
from code_runner.plans.lock import plan_lock
from code_runner.plans.migrations import MIGRATIONS, StoreTooNew
from code_runner.plans.model import Plan
from code_runner.plans.outcome import Commit, Outcome
from code_runner.plans.states import (
    AttemptState,
    FirstReason,
    PlanStatus,
    RunEnd,
    check_attempt,
    settle_state,
)
from code_runner.plans.store import PlanStore
from tests.helpers.plan_data import plan_data

pytestmark = pytest.mark.integration
BASE = "a" * 40


def sha(n: int) -> str:
    return f"{n:040x}"


def commit(n: int) -> Commit:
    return Commit(sha=sha(n), tree=sha(n + 1000), ref=f"refs/code-runner/attempts/{n}")


@pytest.fixture
def store(tmp_path: Path) -> PlanStore:
    return PlanStore.open(tmp_path / "plans.sqlite")


def imported(store: PlanStore) -> str:
    row, created = store.import_plan(
        Plan.model_validate(plan_data()), source_dir=Path("/src"),
        source_git_dir=Path("/src/.git"), base=BASE, name="demo",
    )  # fmt: skip
    assert created
    return str(row["plan_id"])


def run_item(store: PlanStore, plan_id: str, outcome: Outcome) -> str:
    item = store.next_item(plan_id)
    assert item is not None
    version = store.plan(plan_id)["state_version"]
    attempt = store.admit(plan_id, item, expected_state_version=version, budget_s=3600)
    store.mark_running(attempt["id"])
    store.settle(attempt["id"], outcome)
    return str(attempt["id"])


EXPECTED_TABLES = {
    "_migrations", "attempts", "checkpoints", "exports", "findings", "ledger", "plans",
    "revisions", "user_actions",
}  # fmt: skip


def test_exact_schema(store: PlanStore) -> None:
    rows = store.db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    assert {r["name"] for r in rows if r["type"] == "table"} == EXPECTED_TABLES
    columns = {
        table: [c["name"] for c in store.db.execute(f"PRAGMA table_info({table})")]
        for table in sorted(EXPECTED_TABLES)
    }
    assert columns["attempts"] == [
        "id", "plan_id", "item", "item_sha256", "revision", "kind", "parent", "state",
        "first_reason", "stop_reason", "context", "deadline", "run_id", "record_dir", "result",
        "diagnostic", "diagnostic_ref", "owner_pid", "owner_started_at", "superseded",
        "created_at", "started_at", "settled_at",
    ]  # fmt: skip
    assert columns["ledger"] == ["plan_id", "sha", "item", "revision", "attempt_id", "parent",
                                 "tree", "ref", "created_at"]  # fmt: skip
    assert columns["plans"][:3] == ["plan_id", "content_sha256", "source_dir"]
    assert {r["name"] for r in rows if r["type"] == "index" and r["sql"]} == {
        "attempts_plan", "plans_content"}  # fmt: skip
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [r[0] for r in store.db.execute("SELECT name FROM _migrations")] == ["m001_initial"]


def test_a_newer_store_is_refused_with_exit_5_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "plans.sqlite"
    PlanStore.open(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(StoreTooNew) as caught:
        PlanStore.open(path)
    assert caught.value.exit_code == 5 and "upgrade code-runner" in caught.value.render()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 99


def test_a_later_migration_runs_once_after_a_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "plans.sqlite"
    PlanStore.open(path).close()

    def m002_note(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE plans ADD COLUMN note TEXT")

    monkeypatch.setattr("code_runner.plans.migrations.MIGRATIONS",
                        [*MIGRATIONS, ("m002_note", m002_note)])  # fmt: skip
    with PlanStore.open(path) as store:
        assert "note" in [c[1] for c in store.db.execute("PRAGMA table_info(plans)")]
    PlanStore.open(path).close()  # nothing left to run
    assert (tmp_path / "plans.sqlite.v1.bak").is_file()


def test_importing_the_same_plan_again_is_the_same_plan(store: PlanStore) -> None:
    plan_id = imported(store)
    again, created = store.import_plan(
        Plan.model_validate({**plan_data(), "revision": 7}), source_dir=Path("/src"),
        source_git_dir=Path("/src/.git"), base=BASE, name="other",
    )  # fmt: skip
    assert not created and again["plan_id"] == plan_id
    assert len(store.plans()) == 1
    assert store.find_plan(plan_id) == store.find_plan(plan_id[:5]) == plan_id
    with pytest.raises(UsageError, match="no plan 'nope' in the store"):
        store.find_plan("nope")


def test_items_publish_in_order_with_ledger_head_and_generation(store: PlanStore) -> None:
    plan_id = imported(store)
    first = run_item(store, plan_id, Outcome(RunEnd.OK, commit=commit(1)))
    plan = store.plan(plan_id)
    assert plan["head"] == sha(1) and plan["context_generation"] == 1
    assert plan["status"] == PlanStatus.RUNNING
    second = run_item(store, plan_id, Outcome(RunEnd.OK, unchanged=True))
    assert store.attempt(second)["parent"] == sha(1)
    run_item(store, plan_id, Outcome(RunEnd.OK, commit=commit(3)))
    assert [r["item"] for r in store.ledger(plan_id)] == ["P1", "P3"]
    assert store.ledger(plan_id)[0]["attempt_id"] == first
    assert store.plan(plan_id)["status"] == PlanStatus.DONE
    assert store.next_item(plan_id) is None


def test_out_of_scope_changes_publish_then_pause_for_amendment(store: PlanStore) -> None:
    plan_id = imported(store)
    run_item(store, plan_id, Outcome(RunEnd.OK, commit=commit(1), out_of_scope=("x.py",)))
    plan = store.plan(plan_id)
    assert plan["status"] == PlanStatus.NEEDS_AMENDMENT and plan["head"] == sha(1)
    [checkpoint] = store.checkpoints(plan_id, open_only=True)
    assert checkpoint["head"] == sha(1) and checkpoint["kind"] == "scope"
    with pytest.raises(PlanRefused, match="the plan is needs_amendment"):
        store.admit(plan_id, "P2", expected_state_version=plan["state_version"], budget_s=60)


def test_a_finding_ends_in_needs_human_with_no_commit(store: PlanStore) -> None:
    plan_id = imported(store)
    attempt = store.admit(plan_id, "P1", expected_state_version=store.plan(plan_id)[
        "state_version"], budget_s=60)  # fmt: skip
    store.mark_running(attempt["id"])
    assert store.record_finding(attempt["id"], "refused_path", ".git/config changed")
    assert not store.record_finding(attempt["id"], "other", "second one is not kept")
    settled = store.settle(attempt["id"], Outcome(RunEnd.FAILED, diagnostic="safety_violation"))
    assert settled.state is AttemptState.FAILED and settled.plan_status is PlanStatus.NEEDS_HUMAN
    assert store.ledger(plan_id) == [] and store.plan(plan_id)["head"] == BASE
    assert store.findings(plan_id, owed_only=True) == []


def test_the_first_stop_reason_wins_over_a_valid_result(store: PlanStore) -> None:
    plan_id = imported(store)
    attempt = store.admit(plan_id, "P1", expected_state_version=store.plan(plan_id)[
        "state_version"], budget_s=60)  # fmt: skip
    store.mark_running(attempt["id"])
    assert store.record_first_reason(attempt["id"], FirstReason.CANCELLED) is FirstReason.CANCELLED
    assert store.record_first_reason(attempt["id"], FirstReason.SHUTDOWN) is FirstReason.CANCELLED
    settled = store.settle(attempt["id"], Outcome(RunEnd.OK, commit=commit(1)))
    assert settled.state is AttemptState.CANCELLED
    assert store.ledger(plan_id) == [] and store.plan(plan_id)["status"] == PlanStatus.PAUSED


def test_an_attempt_whose_plan_was_amended_ends_stale(store: PlanStore) -> None:
    plan_id = imported(store)
    attempt = store.admit(plan_id, "P1", expected_state_version=store.plan(plan_id)[
        "state_version"], budget_s=60)  # fmt: skip
    store.mark_running(attempt["id"])
    amended = plan_data()
    amended["summary"] = "Amended."
    store.amend(plan_id, Plan.model_validate(amended), expected_revision=1)
    settled = store.settle(attempt["id"], Outcome(RunEnd.OK, commit=commit(1)))
    assert settled.state is AttemptState.STALE and store.ledger(plan_id) == []
    assert store.next_item(plan_id) == "P1"  # a new attempt, never this one again


def test_a_commit_equal_to_its_parent_is_refused(store: PlanStore) -> None:
    plan_id = imported(store)
    run_item(store, plan_id, Outcome(RunEnd.OK, commit=Commit(BASE, sha(9), "refs/x")))
    [attempt] = store.attempts(plan_id)
    assert attempt["state"] == AttemptState.FAILED and "refused" in attempt["diagnostic"]


def test_the_settlement_mapping_and_transition_table() -> None:
    assert settle_state(FirstReason.SHUTDOWN, RunEnd.TIMEOUT, context_current=True).state is (
        AttemptState.FAILED)  # fmt: skip
    assert settle_state(FirstReason.SHUTDOWN, RunEnd.OK, context_current=True).state is (
        AttemptState.CANCELLED)  # fmt: skip
    assert settle_state(None, RunEnd.TIMEOUT, context_current=False).state is AttemptState.STALE
    assert settle_state(FirstReason.TIME_LIMIT, RunEnd.OK, context_current=True).needs_human
    with pytest.raises(IllegalTransition):
        check_attempt(AttemptState.COMPLETED, AttemptState.FAILED)
    with pytest.raises(IllegalTransition):
        check_attempt(AttemptState.PENDING, AttemptState.COMPLETED)


_KILLED_IN_PUBLISH = """
import os, sys, time
from pathlib import Path
import code_runner.plans.store as store_mod
from code_runner.plans.outcome import Commit, Outcome
from code_runner.plans.states import RunEnd
real = store_mod._insert_ledger
def stuck(*args):
    real(*args)
    Path(sys.argv[2]).write_text("in the transaction")
    time.sleep(60)
store_mod._insert_ledger = stuck
store = store_mod.PlanStore.open(Path(sys.argv[1]))
store.settle(sys.argv[3], Outcome(RunEnd.OK, commit=Commit("1" * 40, "2" * 40, "refs/x")))
"""


def test_kill_9_in_the_middle_of_publishing_leaves_the_store_consistent(
    tmp_path: Path, store: PlanStore
) -> None:
    plan_id = imported(store)
    attempt = store.admit(plan_id, "P1", expected_state_version=store.plan(plan_id)[
        "state_version"], budget_s=60)  # fmt: skip
    store.mark_running(attempt["id"])
    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_KILLED_IN_PUBLISH),
                              str(store.path), str(marker), attempt["id"]])  # fmt: skip
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    child.kill()
    child.wait()
    reopened = PlanStore.open(store.path)
    assert reopened.ledger(plan_id) == []  # the ledger row was not kept without the rest
    assert reopened.plan(plan_id)["head"] == BASE
    assert reopened.attempt(attempt["id"])["state"] == AttemptState.RUNNING
    [settled] = reopened.recover(plan_id)
    assert settled.state is AttemptState.FAILED and settled.plan_status is PlanStatus.PAUSED
    assert "Interrupted" in reopened.attempt(attempt["id"])["diagnostic"]
    assert reopened.next_item(plan_id) == "P1"


def test_a_second_taker_of_the_plan_lock_gets_exit_3(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from code_runner.plans.lock import plan_lock\n"
         "with plan_lock('demo-1'):\n    print('held', flush=True)\n    time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as caught, plan_lock("demo-1"):
            pass
        assert caught.value.exit_code == 3 and f"pid {holder.pid}" in caught.value.message
    finally:
        holder.kill()
        holder.wait()
    with plan_lock("demo-1"):  # released by the OS when its holder died
        pass


def test_no_item_is_admitted_before_the_last_attempt_settled(store: PlanStore) -> None:
    plan_id = imported(store)
    version = store.plan(plan_id)["state_version"]
    first = store.admit(plan_id, "P1", expected_state_version=version, budget_s=3600)
    version = store.plan(plan_id)["state_version"]
    with pytest.raises(PlanRefused, match="still active"):
        store.admit(plan_id, "P1", expected_state_version=version, budget_s=3600)
    store.mark_running(first["id"])
    store.settle(first["id"], Outcome(RunEnd.OK, commit=commit(1)))
    version = store.plan(plan_id)["state_version"]
    assert store.admit(plan_id, "P2", expected_state_version=version, budget_s=3600)

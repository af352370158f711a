"""User actions on the real store file: stop, cancel, amend and approve, each idempotent
(the same command against the same state replays its saved outcome), and owed work."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest

from code_runner.errors import UsageError
from code_runner.plans import actions as acts
from code_runner.plans.model import Plan
from code_runner.plans.outcome import Commit, Outcome
from code_runner.plans.recovery import pay_owed
from code_runner.plans.states import AttemptState, PlanStatus, RunEnd
from code_runner.plans.store import PlanStore
from tests.helpers.plan_data import file, plan_data

BASE = "a" * 40


def sha(n: int) -> str:
    return f"{n:040x}"


def commit(n: int) -> Commit:
    return Commit(sha=sha(n), tree=sha(n + 1000), ref=f"refs/code-runner/attempts/{n}")


@pytest.fixture
def store(tmp_path: Path) -> PlanStore:
    return PlanStore.open(tmp_path / "plans.sqlite")


def imported(store: PlanStore, data: dict[str, Any] | None = None) -> str:
    row, _ = store.import_plan(
        Plan.model_validate(data or plan_data()), source_dir=Path("/src"),
        source_git_dir=Path("/src/.git"), base=BASE, name="demo",
    )  # fmt: skip
    return str(row["plan_id"])


def admitted(store: PlanStore, plan_id: str) -> str:
    item = store.next_item(plan_id)
    assert item is not None
    version = store.plan(plan_id)["state_version"]
    attempt = store.admit(plan_id, item, expected_state_version=version, budget_s=3600)
    store.mark_running(attempt["id"])
    return str(attempt["id"])


def run_item(store: PlanStore, plan_id: str, outcome: Outcome) -> str:
    attempt = admitted(store, plan_id)
    store.settle(attempt, outcome)
    return attempt


def act(store: PlanStore, plan_id: str, kind: str, request: dict[str, Any], apply: acts.Apply,
        action_id: str | None = None) -> acts.ActionResult:  # fmt: skip
    return acts.run_action(store, plan_id, kind, request, apply, action_id=action_id)


def test_stop_twice_replays_the_saved_outcome_and_applies_once(store: PlanStore) -> None:
    plan_id = imported(store)
    attempt = admitted(store, plan_id)
    first = act(store, plan_id, "stop", {}, acts.stop(store))
    version = store.plan(plan_id)["state_version"]
    second = act(store, plan_id, "stop", {}, acts.stop(store))
    assert not first.replayed and second.replayed
    assert second.response == first.response and second.exit_code == 0
    assert store.plan(plan_id)["state_version"] == version  # nothing applied again
    assert store.attempt(attempt)["first_reason"] == "cancelled"
    settled = store.settle(attempt, Outcome(RunEnd.OK, commit=commit(1)))
    assert settled.state is AttemptState.CANCELLED  # the first reason wins over a result
    assert settled.plan_status is PlanStatus.PAUSED
    rows = store.db.execute("SELECT count(*) FROM user_actions").fetchone()[0]
    assert rows == 1


def test_an_action_id_reused_for_another_command_is_refused(store: PlanStore) -> None:
    plan_id = imported(store)
    action_id = str(uuid.uuid4())
    act(store, plan_id, "cancel", {"reason": "a"}, acts.cancel(store, "a"), action_id)
    again = act(store, plan_id, "cancel", {"reason": "a"}, acts.cancel(store, "a"), action_id)
    assert again.replayed and again.exit_code == 0
    with pytest.raises(UsageError, match="already used"):
        act(store, plan_id, "cancel", {"reason": "b"}, acts.cancel(store, "b"), action_id)
    with pytest.raises(UsageError, match="not an action id"):
        act(store, plan_id, "stop", {}, acts.stop(store), "../x")


def test_a_refusal_is_saved_and_replayed_as_a_refusal(store: PlanStore) -> None:
    plan_id = imported(store)
    refused = act(store, plan_id, "approve", {"mode": "redo"}, acts.approve(store, "redo"))
    assert (
        refused.refused and refused.exit_code == 2 and "not waiting" in refused.response["refused"]
    )
    again = act(store, plan_id, "approve", {"mode": "redo"}, acts.approve(store, "redo"))
    assert again.replayed and again.refused and again.exit_code == 2


def test_cancel_while_an_item_runs_closes_the_plan_when_it_settles(store: PlanStore) -> None:
    plan_id = imported(store)
    attempt = admitted(store, plan_id)
    done = act(store, plan_id, "cancel", {"reason": ""}, acts.cancel(store, ""))
    assert done.response["signal"] and store.plan(plan_id)["status"] == "running"
    settled = store.settle(attempt, Outcome(RunEnd.FAILED, diagnostic="agent error"))
    assert settled.state is AttemptState.CANCELLED
    assert store.plan(plan_id)["status"] == "cancelled"
    later = act(store, plan_id, "cancel", {"reason": ""}, acts.cancel(store, ""))
    assert later.refused and "already cancelled" in later.response["refused"]


def _scope_paused(store: PlanStore) -> str:
    plan_id = imported(store)
    run_item(store, plan_id, Outcome(RunEnd.OK, commit=commit(1), out_of_scope=("notes.txt",)))
    assert store.plan(plan_id)["status"] == "needs_amendment"
    return plan_id


def _amended(data: dict[str, Any], **changes: Any) -> Plan:
    data = copy.deepcopy(data)
    for item_id, extra in changes.items():
        item = next(i for i in data["items"] if i["id"] == item_id)
        item.update(extra)
    return Plan.model_validate(data)


def test_approve_continue_adopts_the_paused_commit_under_an_amendment(store: PlanStore) -> None:
    plan_id = _scope_paused(store)
    early = act(store, plan_id, "approve", {"mode": "continue"}, acts.approve(store, "continue"))
    assert early.refused and "amend" in early.response["fix"]

    data = plan_data()
    files = [*data["items"][0]["files"], file("notes.txt", "add")]
    amended = act(
        store,
        plan_id,
        "amend",
        {"n": 1},
        acts.amend(store, _amended(data, P1={"files": files}), None),
    )
    assert amended.response["rerun"] == []  # a scope pause is settled by approve, not amend
    assert store.plan(plan_id)["status"] == "needs_amendment"

    done = act(store, plan_id, "approve", {"mode": "continue"}, acts.approve(store, "continue"))
    assert not done.refused, done.response
    row = store.plan(plan_id)
    assert (row["status"], row["head"]) == ("ready", sha(1))
    assert store.next_item(plan_id) == "P2"  # P1 is adopted, not rerun
    replay = act(store, plan_id, "approve", {"mode": "continue"}, acts.approve(store, "continue"))
    assert replay.replayed and replay.response == done.response


def test_approve_continue_refuses_a_wrong_amendment(store: PlanStore) -> None:
    plan_id = _scope_paused(store)
    data = plan_data()
    wrong = [*data["items"][0]["files"], file("other.txt", "add")]
    act(
        store,
        plan_id,
        "amend",
        {"n": 1},
        acts.amend(store, _amended(data, P1={"files": wrong}), None),
    )
    refused = act(store, plan_id, "approve", {"mode": "continue"}, acts.approve(store, "continue"))
    assert refused.refused
    assert "other.txt were not out of scope" in refused.response["refused"]
    assert "notes.txt are not declared" in refused.response["refused"]
    assert store.plan(plan_id)["status"] == "needs_amendment"


def test_approve_redo_rolls_the_item_back(store: PlanStore) -> None:
    plan_id = _scope_paused(store)
    generation = store.plan(plan_id)["context_generation"]
    done = act(store, plan_id, "approve", {"mode": "redo"}, acts.approve(store, "redo"))
    row = store.plan(plan_id)
    assert done.response["rerun"] == ["P1"]
    assert (row["status"], row["head"]) == ("ready", BASE)
    assert row["context_generation"] == generation + 1
    assert store.next_item(plan_id) == "P1"
    assert [c["resolved_action"] for c in store.checkpoints(plan_id)] == ["redo"]


def test_needs_human_is_left_only_by_redo(store: PlanStore) -> None:
    plan_id = imported(store)
    attempt = admitted(store, plan_id)
    store.record_finding(attempt, "violation", "link.py: a symlink")
    store.settle(attempt, Outcome(RunEnd.FAILED, diagnostic="violation"))
    assert store.plan(plan_id)["status"] == "needs_human"
    refused = act(store, plan_id, "approve", {"mode": "changes"}, acts.approve(store, "changes"))
    assert refused.refused and "only --redo" in refused.response["refused"]
    act(store, plan_id, "approve", {"mode": "redo"}, acts.approve(store, "redo"))
    assert store.plan(plan_id)["status"] == "ready" and store.next_item(plan_id) == "P1"


def test_amend_reruns_a_changed_item_and_every_item_after_it(store: PlanStore) -> None:
    plan_id = imported(store)
    run_item(store, plan_id, Outcome(RunEnd.OK, commit=commit(1)))
    run_item(store, plan_id, Outcome(RunEnd.OK, commit=commit(2)))
    run_item(store, plan_id, Outcome(RunEnd.OK, commit=commit(3)))
    assert store.plan(plan_id)["status"] == "done"
    changed = _amended(plan_data(), P2={"title": "Item 2, better"})
    done = act(store, plan_id, "amend", {"n": 2}, acts.amend(store, changed, 1))
    row = store.plan(plan_id)
    assert done.response["rerun"] == ["P2", "P3"]
    assert (row["status"], row["revision"], row["head"]) == ("ready", 2, sha(1))
    assert store.next_item(plan_id) == "P2"
    stale = act(store, plan_id, "amend", {"n": 3}, acts.amend(store, changed, 1))
    assert stale.refused and "revision 2, not 1" in stale.response["refused"]


def test_a_protected_change_waits_for_approve_changes(store: PlanStore) -> None:
    plan_id = imported(store)
    run_item(store, plan_id, Outcome(RunEnd.OK, commit=commit(1), protected=("conftest.py",)))
    assert store.plan(plan_id)["status"] == "needs_approval"
    wrong = act(store, plan_id, "approve", {"mode": "continue"}, acts.approve(store, "continue"))
    assert wrong.refused and "--changes or --redo" in wrong.response["fix"]
    act(store, plan_id, "approve", {"mode": "changes"}, acts.approve(store, "changes"))
    row = store.plan(plan_id)
    assert (row["status"], row["head"], store.next_item(plan_id)) == ("ready", sha(1), "P2")


def test_an_owed_finding_is_paid_before_anything_runs(store: PlanStore) -> None:
    plan_id = imported(store)
    attempt = admitted(store, plan_id)
    store.record_finding(attempt, "violation", "found by the audit")
    store.db.execute("UPDATE attempts SET state = 'failed' WHERE id = ?", (attempt,))
    store.db.execute("UPDATE plans SET status = 'paused', current_attempt_id = NULL")
    assert pay_owed(store, plan_id) == ["finding of P1"]
    assert store.plan(plan_id)["status"] == "needs_human"
    assert pay_owed(store, plan_id) == []  # paid once

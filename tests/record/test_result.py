"""result.json as a versioned value: validated on read, upgraded from older versions, and a
clear `RecordError` (never a traceback) for a damaged one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from code_runner import files
from code_runner.errors import RecordError
from code_runner.record import Reason, ResultStatus, RunResult, load_result
from code_runner.record.result import (
    SCHEMA_VERSION,
    UPGRADES,
    RunUsage,
    upgrade,
    v1_to_v2,
    v2_to_v3,
)

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
OLD_RECORDS = sorted(RECORDED.glob("*/*.result.json"))


def test_the_version_chain_reaches_the_current_version() -> None:
    assert SCHEMA_VERSION == 3 and {1: v1_to_v2, 2: v2_to_v3} == UPGRADES


@pytest.mark.parametrize("path", OLD_RECORDS, ids=lambda p: p.parent.name)
def test_a_stored_v1_record_is_upgraded_with_every_value_kept(path: Path) -> None:
    stored = json.loads(path.read_text())
    assert stored["schema_version"] == 1 and "kind" not in stored
    result = load_result(path)
    assert result.kind == "task" and result.schema_version == 3
    last_usage = stored["round_details"][-1]["agent_usage"]
    assert result.to_json() == stored | {"kind": "task", "schema_version": 3, "usage": last_usage}
    assert result.usage is not None and result.usage.total_tokens == last_usage["total_tokens"]
    assert result.result_contract is None  # written before the result contract existed
    assert result.evidence().status == stored["status"]


def test_v1_to_v2_adds_the_kind_and_nothing_else() -> None:
    old = {"schema_version": 1, "run_id": "r", "task_id": "t", "status": "abandoned"}
    assert v1_to_v2(old) == old | {"schema_version": 2, "kind": "task"}


def test_a_v1_abandoned_record_from_gc_loads() -> None:
    partial = {
        "schema_version": 1,
        "run_id": "r",
        "task_id": "t",
        "status": "abandoned",
        "reason": "abandoned",
        "dod_passed": False,
        "error": "the run's process died (owner pid 1 is gone); gc removed its workspace",
        "worktree_removed": True,
    }
    result = RunResult.model_validate(upgrade(partial))
    assert result.status is ResultStatus.ABANDONED and result.reason is Reason.ABANDONED
    assert result.to_json() == partial | {"schema_version": 3, "kind": "task"}
    assert result.usage is None  # no round, no usage: nothing is invented


def test_v2_to_v3_lifts_the_last_rounds_usage_to_the_top() -> None:
    usage = {
        "model_calls": 3,
        "prompt_tokens": 300,
        "completion_tokens": 60,
        "total_tokens": 360,
        "usage_reported": True,
        "price_known": True,
        "cost_usd": 0.0042,
    }
    old = {
        "schema_version": 2,
        "round_details": [
            {"round": 0},
            {"round": 1, "agent_usage": {**usage, "model_calls": 1, "cost_usd": 0.001}},
            {"round": 2, "agent_usage": usage},
        ],
    }
    assert v2_to_v3(old) == old | {"schema_version": 3, "usage": usage}
    agent_cli = {"schema_version": 2, "round_details": [{"round": 1, "agent_usage": {"x": 1}}]}
    assert v2_to_v3(agent_cli) == agent_cli | {"schema_version": 3}


def test_usage_in_words_never_shows_an_unknown_cost_as_zero() -> None:
    known = RunUsage(
        model_calls=3,
        prompt_tokens=1000,
        completion_tokens=234,
        total_tokens=1234,
        price_known=True,
        cost_usd=0.0042,
    )
    assert known.describe() == "3 model calls, 1,234 tokens (1,000 in, 234 out), $0.0042"
    unpriced = RunUsage(model_calls=1, total_tokens=5)
    assert "cost unknown (no price configured" in unpriced.describe()
    assert "$" not in unpriced.describe()
    unreported = RunUsage(model_calls=2, usage_reported=False, price_known=True)
    assert "some calls reported no usage" in unreported.describe()
    assert "cost unknown (the provider reported no usage" in unreported.describe()


def _written(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "t.result.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _good() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(OLD_RECORDS[0].read_text())
    return data


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"status": "maybe"}, "status: expected one of"),
        ({"dod_passed": "yes"}, "dod_passed: expected true or false"),
        ({"run_id": None}, "run_id"),
        ({"surprise": 1}, "surprise"),
        ({"round_details": [{"round": "one"}]}, "round_details[0].round: expected a whole number"),
    ],
)
def test_a_hand_edited_result_is_a_record_error_that_says_what(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    with pytest.raises(RecordError) as caught:
        load_result(_written(tmp_path, _good() | change))
    assert said in caught.value.message and "is not a valid run result" in caught.value.message
    assert caught.value.fix and caught.value.exit_code == 5


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"run_id": "r", "task_', "is not JSON (truncated or edited?"),
        ("[1, 2]", "does not hold a JSON object"),
        ({"kind": "experiment", "schema_version": 1}, "is the result of an experiment"),
        ({"schema_version": 99, "run_id": "r"}, "schema_version 99 is not one this"),
    ],
)
def test_a_damaged_or_foreign_result_is_a_record_error(
    tmp_path: Path, content: object, said: str
) -> None:
    with pytest.raises(RecordError) as caught:
        load_result(_written(tmp_path, content))
    assert said in caught.value.message and caught.value.fix


def test_a_missing_result_says_the_run_may_still_be_going(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="does not exist"):
        load_result(tmp_path / "t.result.json")


def test_written_content_round_trips_byte_for_byte(tmp_path: Path) -> None:
    result = load_result(OLD_RECORDS[0])
    path = tmp_path / "t.result.json"
    files.atomic_write_json(path, result.to_json())
    again = load_result(path)
    assert again == result
    assert files.dumps(again.to_json()) == path.read_text()


def test_updated_writes_the_new_fields_and_keeps_the_rest() -> None:
    result = load_result(OLD_RECORDS[0])
    rejected = result.updated(decision="rejected", decision_reason=None)
    assert rejected.decision == "rejected"
    assert rejected.to_json() == result.to_json() | {
        "decision": "rejected",
        "decision_reason": None,
    }
    with pytest.raises(ValueError):
        result.updated(decision="maybe")

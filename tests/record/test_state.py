from __future__ import annotations

import json
from pathlib import Path

import pytest

from code_runner import files
from code_runner.errors import IllegalTransition, LockHeld
from code_runner.events import EventKind
from code_runner.record import (
    TERMINAL_STATES,
    TRANSITIONS,
    Reason,
    ResultStatus,
    RunRecord,
    RunResult,
    RunState,
)


def test_every_state_is_in_the_table_and_terminal_states_are_final() -> None:
    assert set(TRANSITIONS) == set(RunState)
    for state in TERMINAL_STATES:
        assert TRANSITIONS[state] == frozenset()


def test_each_transition_is_one_event_and_a_fresh_status(tmp_path: Path) -> None:
    record = RunRecord.open(tmp_path, "t", "run-1", max_rounds=3)
    record.transition(RunState.PREPARING, step="create")
    record.transition(RunState.BASELINE)
    events = files.read_jsonl(record.paths.events)
    assert [e["to_state"] for e in events] == ["preparing", "baseline"]
    status = json.loads(record.paths.status.read_text())
    assert status["state"] == "baseline" and status["terminal"] is False
    assert status["schema_version"] == 1 and isinstance(status["pid"], int)


def test_illegal_transition_is_refused(tmp_path: Path) -> None:
    record = RunRecord.open(tmp_path, "t", "run-1", max_rounds=3)
    with pytest.raises(IllegalTransition):
        record.transition(RunState.PASSED)
    record.transition(RunState.ERROR)
    with pytest.raises(IllegalTransition):
        record.transition(RunState.PREPARING)


def test_listeners_see_events_and_seq_increases(tmp_path: Path) -> None:
    record = RunRecord.open(tmp_path, "t", "run-1", max_rounds=1)
    seen: list[str] = []
    record.subscribe(lambda kind, event: seen.append(kind.value))
    record.emit(EventKind.ROUND_STARTED)
    record.emit(EventKind.ROUND_FINISHED)
    assert seen == ["round_started", "round_finished"]
    assert [e["seq"] for e in files.read_jsonl(record.paths.events)] == [1, 2]


def test_reopening_clears_an_earlier_run(tmp_path: Path) -> None:
    record = RunRecord.open(tmp_path, "t", "run-1", max_rounds=1)
    record.emit(EventKind.ROUND_STARTED)
    record.write_result(
        RunResult(
            run_id="run-1",
            task_id="t",
            status=ResultStatus.PASSED,
            reason=Reason.DOD_PASSED,
            dod_passed=True,
        )
    )
    with pytest.raises(LockHeld):  # run-1 still writes its record
        RunRecord.open(tmp_path, "t", "run-2", max_rounds=1)
    record.close()
    again = RunRecord.open(tmp_path, "t", "run-2", max_rounds=1)
    assert not again.paths.result.exists()
    assert files.read_jsonl(again.paths.events) == []


def test_torn_jsonl_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    files.append_jsonl(path, {"a": 1})
    with path.open("a") as f:
        f.write('{"b": ')
    assert files.read_jsonl(path) == [{"a": 1}]

"""`RunRecord` is the only writer of a record: a run's result round-trips through the model,
and what happens to a record later (apply, reject, gc) continues its event sequence."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from code_runner import files
from code_runner.record import RecordPaths, RunRecord, RunState, hunk_markdown, load_result
from code_runner.runner.gc import _mark_abandoned
from tests.cli.test_apply_cmd import finished_run, invoke

pytestmark = pytest.mark.integration


def _events(out: Path) -> list[dict[str, Any]]:
    return [e for e in files.read_jsonl(out / "fix-calc.events.jsonl") if isinstance(e, dict)]


def _continuous(events: list[dict[str, Any]]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    elapsed = [e["elapsed_s"] for e in events]
    assert elapsed == sorted(elapsed)
    assert all({"ts", "run_id", "kind", "round"} <= e.keys() for e in events)


def test_a_runs_result_round_trips_through_the_model_byte_for_byte(tmp_path: Path) -> None:
    _, out, written = finished_run(tmp_path)
    path = out / "fix-calc.result.json"
    result = load_result(path)
    assert result.to_json() == written == json.loads(path.read_text())
    assert files.dumps(result.to_json()) == path.read_text()
    assert written["kind"] == "task" and written["schema_version"] == 3
    assert result.result_contract is not None and result.passed


def test_reject_then_apply_continue_the_event_sequence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = finished_run(tmp_path)
    run_events = _events(out)
    last_round = run_events[-1]["round"]
    assert invoke(capsys, "reject", str(out), "--reason", "no").returncode == 0
    events = _events(out)
    _continuous(events)
    assert events[-1]["kind"] == "run_rejected" and events[-1]["round"] == last_round
    assert load_result(out / "fix-calc.result.json").decision == "rejected"


def test_apply_continues_the_event_sequence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = finished_run(tmp_path)
    before = len(_events(out))
    assert invoke(capsys, "apply", str(out)).returncode == 0
    events = _events(out)
    _continuous(events)
    assert len(events) > before and events[-1]["kind"] == "apply_finished"
    result = load_result(out / "fix-calc.result.json")
    assert result.decision == "applied" and result.applied_in_source


def test_gc_finishes_a_dead_runs_record_through_the_writer(tmp_path: Path) -> None:
    record = RunRecord.open(tmp_path, "t", "run-1", max_rounds=2)
    record.transition(RunState.PREPARING)
    record.transition(RunState.BASELINE)
    record.set_round(1)
    marked = _mark_abandoned(tmp_path, "run-1", "owner pid 1 is gone")
    paths = RecordPaths(tmp_path, "t")
    assert marked == str(paths.status)
    events = [e for e in files.read_jsonl(paths.events) if isinstance(e, dict)]
    _continuous(events)
    assert events[-1]["to_state"] == "abandoned" and events[-1]["round"] == 1
    status = json.loads(paths.status.read_text())
    assert status["state"] == "abandoned" and status["terminal"] and status["round"] == 1
    result = load_result(paths.result)
    assert result.status == "abandoned" and "owner pid 1 is gone" in (result.error or "")
    assert _mark_abandoned(tmp_path, "run-1", "again") is None  # already final
    assert _mark_abandoned(tmp_path, "run-2", "not this one") is None


@pytest.mark.parametrize("command", ["result", "apply", "reject"])
@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: text.replace('"status": "passed"', '"status": "great"'),
        lambda text: text.replace('"dod_passed": true', '"dod_passed": "yes"'),
    ],
    ids=["truncated", "unknown-status", "wrong-type"],
)
def test_a_damaged_result_is_refused_with_a_fix_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, damage: Any
) -> None:
    _, out, _ = finished_run(tmp_path)
    path = out / "fix-calc.result.json"
    path.write_text(damage(path.read_text()))
    proc = invoke(capsys, command, str(out))
    assert proc.returncode == 5, proc.stderr
    assert "fix-calc.result.json" in proc.stderr and "Fix:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_status_of_a_damaged_record_exits_with_a_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = RunRecord.open(tmp_path, "t", "run-1", max_rounds=1)
    record.paths.status.write_text('{"state": ')
    proc = invoke(capsys, "status", str(tmp_path))
    assert proc.returncode == 5 and "Fix:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("review", ["", " a | 1 +\n\ndiff --git a/a b/a\n+x\n", "no newline"])
def test_the_patch_and_its_review_page_are_copied_in_pieces(tmp_path: Path, review: str) -> None:
    patch, page = tmp_path / "export.patch", tmp_path / "export.review"
    patch.write_bytes(b"\xff binary-safe \x00" * 100_000)
    page.write_text(review)
    record = RunRecord.open(tmp_path / "out", "fix-calc", "run-1", max_rounds=1)
    digest, size = record.copy_patch(patch, page, title="Fix")
    assert record.paths.patch.read_bytes() == patch.read_bytes()
    assert (digest, size) == (hashlib.sha256(patch.read_bytes()).hexdigest(), 1_500_000)
    assert record.paths.hunk.read_text() == hunk_markdown("fix-calc", "Fix", review)

"""A live run's seal is rewritten by the record's own thread soon after each event and
status, one write for a burst of them: a reader never finds it torn, it covers every event
once the record is flushed or closed, a write the disk refused is raised by the run's next
record call, and a finished record that is reopened (apply, reject) is sealed before each
write returns."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from code_runner.errors import RecordError
from code_runner.events import EventKind
from code_runner.record import RecordPaths, RunRecord, RunState, seal

pytestmark = pytest.mark.integration

LIVE = ("events.jsonl", "status.json")


def _live(out: Path) -> RunRecord:
    record = RunRecord.open(out, "t", "run-1", max_rounds=1)
    record.transition(RunState.PREPARING, step="prepare")
    return record


def test_a_reader_never_finds_a_live_seal_torn_and_the_closed_one_covers_every_event(
    tmp_path: Path,
) -> None:
    record = _live(tmp_path)
    record._seal.flush()  # the seal the run opened with is on disk
    seen: list[dict[str, str] | None] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(seal.load(record.paths))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(150):
            record.emit(EventKind.TOOL_CALL, name="run_command", args={"command": f"true {n}"})
            if n % 50 == 0:
                record.set_round(n // 50)
    finally:
        done.set()
        reader.join()
    record.close()
    # every read found a whole seal the runner wrote
    assert seen and None not in seen, f"{seen.count(None)} of {len(seen)} reads had no seal"
    seal.verify(record.paths, LIVE)
    lines = record.paths.events.read_text().splitlines()
    assert len(lines) == 151 and json.loads(lines[-1])["args"]["command"] == "true 149"
    assert not [t for t in threading.enumerate() if t.name.startswith("seal")]


def test_a_burst_of_events_is_sealed_by_one_write_soon_after_it(tmp_path: Path) -> None:
    """A turn's events do not rewrite the seal one by one: the seal on disk is the same file
    through a burst, and a moment later one write covers every event, with no flush."""
    record = _live(tmp_path)
    record._seal.flush()

    def identity() -> tuple[int, int]:
        st = os.stat(record.paths.seal)
        return st.st_ino, st.st_mtime_ns

    before = identity()
    seen = []
    started = time.monotonic()
    for n in range(10):
        record.emit(EventKind.TOOL_CALL, name="run_command", args={"command": f"true {n}"})
        time.sleep(0.002)  # the writer's thread would have written the seal by now
        seen.append(identity())
    burst_s = time.monotonic() - started
    if burst_s < seal.LIVE_SEAL_DELAY_S:  # a machine too loaded to make a burst proves nothing
        assert set(seen) == {before}, "the seal was rewritten during the burst"
    time.sleep(seal.LIVE_SEAL_DELAY_S * 6)
    assert identity() != before
    seal.verify(record.paths, LIVE)  # every event of the burst, without a flush
    record.close()


def test_an_event_edited_while_the_run_goes_on_is_refused(tmp_path: Path) -> None:
    record = _live(tmp_path)
    record.emit(EventKind.TOOL_CALL, name="run_command", args={"command": "true"})
    record._seal.flush()
    seal.verify(record.paths, LIVE)
    text = record.paths.events.read_text()
    record.paths.events.write_text(text.replace('"true"', '"rm -rf /"'))
    with pytest.raises(RecordError, match=r"events\.jsonl was changed after the run"):
        seal.verify(record.paths, LIVE)
    record.close()


def test_a_seal_the_disk_refused_is_raised_by_the_next_call_and_gc_reseals_the_record(
    tmp_path: Path,
) -> None:
    record = _live(tmp_path)
    record._seal.flush()
    sealed = record.paths.seal.read_bytes()
    record.paths.seal.unlink()
    record.paths.seal.mkdir()  # the rename onto it fails, as a full disk would fail it
    record.emit(EventKind.TOOL_CALL, name="run_command", args={"command": "true"})
    with pytest.raises(IsADirectoryError):
        record._seal.flush()
        record.emit(EventKind.TOOL_CALL, name="run_command", args={"command": "true 2"})
    record.paths.seal.rmdir()
    record.paths.seal.write_bytes(sealed)
    record.close()  # a record left as a killed run leaves it: not terminal, seal behind
    with pytest.raises(RecordError, match=r"events\.jsonl was changed"):
        seal.verify(record.paths, LIVE)
    reopened = RunRecord.reopen(RecordPaths(tmp_path, "t"))
    assert reopened.mark_abandoned("the test left it")
    seal.verify(reopened.paths, LIVE)
    assert json.loads(reopened.paths.status.read_text())["state"] == "abandoned"


def test_a_reopened_finished_record_is_sealed_before_each_write_returns(tmp_path: Path) -> None:
    record = _live(tmp_path)
    record.transition(RunState.ERROR, step="stop")
    record.close()
    reopened = RunRecord.reopen(RecordPaths(tmp_path, "t"))
    for n in range(20):
        reopened.emit(EventKind.STATE_CHANGED, step=f"later {n}")
        seal.verify(reopened.paths, LIVE)  # no flush, no close: already on disk
    assert not [t for t in threading.enumerate() if t.name.startswith("seal")]
    reopened.close()

"""The per-source lock of batch items: shared for items that only read their source, alone for
an item that applies to it, and a cancel reaches an item still waiting for it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from code_runner.batch.results import WorkerLost
from code_runner.batch.work import Cancel, new_try_dir, source_lock


def test_readers_share_a_source_and_a_writer_holds_it_alone(tmp_path: Path) -> None:
    source = str(tmp_path / "repo")
    events: list[str] = []
    with source_lock(source, exclusive=False, cancel=Cancel()):
        with source_lock(source, exclusive=False, cancel=Cancel()):
            events.append("two readers at once")

        def writer() -> None:
            with source_lock(source, exclusive=True, cancel=Cancel()):
                events.append("writer")

        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(0.5)
        events.append("reader done")
    thread.join(10)
    assert events == ["two readers at once", "reader done", "writer"]


def test_a_cancel_reaches_an_item_waiting_for_its_source(tmp_path: Path) -> None:
    source = str(tmp_path / "repo")
    cancel = Cancel()
    with source_lock(source, exclusive=True, cancel=Cancel()):
        threading.Timer(0.3, cancel.request, args=(1.0,)).start()
        with pytest.raises(WorkerLost), source_lock(source, exclusive=False, cancel=cancel):
            pass


def test_each_try_gets_a_fresh_directory(tmp_path: Path) -> None:
    assert new_try_dir(tmp_path, "a").name == "try-1"
    assert new_try_dir(tmp_path, "a").name == "try-2"

"""One contract, two engines: the same batches run on local slots and on Ray, with real tasks
(the scripted backend), real child processes and a real local Ray cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from code_runner.batch import BatchRequest, load_items, run_batch
from tests.helpers.batch import (
    parent_of,
    processes_with,
    results,
    sweep_file,
    task_specs,
    wait_for,
    wait_for_pid,
    wait_until_gone,
)
from tests.helpers.tasks import calc_repo, fingerprint

pytestmark = pytest.mark.integration


def request(
    items: Path, run_dir: Path, engine: str, address: str | None, **extra: object
) -> BatchRequest:
    return BatchRequest(
        batch=load_items(items),
        run_dir=run_dir,
        engine=engine,
        slots=2,
        address=address,
        **extra,  # type: ignore[arg-type]
    )


def test_fifty_items_on_one_source_each_recorded_exactly_once(
    work: Path, engine: str, address: str | None
) -> None:
    source = calc_repo(work)
    before = fingerprint(source)
    ids = task_specs(work / "specs", source, 50)
    outcome = run_batch(request(work / "specs", work / "run", engine, address))
    lines = results(work / "run")
    assert sorted(line["item_id"] for line in lines) == ids
    assert {line["status"] for line in lines} == {"passed"}
    assert not outcome.stopped
    assert all(Path(line["patch_path"]).read_bytes().startswith(b"diff --git") for line in lines)
    assert fingerprint(source) == before


def test_a_killed_item_process_or_worker_is_retried_and_recorded_once(
    work: Path, engine: str, address: str | None
) -> None:
    """Kill the item's own process (both engines) and, on Ray, the Ray worker that runs the
    item function: each is a machine failure, retried within max_retries, recorded once."""
    source = calc_repo(work)
    marker = f"{3 + (os.getpid() % 1000) / 1000:.3f}"
    task_specs(work / "specs", source, 1, prefix="kill", before=[f"sleep {marker}"])
    box: dict[str, object] = {}
    thread = threading.Thread(
        target=lambda: box.update(
            outcome=run_batch(request(work / "specs", work / "run", engine, address, max_retries=2))
        )
    )
    thread.start()
    victims = ["item", "worker"] if engine == "ray" else ["item", "item"]
    for number, victim in enumerate(victims, start=1):
        pid = wait_for_pid(work / "run/items/kill00" / f"try-{number}" / "item.pid")
        wait_for(marker)  # mid-item: the agent's command runs
        os.kill(pid if victim == "item" else parent_of(pid), signal.SIGKILL)
    thread.join(120)
    lines = results(work / "run")
    assert [(line["item_id"], line["status"]) for line in lines] == [("kill00", "passed")], lines
    assert lines[0]["attempt_dir"].endswith("try-3")
    assert lines[0]["tries"] == 3
    assert wait_until_gone(marker) == []


def test_a_timed_out_item_leaves_no_process(work: Path, engine: str, address: str | None) -> None:
    source = calc_repo(work)
    marker = f"{30 + (os.getpid() % 1000) / 1000:.3f}"
    task_specs(
        work / "specs",
        source,
        1,
        prefix="slow",
        before=[f"setsid sleep {marker}1 & sleep {marker}"],
    )
    outcome = run_batch(
        request(work / "specs", work / "run", engine, address, task_timeout_s=2.0, grace_s=1.0)
    )
    lines = results(work / "run")
    assert [(line["item_id"], line["status"]) for line in lines] == [("slow00", "timeout")]
    assert not outcome.stopped
    assert wait_until_gone(marker) == []
    assert wait_until_gone(f"{work}/run/items/slow00") == []


def cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "code_runner", "batch", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_resume_after_the_driver_is_sigkilled(work: Path, engine: str, address: str | None) -> None:
    source = calc_repo(work)
    ids = task_specs(work / "specs", source, 4, prefix="r", before=["sleep 0.5"])
    where = ["--engine", engine, *(["--address", address] if address else [])]
    args = [str(work / "specs"), "--slots", "2", "--run-dir", str(work / "run"), *where]
    driver = cli(*args)
    deadline = time.monotonic() + 120
    while not results(work / "run") and time.monotonic() < deadline:
        time.sleep(0.05)
    driver.kill()
    driver.communicate()
    first = {line["item_id"] for line in results(work / "run")}
    assert first and first < set(ids)
    assert wait_until_gone(str(work / "run")) == []  # the items died with their driver
    done = subprocess.run(
        [sys.executable, "-m", "code_runner", "batch", *args, "--resume"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = results(work / "run")
    assert done.returncode == 0, (done.stderr, lines)
    assert sorted(line["item_id"] for line in lines) == ids  # each exactly once
    assert {line["status"] for line in lines} == {"passed"}
    for item_id in first:  # finished before the kill: not run again
        assert sorted(p.name for p in (work / "run/items" / item_id).iterdir()) == ["try-1"]


def test_a_sweep_of_exec_runs(work: Path, engine: str, address: str | None) -> None:
    sweep = sweep_file(work, [0.5, 0.25], [1, 2])  # four cells, each one `exec` run
    where = ["--engine", engine, *(["--address", address] if address else [])]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "code_runner",
            "batch",
            str(sweep),
            "--run-dir",
            str(work / "run"),
            *where,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = results(work / "run")
    assert len(lines) == 4
    assert {line["status"] for line in lines} == {"passed"}
    assert sorted(tuple(sorted(line["summary"]["cell"].items())) for line in lines) == sorted(
        (("lr", lr), ("seed", seed)) for lr in (0.5, 0.25) for seed in (1, 2)
    )
    assert "success" in done.stdout  # the `exec compare` table
    assert processes_with(str(work / "run")) == []

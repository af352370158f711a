"""Fault injection: the runner SIGKILLed at each of its state transitions, and a record
whose disk fills up. After each, `code-runner gc` leaves no workspace and no process, the
source is byte-identical, and the record is readable and terminal (abandoned or finished).

The kill points come from the record itself: the test polls `events.jsonl` and kills the
runner process (only it: what it started is orphaned, as after a real crash) as soon as a
given event appears.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from code_runner.record import TERMINAL_STATES
from tests.helpers.git import git
from tests.soak.harness import (
    FIXED_BOTH,
    Tally,
    cli,
    fingerprint,
    gc_and_check,
    kill_at,
    same_bytes,
    saw_traceback,
    scripted_spec,
    source_repo,
    write,
)

pytestmark = pytest.mark.integration

Event = dict[str, Any]


def kind(name: str) -> Callable[[Event], bool]:
    return lambda e: e.get("kind") == name


def state(name: str) -> Callable[[Event], bool]:
    return lambda e: e.get("kind") == "state_changed" and e.get("to_state") == name


# every state transition of a run, and the events between them
RUN_POINTS: dict[str, Callable[[Event], bool]] = {
    "run_started": kind("run_started"),
    "-> preparing": state("preparing"),
    "workspace_created": kind("workspace_created"),
    "-> baseline": state("baseline"),
    "baseline dod_started": kind("dod_started"),
    "round_started": kind("round_started"),
    "-> agent": state("agent"),
    "tool_result": kind("tool_result"),
    "-> auditing": state("auditing"),
    "-> verifying": state("verifying"),
    "best_kept": kind("best_kept"),
    "-> exporting": state("exporting"),
    "patch_exported": kind("patch_exported"),
    "-> releasing": state("releasing"),
    "workspace_released": kind("workspace_released"),
    "source_checked": kind("source_checked"),
    "result_contract": kind("result_contract"),
    "-> passed": state("passed"),
}
APPLY_POINTS: dict[str, Callable[[Event], bool]] = {
    "-> applying": state("applying"),
    "apply -> releasing": lambda e: (
        e.get("kind") == "state_changed" and e.get("from_state") == "applying"
    ),
}


def record_is_final(tally: Tally, out: Path, task_id: str, what: str) -> str:
    """The record reads back and is terminal; its state (or "none": nothing was written)."""
    status_path = out / f"{task_id}.status.json"
    if not status_path.exists():
        tally.check(not (out / f"{task_id}.result.json").exists(), f"{what}: result, no status")
        return "none"
    try:
        status = json.loads(status_path.read_text())
        result = json.loads((out / f"{task_id}.result.json").read_text())
    except (OSError, ValueError) as exc:
        tally.check(False, f"{what}: the record does not read back: {exc!r}")
        return "unreadable"
    tally.check(status["state"] in TERMINAL_STATES, f"{what}: record left in {status['state']}")
    tally.check(bool(result.get("status")), f"{what}: result without a status")
    for line in (out / f"{task_id}.events.jsonl").read_text().splitlines()[:-1]:
        json.loads(line)  # every line but a torn last one is whole
    return str(status["state"])


def kill_once(root: Path, point: str, stop: Callable[[Event], bool], *, apply: bool) -> Tally:
    tally = Tally(runs=1)
    source = source_repo(root / "source")
    before = fingerprint(source)
    head = git(source, "rev-parse", "HEAD").strip()
    extra: dict[str, Any] = {"apply_to_source": True, "commit_on_success": True} if apply else {}
    spec = scripted_spec(root, source, "soak-kill", [[write("calc.py", FIXED_BOTH)]], **extra)
    events, code = kill_at(spec, stop)
    run_ids = {str(e["run_id"]) for e in events if e.get("run_id")}
    tally.check(code == -9 or code == 0, f"{point}: the runner ended with {code}, not killed")
    gc_and_check(tally, run_ids or None)
    final = record_is_final(tally, root / "out", "soak-kill", point)
    if apply and git(source, "rev-parse", "HEAD").strip() != head:
        # the commit had landed: gc finishes it; nothing else in the source changed
        files = git(source, "show", "--name-only", "--format=", "HEAD").split()
        tally.check(files == ["calc.py"], f"{point}: the commit holds {files}")
        tally.check(git(source, "status", "--porcelain") == "", f"{point}: source dirty")
    else:
        same_bytes(tally, source, before, point)
    landed = events[-1].get("to_state") or events[-1].get("kind") if events else "nothing"
    print(f"kill at {point}: landed after {landed}, exit {code}, record {final}")
    return tally


@pytest.mark.parametrize("point", list(RUN_POINTS))
def test_sigkill_at_each_state_transition(tmp_path: Path, point: str) -> None:
    kill_once(tmp_path, point, RUN_POINTS[point], apply=False).assert_clean()


@pytest.mark.parametrize("point", list(APPLY_POINTS))
def test_sigkill_while_applying_to_the_source(tmp_path: Path, point: str) -> None:
    kill_once(tmp_path, point, APPLY_POINTS[point], apply=True).assert_clean()


# --- a record on a full disk ---------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """Mounts a tmpfs of a given size (bytes) for a record; unmounts them all after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (run the soak as root, as CI does)")
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        path = tmp_path / f"disk-{size}"
        path.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
            check=True,
        )
        mounted.append(path)
        return path

    try:
        yield mount
    finally:
        for path in mounted:
            subprocess.run(["umount", "--lazy", str(path)], check=False)


# 4 KiB: no room for the record at all; 64 KiB: room for its space reserve only; larger:
# the disk fills at later points of the run (the record needs about 120 KiB on tmpfs)
DISK_SIZES = [4096, 65536, 73728, 81920, 98304, 106496, 114688]


def full_disk_run(tally: Tally, tmp_path: Path, disk: Path, size: int) -> str:
    root = tmp_path / f"run-{size}"
    source = source_repo(root / "source")
    before = fingerprint(source)
    spec = scripted_spec(root, source, "soak-disk", [[write("calc.py", FIXED_BOTH)]])
    data = json.loads(spec.read_text())
    data["output_dir"] = str(disk)
    spec.write_text(json.dumps(data))
    proc = cli("run", str(spec))
    what = f"{size} B disk"
    saw_traceback(tally, what, proc)
    if proc.returncode != 0:
        tally.check(proc.returncode == 3, f"{what}: exit {proc.returncode}, wanted 3 or 0")
        tally.check("no space left on device" in proc.stderr, f"{what}: {proc.stderr[-400:]}")
        tally.check("Fix: free space" in proc.stderr, f"{what}: no fix given")
    gc_and_check(tally)
    final = record_is_final(tally, disk, "soak-disk", what)
    same_bytes(tally, source, before, what)
    tally.check(not (disk / "soak-disk.reserve").exists(), f"{what}: the reserve is left")
    return f"{size}: exit {proc.returncode}, record {final}"


def test_a_record_on_a_full_disk(tmp_path: Path, small_disk: Callable[[int], Path]) -> None:
    tally = Tally(runs=len(DISK_SIZES))
    seen = [full_disk_run(tally, tmp_path, small_disk(size), size) for size in DISK_SIZES]
    print("\n".join(seen))
    tally.assert_clean()

"""`code-runner batch` as a person runs it: bad input, Ctrl-C, a Ray it starts itself."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.batch import processes_with, results, task_specs, wait_until_gone
from tests.helpers.tasks import calc_repo, run_cli

pytestmark = pytest.mark.integration


def test_bad_items_are_a_usage_error_with_every_problem(tmp_path: Path) -> None:
    (tmp_path / "items.jsonl").write_text('{"task_id": "a"}\n{"task_id": "a"}\nnope\n')
    done = run_cli("batch", str(tmp_path / "items.jsonl"), "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2
    assert "'a' is used 2 times" in done.stderr and "line 3: not JSON" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_run_dir_that_is_a_fifo_is_a_usage_error(tmp_path: Path) -> None:
    """Used to: a traceback (exit 70) from its mkdir."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("command: echo {x}\ngrid: {x: [1]}\n")
    os.mkfifo(tmp_path / "run")
    done = run_cli("batch", str(sweep), "--run-dir", str(tmp_path / "run"), timeout=30)
    assert done.returncode == 2, done.stderr
    assert "cannot be used: it is not a directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_apply_to_source_on_ray_is_refused_before_anything_starts(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = {"task_id": "fix", "cwd": str(source), "apply_to_source": True}
    (tmp_path / "items.jsonl").write_text(json.dumps(spec) + "\n")
    args = ["batch", str(tmp_path / "items.jsonl"), "--run-dir", str(tmp_path / "run")]
    done = run_cli(*args, "--engine", "ray")
    assert done.returncode == 2, done.stderr
    assert "apply_to_source is set in 1 item(s) (fix)" in done.stderr
    assert "--engine local" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_second_batch_in_one_run_dir_needs_resume(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    task_specs(tmp_path / "specs", source, 1)
    args = ["batch", str(tmp_path / "specs"), "--run-dir", str(tmp_path / "run")]
    assert run_cli(*args).returncode == 0
    again = run_cli(*args)
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = run_cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert len(results(tmp_path / "run")) == 1


def test_ctrl_c_stops_the_running_items_cleanly_and_resume_finishes_them(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    # its own marker (other runs of this test may be live), and a sleep no slow machine outlasts
    marker = f"600.{os.getpid() % 10000:04d}1"
    task_specs(tmp_path / "specs", source, 3, before=[f"sleep {marker}"])
    args = ["batch", str(tmp_path / "specs"), "--run-dir", str(tmp_path / "run"), "--grace", "2s"]
    driver = subprocess.Popen(
        [sys.executable, "-m", "code_runner", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while len(processes_with(f"sleep {marker}")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    sleeping = processes_with(f"sleep {marker}")
    started = time.monotonic()
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=60)
    assert len(sleeping) == 2, f"both slots' items should be in their sleep: {sleeping}, {err!r}"
    assert driver.returncode == 130, err
    assert time.monotonic() - started < 20
    assert "no new items" in err.decode()
    lines = results(tmp_path / "run")
    statuses = sorted(line["status"] for line in lines)
    assert statuses == ["cancelled", "cancelled"], (lines, err)  # t02 never ran
    assert wait_until_gone(marker) == []
    for script in (tmp_path / "specs").glob("t*.script.json"):  # the resumed agents do not wait
        script.write_text(script.read_text().replace(f"sleep {marker}", "true"))
    resumed = run_cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    final = {line["item_id"]: line["status"] for line in results(tmp_path / "run")}
    assert final == {"t00": "passed", "t01": "passed", "t02": "passed"}


def test_ray_without_an_address_starts_a_local_ray_and_leaves_no_process(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    task_specs(tmp_path / "specs", source, 2)
    before = set(processes_with("/tmp/crray-"))
    done = run_cli(
        "batch",
        str(tmp_path / "specs"),
        "--engine",
        "ray",
        "--slots",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert {line["status"] for line in results(tmp_path / "run")} == {"passed"}
    assert set(wait_until_gone("/tmp/crray-")) <= before


def test_a_ray_cluster_without_the_slot_resource_is_a_preflight_error(tmp_path: Path) -> None:
    probe = (
        "from pathlib import Path\n"
        "from code_runner.batch import EngineOptions, make_engine\n"
        "from code_runner.errors import EnvironmentProblem\n"
        "try:\n"
        f"    make_engine('ray', EngineOptions(run_dir=Path({str(tmp_path)!r}), slots=0))\n"
        "except EnvironmentProblem as exc:\n"
        "    print(exc.render())\n"
    )
    before = set(processes_with("/tmp/crray-"))
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert "declares no code_runner_slot resource" in done.stdout, done.stderr
    assert "--resources='{\"code_runner_slot\": 8}'" in done.stdout
    assert set(wait_until_gone("/tmp/crray-")) <= before  # the Ray it started is stopped


def test_a_ray_address_nobody_answers_on_is_refused_at_once(tmp_path: Path) -> None:
    """Ray alone retries an unreachable head for minutes; the batch says so within seconds."""
    task_specs(tmp_path / "specs", calc_repo(tmp_path), 1)
    with socket.socket() as probe:  # a loopback port with no listener
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["--engine", "ray", "--run-dir", str(tmp_path / "run")]
    address = f"127.0.0.1:{port}"
    done = run_cli("batch", str(tmp_path / "specs"), "--address", address, *args, timeout=60)
    assert done.returncode == 3, done.stderr
    assert f"the Ray cluster at 127.0.0.1:{port}" in done.stderr
    assert "cannot be reached: Connection refused" in done.stderr
    assert "ray start --head" in done.stderr and "Traceback" not in done.stderr
    assert results(tmp_path / "run") == []


def test_a_task_timeout_of_zero_is_a_usage_error(tmp_path: Path) -> None:
    task_specs(tmp_path / "specs", calc_repo(tmp_path), 1)
    for value in ("0", "0s", "0m"):
        done = run_cli(
            "batch", str(tmp_path / "specs"), "--task-timeout", value, "--run-dir", str(tmp_path)
        )
        assert done.returncode == 2, done.stderr
        assert "leaves an item no time to run" in done.stderr and "Traceback" not in done.stderr
        assert results(tmp_path) == []


def test_a_second_ctrl_c_forces_items_that_ignore_the_soft_stop(tmp_path: Path) -> None:
    """Cells whose command ignores SIGTERM outlast a soft stop with a long grace; the second
    Ctrl-C ends them at once, and no process of theirs is left."""
    marker = f"40.{os.getpid() % 10000:04d}3"
    sweep = tmp_path / "sweep.json"
    command = ["sh", "-c", "trap '' TERM; sleep {s}; true"]
    grid = {"s": [marker], "i": [0, 1]}
    cell = {"command": command, "grid": grid, "cwd": str(tmp_path), "grace": "5m"}
    sweep.write_text(json.dumps(cell))  # the cell's own exec stop waits as long
    args = ["batch", str(sweep), "--run-dir", str(tmp_path / "run"), "--grace", "5m"]
    driver = subprocess.Popen(
        [sys.executable, "-m", "code_runner", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while len(processes_with(f"sleep {marker}")) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)  # each cell's shell and its sleep
    cells = set(processes_with(f"sleep {marker}"))
    driver.send_signal(signal.SIGINT)
    time.sleep(3)
    assert driver.poll() is None  # the soft stop waits for the grace
    assert set(processes_with(f"sleep {marker}")) == cells
    started = time.monotonic()
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 130, err
    assert time.monotonic() - started < 30
    assert "second interrupt: forcing" in err.decode()
    assert sorted(line["status"] for line in results(tmp_path / "run")) == ["cancelled"] * 2
    assert wait_until_gone(marker) == []


def test_a_timed_out_sweep_cell_that_ignores_sigterm_leaves_no_process(tmp_path: Path) -> None:
    """The cell's command runs in a session of its own, under exec's watchdog: ending the
    item still ends both."""
    marker = f"41.{os.getpid() % 10000:04d}7"
    sweep = tmp_path / "sweep.json"
    command = ["sh", "-c", "trap '' TERM; sleep {s}; true"]
    cell = {"command": command, "grid": {"s": [marker]}, "cwd": str(tmp_path), "grace": "5m"}
    sweep.write_text(json.dumps(cell))
    args = ["--task-timeout", "3s", "--grace", "1s", "--run-dir", str(tmp_path / "run")]
    done = run_cli("batch", str(sweep), *args, timeout=120)
    assert done.returncode == 1, done.stderr
    assert [line["status"] for line in results(tmp_path / "run")] == ["timeout"]
    assert wait_until_gone(marker) == []

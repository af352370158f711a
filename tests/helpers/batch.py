"""Builders for batch tests: a calc source with many short task specs, a sweep file, a local
Ray head for the whole session, and the /proc scan that proves no process of an item is left."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from code_runner.batch.ray_engine import LOOPBACK_ENV
from tests.helpers.tasks import FIXED_ADD, PY, cmd, write, write_task

QUICK_DOD = "grep -q 'return a - b' calc.py"  # no interpreter to start: short items


def task_specs(
    specs: Path, source: Path, count: int, *, prefix: str = "t", before: list[str] | None = None
) -> list[str]:
    """`count` specs on one source, each fixing calc.py (after running `before` commands)."""
    specs.mkdir(parents=True, exist_ok=True)
    ids = []
    for index in range(count):
        task_id = f"{prefix}{index:02d}"
        calls = [cmd(c) for c in before or []] + [write("calc.py", FIXED_ADD)]
        write_task(
            specs, source, [calls], task_id=task_id, command=QUICK_DOD, assertion="exit_code == 1"
        )
        ids.append(task_id)
    return ids


def sweep_file(root: Path, values: list[float], seeds: list[int]) -> Path:
    path = root / "sweep.yaml"
    data = {
        "command": [PY, "-c", "print('loss', {lr} * {seed})"],
        "grid": {"lr": values, "seed": seeds},
        "cwd": str(root),
        "timeout": "60s",
    }
    path.write_text(json.dumps(data))
    return path


def results(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def processes_with(marker: str) -> list[int]:
    """PIDs whose command line holds `marker` (read from /proc, as the issue asks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def wait_until_gone(marker: str, timeout_s: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not processes_with(marker):
            return []
        time.sleep(0.2)
    return processes_with(marker)


def wait_for(marker: str, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = processes_with(marker)
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no process with {marker!r} appeared")


def wait_for_pid(path: Path, timeout_s: float = 60.0) -> int:
    """The pid a try dir's `item.pid` names, once it is written."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written")


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ray_head(root: Path, slots: int) -> Iterator[str]:
    """A Ray head on 127.0.0.1 with `slots` code_runner_slot, stopped (by PID) at the end."""
    temp = Path(f"/tmp/crtest-{os.getpid()}")  # a Unix socket path must stay short
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(root / "home"),
        "CODE_RUNNER_STATE_DIR": str(root / "state"),
        "RAY_USAGE_STATS_ENABLED": "0",
        **LOOPBACK_ENV,  # every port of the head on 127.0.0.1, as code-runner's own Ray
    }
    (root / "home").mkdir(parents=True, exist_ok=True)
    with (root / "ray.out").open("wb") as log:
        head = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ray.scripts.scripts",
                "start",
                "--head",
                "--block",
                f"--port={port}",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=2",
                f"--resources={json.dumps({'code_runner_slot': slots})}",
                "--include-dashboard=false",
                "--disable-usage-stats",
                f"--temp-dir={temp}",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    address = f"127.0.0.1:{port}"
    try:
        _wait_ready(address, head, root)
        yield address
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=20)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        for pid in wait_until_gone(str(temp), timeout_s=10):
            os.kill(pid, signal.SIGKILL)


def _wait_ready(address: str, head: subprocess.Popen[bytes], root: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise AssertionError("ray start failed:\n" + (root / "ray.out").read_text())
        try:
            with socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), 0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the Ray head did not come up in 60 s")

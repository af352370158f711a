"""The dashboard under test: real task and exec runs to show, an in-process client, and a
real `code-runner serve` process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page
from starlette.testclient import TestClient

from code_runner.web import Guard, create_app
from tests.helpers.tasks import FIXED_ADD, FIXED_BOTH, calc_repo, cmd, run_cli, write, write_task

PY = sys.executable
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS_ENV = "CODE_RUNNER_SCREENSHOTS"  # a folder to keep the browser tests' screenshots in
FAST_DOD = f"{PY} -c 'import calc; assert calc.add(2, 3) == 5 and calc.mul(2, 3) == 6'"
EVIL = (
    "<script>window.pwned=1</script>\x1b[31mRED\x1b[0m\x1b]0;title\x07 <img src=x onerror=alert(1)>"
)
METRICS_SCRIPT = (
    "import math, time\n"
    "for i in range(40):\n"
    "    print(f'epoch {i} loss={math.exp(-i/10):.4f} val_loss={math.exp(-i/12)+0.05:.4f}',"
    " flush=True)\n"
    "    time.sleep(0.01)\n"
)


def task_spec(root: Path, rounds: list[list[dict[str, Any]]], **extra: Any) -> Path:
    """A calc task with a fast DoD; its record goes to `root/runs/out`."""
    source = calc_repo(root)
    spec = write_task(root, source, rounds, command=FAST_DOD, **extra)
    data = spec.read_text().replace(str(root / "out"), str(root / "runs" / "out"))
    spec.write_text(data)
    return spec


def two_round_rounds(evil: str = "") -> list[list[dict[str, Any]]]:
    """Round 1 fixes add, round 2 both; round 2 also writes outside the allowlist, once
    through the file tool (refused) and once through a command (dropped by the audit)."""
    return [
        [write("calc.py", FIXED_ADD)],
        [
            write("calc.py", FIXED_BOTH),
            write("notes.txt", evil or "notes\n"),
            cmd("echo stray > stray.txt"),
        ],
    ]


def finished_task(root: Path, evil: str = "") -> Path:
    """A finished, passed task run under `root/runs`; returns the runs root."""
    done = run_cli("run", str(task_spec(root, two_round_rounds(evil))))
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "runs"


def slow_task_spec(root: Path, pauses: int = 6) -> Path:
    """A task whose one round makes `pauses` half-second commands before it fixes calc.py."""
    calls = [cmd("sleep 0.5") for _ in range(pauses)] + [write("calc.py", FIXED_BOTH)]
    return task_spec(root, [calls])


def finished_exec(root: Path, name: str = "exec1", script: str = METRICS_SCRIPT) -> Path:
    """A finished exec run at `root/runs/NAME` that printed metrics."""
    (root / f"{name}.py").write_text(script)
    env = os.environ | {"CODE_RUNNER_MIN_INTERVAL_S": "0.05"}
    done = subprocess.run(
        [
            *(PY, "-m", "code_runner", "exec", "--yes", "--interval", "0.1"),
            *("--run-dir", str(root / "runs" / name), "--cwd", str(root), "--", PY, f"{name}.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "runs" / name


@dataclass(frozen=True)
class Made:
    """Runs made for several tests, and the state dir that sealed them."""

    runs: Path
    state: Path

    def use_state(self, patch: pytest.MonkeyPatch) -> None:
        """Let `code-runner apply` in this test trust the records (their seal key is here)."""
        patch.setenv("CODE_RUNNER_STATE_DIR", str(self.state))


def made_runs(base: Path, patch: pytest.MonkeyPatch) -> Made:
    """A finished task and exec run under `base/runs`, made with dirs of their own."""
    for name in ("home", "config", "state", "cache"):
        (base / name).mkdir()
    patch.setenv("HOME", str(base / "home"))
    patch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    patch.setenv("XDG_STATE_HOME", str(base / "state"))
    patch.setenv("XDG_CACHE_HOME", str(base / "cache"))
    patch.setenv("CODE_RUNNER_STATE_DIR", str(base / "state" / "code-runner"))
    finished_task(base)
    finished_exec(base)
    return Made(base / "runs", base / "state" / "code-runner")


def client(runs: Path, host: str = "127.0.0.1") -> tuple[TestClient, Guard]:
    guard = Guard.for_bind(host)
    return TestClient(create_app([runs], guard=guard), base_url=f"http://{host}"), guard


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]
    first_lines: list[str]


@contextmanager
def serve(runs: Path, *extra: str, host: str = "127.0.0.1") -> Iterator[Served]:
    """A real `code-runner serve` on a free port, ended (and reaped) on exit."""
    process = subprocess.Popen(
        [
            PY,
            "-m",
            "code_runner",
            "serve",
            "--runs",
            str(runs),
            "--host",
            host,
            "--port",
            "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    try:
        lines: list[str] = []
        assert process.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if "code-runner dashboard: " in line:
                url = line.split("code-runner dashboard: ", 1)[1].strip()
                yield Served(url, process, lines)
                return
        raise AssertionError(f"serve did not start: {lines}")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def reload(page: Page) -> None:
    """Reload as a person presses F5. The page may be reloading itself at that moment (a
    state change it saw over SSE), and a navigation it started first aborts this one: then
    wait for the page's own load and reload again."""
    for _ in range(5):
        try:
            page.reload()
            return
        except PlaywrightError as exc:
            if "ERR_ABORTED" not in str(exc):
                raise
            page.wait_for_load_state()
    page.reload()


def screenshot(page: Page, tmp_path: Path, name: str) -> Path:
    """A full-page screenshot in the test's dir, and in $CODE_RUNNER_SCREENSHOTS when set."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get(SCREENSHOTS_ENV)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)
    return path

"""Monitor runs for tests: fast intervals, in-process CLI through the real boundary,
and real subprocesses (with or without a pseudo-terminal)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from click.testing import CliRunner

from code_runner.cli.boundary import run_cli
from code_runner.cli.exec_cmd import exec_command
from code_runner.monitor.result import ExperimentResult, load_result

PY = sys.executable
FAST = ["--interval", "0.1", "--yes"]


@dataclass
class Ran:
    code: int
    out: str
    err: str
    run_dir: Path

    def result(self) -> ExperimentResult:
        return load_result(self.run_dir)

    def events(self) -> list[dict[str, Any]]:
        lines = (self.run_dir / "events.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def alert_kinds(self) -> list[str]:
        return [e["alert"] for e in self.events() if e["kind"] in ("alert", "alert_repeated")]


def run_exec(tmp_path: Path, args: Sequence[str], *, run_dir: Path | None = None) -> Ran:
    """`code-runner exec ARGS` in-process through the CLI's real error boundary."""
    run_dir = run_dir or tmp_path / "run"
    with CliRunner().isolation() as (out, err, _):
        code = run_cli(exec_command, ["--run-dir", str(run_dir), "--cwd", str(tmp_path), *args])
    return Ran(code, out.getvalue().decode(), err.getvalue().decode(), run_dir)


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    return name


def gone(pid: int) -> bool:
    """True when the pid no longer names a live process (a zombie counts as alive: unreaped)."""
    try:
        return not psutil.Process(pid).is_running()
    except psutil.NoSuchProcess:
        return True


def wait_for(predicate: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


class PtySession:
    """A real process on a pseudo-terminal: read the screen, type answers."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        self.master = master
        self.proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self.screen = b""

    def _read(self, timeout_s: float) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout_s)
        if ready:
            try:
                self.screen += os.read(self.master, 65536)
            except OSError:
                time.sleep(timeout_s)

    def expect(self, needle: str, timeout_s: float = 15.0) -> str:
        deadline = time.monotonic() + timeout_s
        while needle.encode() not in self.screen:
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not seen; screen:\n{self.text()}")
            self._read(0.05)
        return self.text()

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def text(self) -> str:
        return self.screen.decode("utf-8", errors="replace")

    def wait(self, timeout_s: float = 20.0) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.05)
        self._read(0.05)
        code = self.proc.wait(timeout=1)
        os.close(self.master)
        return code

"""The attack suite's fixtures: host targets, a TCP listener, and the tally at the end."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner import sandbox
from tests.security.harness import TALLY

REPORT_ENV = "CODE_RUNNER_ATTACK_REPORT"  # a file to write {"tried": N, "held": M} to


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY["tried"]:
        terminalreporter.write_line(
            f"security suite: {TALLY['tried']} attacks tried, {TALLY['held']} held"
        )
        target = os.environ.get(REPORT_ENV)
        if target:
            Path(target).write_text(json.dumps(TALLY))


@pytest.fixture
def sandbox_works() -> None:
    found = sandbox.probe()
    if not found.ok:
        pytest.skip(f"the OS sandbox does not work here: {found.reason}")


@pytest.fixture
def etc_file() -> Iterator[Path]:
    """A file of ours in /etc: visible (read-only) inside the sandbox, and ours to lose."""
    if not os.access("/etc", os.W_OK):
        pytest.skip("needs write access to /etc to plant a target file")
    path = Path("/etc") / f"code-runner-attack-{uuid.uuid4().hex[:12]}"
    path.write_text("host file: must stay exactly this\n")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


@pytest.fixture
def visible_dir() -> Iterator[Path]:
    """A directory outside every masked path (/tmp, /home...), for a visible source repo."""
    parent = Path("/var/lib/code-runner-tests")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        pytest.skip("needs a writable /var/lib")
    here = parent / uuid.uuid4().hex[:12]
    here.mkdir()
    try:
        yield here
    finally:
        shutil.rmtree(here, ignore_errors=True)
        if not any(parent.iterdir()):
            parent.rmdir()


class Listener:
    """A TCP server on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    try:
        yield server
    finally:
        server.close()

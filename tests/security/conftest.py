"""The attack suite's fixtures: host targets, a TCP listener, and the tally at the end."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner import sandbox
from tests.helpers.agent_clis import BIN_ENV, KEY, KEY_ENV, cli_program, codex_program
from tests.helpers.attacks import TALLY
from tests.helpers.network import Listener
from tests.helpers.web import Made, made_runs

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


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    """Finished task and exec runs for the dashboard's attacks, made once per module."""
    with pytest.MonkeyPatch.context() as patch:
        yield made_runs(tmp_path_factory.mktemp("web"), patch)


@pytest.fixture
def codex(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The real Codex CLI, for attacks made through an agent CLI's own tools."""
    yield from codex_program(monkeypatch)


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> str:
    """The real Claude Code CLI, for attacks made through its own tools (no OS sandbox)."""
    program = cli_program("claude")
    monkeypatch.setenv(BIN_ENV["claude"], program)
    monkeypatch.setenv(KEY_ENV, KEY)
    return program

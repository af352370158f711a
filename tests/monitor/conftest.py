"""Fixtures for the monitor's tests: test-speed check intervals, pseudo-terminal sessions."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from code_runner.monitor.spec import MIN_INTERVAL_ENV
from tests.helpers.monitor import PY, PtySession
from tests.helpers.monitor_jobs import end_leftover_jobs


@pytest.fixture
def fast_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Intervals below 10 s are allowed only through this documented env var."""
    monkeypatch.setenv(MIN_INTERVAL_ENV, "0.05")


@pytest.fixture
def pty_session(tmp_path: Path) -> Iterator[Any]:
    sessions: list[PtySession] = []

    def start(args: Sequence[str], *, no_color: bool = True) -> PtySession:
        env = dict(os.environ)
        env.pop("NO_COLOR", None)
        if no_color:
            env["NO_COLOR"] = "1"
        env["TERM"] = "xterm-256color"
        env.pop("COLUMNS", None)
        session = PtySession([PY, "-m", "code_runner.cli.exec_cmd", *args], env, tmp_path)
        sessions.append(session)
        return session

    yield start
    for session in sessions:
        if session.proc.poll() is None:
            session.proc.kill()
            session.proc.wait()


@pytest.fixture
def no_leftover_jobs(tmp_path: Path) -> Iterator[None]:
    """A failing test must not leave its job (tests.helpers.monitor_jobs.JOB) running."""
    yield
    end_leftover_jobs(tmp_path)

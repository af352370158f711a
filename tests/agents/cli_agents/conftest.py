"""The real agent CLIs as fixtures: the installed program, with its key and bin env set."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.agent_clis import BIN_ENV, KEY, KEY_ENV, cli_program, open_path


@pytest.fixture
def codex(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Codex, with workspaces where its own sandbox can reach them.

    Codex's sandbox runs it in a user namespace, where a directory on the way to the
    workspace that only root may search is closed. Workspaces (and CODEX_HOME in them) go
    under /var/tmp, so a test elsewhere that leaves /tmp closed cannot break these.
    """
    program = cli_program("codex")
    monkeypatch.setenv(BIN_ENV["codex"], program)
    monkeypatch.setenv(KEY_ENV, KEY)
    base = Path("/var/tmp")
    if not (base.is_dir() and open_path(base)):
        yield program
        return
    state = Path(tempfile.mkdtemp(prefix="code-runner-e2e-", dir=base))
    state.chmod(0o755)
    monkeypatch.setenv("CODE_RUNNER_STATE_DIR", str(state))
    try:
        yield program
    finally:
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> str:
    program = cli_program("claude")
    monkeypatch.setenv(BIN_ENV["claude"], program)
    monkeypatch.setenv(KEY_ENV, KEY)
    return program

"""The real agent CLIs as fixtures: the installed program, with its key and bin env set."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.agent_clis import BIN_ENV, KEY, KEY_ENV, cli_program, codex_program


@pytest.fixture
def codex(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Codex, with workspaces where its own sandbox can reach them (`codex_program`)."""
    yield from codex_program(monkeypatch)


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> str:
    program = cli_program("claude")
    monkeypatch.setenv(BIN_ENV["claude"], program)
    monkeypatch.setenv(KEY_ENV, KEY)
    return program

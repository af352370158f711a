"""Fixtures for every test: its own HOME, config and state dirs, with a guard that fails any
test that would touch the real ones, and a real git repo. Importable helpers live in
tests/helpers/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.git import make_repo
from tests.helpers.isolation import forbid_real_dirs

_REAL_HOME = os.environ.get("HOME", "")


@pytest.fixture(autouse=True)
def isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("iso")
    for name, sub in (
        ("HOME", "home"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_CACHE_HOME", "cache"),
        ("CODE_RUNNER_STATE_DIR", "state/code-runner"),
    ):
        path = base / sub
        path.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(path))
    for var in [v for v in os.environ if v.startswith("GIT_")]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    forbid_real_dirs(monkeypatch)
    yield base
    assert os.environ.get("HOME") != _REAL_HOME or not _REAL_HOME, "test escaped its HOME"


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": "hello\n", "src/app.py": "x = 1\n"})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """In CI a skipped test proves nothing: every environment-dependent skip
    (no sandbox, no agent CLI, no user namespaces) fails there instead."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run every test: {report.longrepr}"

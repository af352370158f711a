"""Fixtures for every test: its own HOME, config and state dirs, with a guard that fails any
test that would touch the real ones, and a real git repo. Importable helpers live in
tests/helpers/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner.sandbox.idmap import unmount
from tests.helpers.big_patch import BigPlan, run_big_plan
from tests.helpers.git import make_repo
from tests.helpers.isolation import (
    ISOLATED_DIRS,
    dev_null_intact,
    forbid_real_dirs,
    mounts_under,
)

_REAL_HOME = os.environ.get("HOME", "")


@pytest.fixture(autouse=True)
def isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("iso")
    for name, sub in ISOLATED_DIRS:
        path = base / sub
        path.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(path))
    for var in [v for v in os.environ if v.startswith("GIT_")]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    forbid_real_dirs(monkeypatch)
    yield base
    assert os.environ.get("HOME") != _REAL_HOME or not _REAL_HOME, "test escaped its HOME"
    replaced = dev_null_intact()
    assert replaced is None, f"the machine's /dev/null was replaced ({replaced}); restored"


@pytest.fixture(scope="session", autouse=True)
def no_mount_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Runs killed on purpose leave their overlays and apply views for `gc`; take them
    down when the session ends, so no test's mounts outlive the suite."""
    yield
    for point in mounts_under(tmp_path_factory.getbasetemp()):
        unmount(point)


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


@pytest.fixture(scope="session")
def big_plan(tmp_path_factory: pytest.TempPathFactory) -> BigPlan:
    """A plan run whose item added a large file, shared by the tests that read its patch."""
    return run_big_plan(tmp_path_factory.mktemp("big-plan"))

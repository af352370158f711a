"""Every test gets its own HOME, config and state dirs; a guard fails any test that
would touch the real ones. Repos are real git repos made with a fixed identity."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    yield base
    assert os.environ.get("HOME") != _REAL_HOME or not _REAL_HOME, "test escaped its HOME"


def git(repo: Path, *args: str, check: bool = True) -> str:
    """Run git in a test repo with a fixed identity and no user config."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ["HOME"],
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "Test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "Test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    result = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def make_repo(path: Path, files: dict[str, str | bytes]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


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

"""The suite's own guard: no test can reach the real state dir or the real user config."""

from __future__ import annotations

import pytest

from code_runner import config, dirs
from tests.helpers.isolation import REAL_DIRS, RealDirUsed


def test_every_test_has_its_own_state_dir_and_config() -> None:
    assert dirs.state_dir() != REAL_DIRS["state dir"]
    assert config.user_config_path() != REAL_DIRS["user config"]


def test_pointing_at_the_real_state_dir_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    real_state = REAL_DIRS["state dir"]
    monkeypatch.setenv(dirs.STATE_ENV, str(real_state))
    with pytest.raises(RealDirUsed, match="real state dir"):
        dirs.workspaces_dir()


def test_pointing_at_the_real_user_config_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    real_config = REAL_DIRS["user config"]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(real_config.parent.parent))
    with pytest.raises(RealDirUsed, match="real user config"):
        config.config_path(None)

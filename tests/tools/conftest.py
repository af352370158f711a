"""The tools' fixture: a toolbox on a fresh workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.toolbox import Box


@pytest.fixture
def b(tmp_path: Path) -> Box:
    return Box(tmp_path)

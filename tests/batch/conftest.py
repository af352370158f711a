from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.batch import ray_head

RAY_SLOTS = 2


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One local Ray head for the whole session, on 127.0.0.1, stopped at the end."""
    yield from ray_head(tmp_path_factory.mktemp("ray"), RAY_SLOTS)


@pytest.fixture(params=["local", "ray"])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def address(engine: str, request: pytest.FixtureRequest) -> str | None:
    """The session's Ray head for the ray engine; None for local."""
    if engine != "ray":
        return None
    return str(request.getfixturevalue("ray_address"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path

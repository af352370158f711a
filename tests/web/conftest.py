"""Run records the dashboard tests share: made once per module, in dirs of their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.web import Made, made_runs


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    """A finished task run and a finished exec run (read-only: tests must not decide them)."""
    with pytest.MonkeyPatch.context() as patch:
        yield made_runs(tmp_path_factory.mktemp("web"), patch)

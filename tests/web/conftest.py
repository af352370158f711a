"""Run records the dashboard tests share: made once per module, in dirs of their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.helpers.web import CHROMIUM, Made, made_runs


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    """A finished task run and a finished exec run (read-only: tests must not decide them)."""
    with pytest.MonkeyPatch.context() as patch:
        yield made_runs(tmp_path_factory.mktemp("web"), patch)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, driven by Playwright."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox"], headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    opened = context.new_page()
    yield opened
    context.close()

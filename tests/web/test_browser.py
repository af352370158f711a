"""The dashboard in a real browser (Chromium, headless) over runs this test starts.

Each step waits for what a person would see: a run appearing in the list, its events
arriving while it works, the diff, the verdict of `apply --check`, a chart with points.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.helpers.web import (
    EVIL,
    METRICS_SCRIPT,
    PY,
    finished_exec,
    screenshot,
    serve,
    slow_task_spec,
)

pytestmark = pytest.mark.e2e


def test_a_task_run_live_then_its_diff_and_apply_check(page: Page, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    spec = slow_task_spec(tmp_path)
    with serve(runs) as served:
        page.goto(served.url)
        expect(page.locator("p.count")).to_contain_text("0 of 0 run(s)")
        run = subprocess.Popen(
            [PY, "-m", "code_runner", "run", str(spec)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        try:
            link = page.locator("#runs-table a", has_text="fix-calc")
            expect(link).to_be_visible(timeout=15_000)  # the list updated by itself
            link.click()
            fresh = page.locator("#events tr.fresh")
            expect(fresh.first).to_be_visible(timeout=15_000)  # an event pushed over SSE
            expect(page.locator("#events")).to_contain_text("tool_call")
            screenshot(page, tmp_path, "task-live")
            expect(page.locator("p.notice")).to_contain_text("finished", timeout=60_000)
        finally:
            assert run.wait(timeout=120) == 0
        assert page.locator("#events tr.fresh").count() >= 5
        page.reload()
        expect(page.locator("#run-state")).to_have_text("passed")
        expect(page.locator("table.diff.unified tr.l-add").first).to_be_visible()
        page.get_by_label("side by side").check()
        expect(page.locator("table.diff.split td.l-add").first).to_be_visible()
        expect(page.locator("table.diff.unified").first).to_be_hidden()
        page.get_by_role("button", name="apply --check").click()
        verdict = page.locator("#action-output .action-output")
        expect(verdict).to_contain_text("would pass", timeout=60_000)
        expect(verdict).to_contain_text("exit 0")
        screenshot(page, tmp_path, "task-apply-check")


def test_an_exec_run_shows_a_chart_with_points(page: Page, tmp_path: Path) -> None:
    finished_exec(tmp_path, script=METRICS_SCRIPT + f"print({EVIL!r})\n")
    with serve(tmp_path / "runs") as served:
        page.goto(served.url)
        page.locator("a", has_text="exec1").click()
        chart = page.locator("#metric-chart")
        expect(chart).to_have_attribute("data-points", "40")
        expect(chart.locator("canvas")).to_be_visible()
        expect(page.locator("#memory-chart canvas")).to_be_visible()
        page.locator("#log-scale").check()
        expect(chart.locator("canvas")).to_be_visible()
        expect(page.locator("#stdout-tail")).to_contain_text("<script>window.pwned=1</script>")
        assert page.evaluate("() => window.pwned") is None  # shown as text, never run
        screenshot(page, tmp_path, "exec")
        page.goto(served.url + "compare?run=0/exec1")
        expect(page.locator("#compare-chart canvas")).to_be_visible()
        screenshot(page, tmp_path, "compare")

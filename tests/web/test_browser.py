"""The dashboard in a real browser (Chromium, headless) over runs this test starts.

Each step waits for what a person would see: a run appearing in the list, its events
arriving while it works, the diff, the verdict of `apply --check`, a chart with points.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from code_runner.monitor.result import load_result
from code_runner.testing.chat_completions import ChatCompletions, Turn, call
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.batch import processes_with, wait_until_gone
from tests.helpers.model_runs import model_task
from tests.helpers.monitor import wait_for
from tests.helpers.plan_runs import (
    FIXED,
    calc_source,
    plan_cli,
    plan_item,
    put,
    run_args,
    write_plan,
    write_script,
)
from tests.helpers.web import (
    EVIL,
    METRICS_SCRIPT,
    PY,
    finished_exec,
    reload,
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
        reload(page)
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


def test_alert_buttons_answer_a_running_exec(page: Page, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "quiet"
    argv = [PY, "-m", "code_runner", "exec", "--yes", "--interval", "0.1", "--stall-checks"]
    argv += ["2", "--timeout", "90", "--run-dir", str(run_dir), "--cwd", str(tmp_path)]
    running = subprocess.Popen(
        [*argv, "--", "sleep", "90"],
        env=os.environ | {"CODE_RUNNER_MIN_INTERVAL_S": "0.05"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with serve(tmp_path / "runs") as served:
            assert wait_for(lambda: (run_dir / "spec.json").exists(), 30)
            page.goto(served.url + "exec/0/quiet")
            show = page.locator("#pending-alert button[data-answer=D]")
            expect(show).to_be_visible(timeout=30_000)
            expect(page.locator("#pending-alert")).to_contain_text("STALL_SUSPECTED")
            request = show.get_attribute("hx-vals")  # this alert's D, as the page posts it
            target = show.get_attribute("hx-post")
            assert request is not None and target is not None
            show.click()
            said = page.locator("#answer-output .action-output")
            expect(said).to_contain_text("Processes in the tree", timeout=15_000)
            # the same request again (a retried POST; a new alert may have replaced the
            # button since): nothing happens twice
            token = page.locator("meta[name=csrf-token]").get_attribute("content") or ""
            again = page.request.post(
                served.url.rstrip("/") + target,
                form=json.loads(request),
                headers={"X-CSRF-Token": token, "HX-Request": "true"},
            )
            assert "already answered; nothing changed" in again.text(), again.text()
            screenshot(page, tmp_path, "exec-alert")
            page.once("dialog", lambda dialog: dialog.accept())
            page.locator("#pending-alert button[data-answer=B]").click()
            expect(page.locator("#run-state")).to_have_text("stopped_by_user", timeout=30_000)
            answers = page.locator("ul.answers")
            expect(answers).to_be_visible()
            expect(answers).to_contain_text("kill")
            expect(answers).to_contain_text("via web")
            screenshot(page, tmp_path, "exec-answered")
        assert running.wait(timeout=30) != 0
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    result = load_result(run_dir)
    assert [(a.action, a.via) for a in result.answers] == [
        ("show_diagnosis", "web"),
        ("kill", "web"),
    ]
    assert result.answers[1].by.endswith("from 127.0.0.1")


def test_a_scope_pause_amended_approved_and_resumed_in_the_browser(
    page: Page, tmp_path: Path
) -> None:
    source = calc_source(tmp_path)
    items = [plan_item(1, "Fix add", [("calc.py", "edit")]),
             plan_item(2, "Add a note", [("notes.md", "add")])]  # fmt: skip
    plan = write_plan(tmp_path, *items)
    write_script(tmp_path, "P1", [put("calc.py", FIXED), put("extra.txt", "x\n")])
    write_script(tmp_path, "P2", [put("notes.md", "# notes\n")])
    out = tmp_path / "runs" / "plan1"
    paused = plan_cli(*run_args(plan, source, "--output-dir", str(out)), cwd=tmp_path)
    assert "needs_amendment" in paused.stdout, paused.stdout + paused.stderr
    items[0]["files"].append({"path": "extra.txt", "kind": "add", "renamed_from": None,
                              "change": "x"})  # fmt: skip
    amended = write_plan(tmp_path, *items, name="amended")
    with serve(tmp_path / "runs") as served:
        page.goto(served.url + "plan/0/plan1")
        expect(page.locator("#run-state")).to_have_text("needs_amendment")
        output = page.locator("#plan-output .action-output")
        page.get_by_role("button", name="approve: continue").click()
        expect(output).to_contain_text("amend", timeout=30_000)  # refused: amend first
        expect(output).to_contain_text("exit 2")
        page.locator("input[name=plan_file]").set_input_files(str(amended))
        page.get_by_role("button", name="amend", exact=True).click()
        expect(output).to_contain_text("amended", timeout=30_000)
        screenshot(page, tmp_path, "plan-amended")
        csrf = page.locator("meta[name=csrf-token]").get_attribute("content") or ""
        amend_id = page.locator("form[hx-post*='/amend/'] input[name=action_id]").input_value()
        retried = page.request.post(  # the same POST again, as a client retrying it
            served.url + "act/plan/amend/0/plan1",
            headers={"X-CSRF-Token": csrf},
            multipart={
                "action_id": amend_id,
                "plan_file": {"name": "amended.json", "mimeType": "application/json",
                              "buffer": amended.read_bytes()},
            },
        )  # fmt: skip
        assert "replayed" in retried.text() and "exit 0" in retried.text()
        reload(page)
        page.get_by_role("button", name="approve: continue").dblclick()  # two POSTs, one action
        expect(output).to_contain_text("replayed", timeout=30_000)
        reload(page)
        expect(page.locator("#run-state")).to_have_text("ready")
        page.get_by_role("button", name="resume the plan").click()  # the page reloads itself
        assert wait_for(lambda: plan_state(out) == "done", 120)
        reload(page)
        expect(page.locator("#run-state")).to_have_text("done")
        expect(page.locator("table.items")).not_to_contain_text("pending")
        expect(page.locator("table.items")).to_contain_text("extra.txt, declared in r2")
        expect(page.locator("#events")).to_contain_text("run_finished")
        screenshot(page, tmp_path, "plan-done")
    final = json.loads((out / "plan.status.json").read_text())
    assert final["revision"] == 2  # one amendment, though it was sent twice
    assert [i["state"] for i in final["items"]] == ["committed"] * 2


def plan_state(out: Path) -> str:
    try:
        return str(json.loads((out / "plan.status.json").read_text()).get("status"))
    except (OSError, ValueError):
        return ""


def test_a_batch_in_the_runs_list_and_its_results_side_by_side(page: Page, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(
        "import math, sys\nlr = float(sys.argv[1])\n"
        "for i in range(20):\n    print(f'epoch {i} loss={math.exp(-lr * i):.4f}')\n"
    )
    sweep = tmp_path / "sweep.json"
    cells = {"command": [PY, "job.py", "{lr}"], "grid": {"lr": [0.1, 0.3]}}
    sweep.write_text(json.dumps({**cells, "cwd": str(tmp_path), "timeout": "60s"}))
    batch = [PY, "-m", "code_runner", "batch", str(sweep), "--slots", "2", "--run-dir"]
    done = subprocess.run(
        [*batch, str(tmp_path / "runs" / "sweep1")], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with serve(tmp_path / "runs") as served:
        page.goto(served.url)  # every kind: the batch and its items' exec runs
        expect(page.locator("#runs-table tr.kind-exec")).to_have_count(2)
        expect(page.locator("#runs-table a", has_text="sweep1/001-lr=0.3")).to_be_visible()
        screenshot(page, tmp_path, "runs")
        page.goto(served.url + "?kind=batch")
        row = page.locator("#runs-table tr.kind-batch")
        expect(row).to_contain_text("2 passed")
        row.locator("a", has_text="sweep1").click()
        table = page.locator("section.batch-results table")
        expect(table.locator("tbody tr")).to_have_count(2)
        expect(table).to_contain_text("0.3")
        expect(page.locator("#compare-chart canvas")).to_be_visible()
        assert page.locator("#compare-chart").get_attribute("data-points") == "20"
        screenshot(page, tmp_path, "compare-batch")
        table.locator("a", has_text="lr=0.3").click()
        expect(page.locator("#run-state")).to_have_text("completed")


def test_the_stop_button_ends_a_live_task_run(
    page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = "sleep 97.25"  # the agent's command, found in /proc by this exact text
    steps = [Turn(tool_calls=[call("run_command", command=marker, timeout_s=120)]), Turn("done")]
    with ScriptedServer(ChatCompletions(), steps) as server:
        run = model_task(tmp_path, server, monkeypatch)
        running = subprocess.Popen(
            [PY, "-m", "code_runner", "run", str(run.spec)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert wait_for(lambda: processes_with(marker), 60)  # the agent is at work
            with serve(run.out) as served:
                page.goto(served.url + "task/0/fix-calc")
                expect(page.locator("#run-state")).to_have_text(
                    "agent"
                )  # its state: the agent works
                page.once("dialog", lambda dialog: dialog.accept())
                page.get_by_role("button", name="stop the run").click()
                said = page.locator("#action-output .action-output")
                expect(said).to_contain_text("stopped", timeout=60_000)
                expect(said).to_contain_text("exit 0")
                assert running.wait(timeout=60) != 0
                reload(page)
                expect(page.locator("#run-state")).to_have_text("interrupted")
                screenshot(page, tmp_path, "task-stopped")
        finally:
            if running.poll() is None:
                running.kill()
                running.wait()
    assert wait_until_gone(marker) == []  # no process of the run is left
    assert run.result()["status"] == "interrupted"

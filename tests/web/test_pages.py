"""The dashboard's pages and buttons over real run records, in process (Starlette's client)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.monitor import wait_for
from tests.helpers.tasks import CALC, PY, fingerprint
from tests.helpers.web import Made, client, finished_task

pytestmark = pytest.mark.integration


@pytest.fixture
def runs(made: Made) -> Path:
    return made.runs


def test_the_runs_page_lists_every_kind_and_filters(runs: Path) -> None:
    http, _ = client(runs)
    page = http.get("/").text
    assert "fix-calc" in page and "exec1" in page
    assert "scripted:fix-calc.script.json" in page and "criteria met" in page
    only_tasks = http.get("/", params={"kind": "task"}).text
    assert "fix-calc" in only_tasks and "/exec/0/exec1" not in only_tasks
    failed = http.get("/", params={"status": "failed"}).text
    assert "/task/0/out/fix-calc" not in failed and "0 of 2 run(s)" in failed
    future = http.get("/", params={"since": "2999-01-01"}).text
    assert "0 of 2 run(s)" in future
    table = http.get("/runs/table").text
    assert "<html" not in table and "/task/0/out/fix-calc" in table


def test_the_task_page_shows_rounds_patch_log_transcript_and_contract(runs: Path) -> None:
    http, _ = client(runs)
    page = http.get("/task/0/out/fix-calc").text
    assert "Fix the calculator" in page
    assert "best, kept" in page  # round 2 holds the patch
    assert 'class="l-add"' in page and "calc.py" in page
    assert "return a * b" in page.replace('<span class="o">*</span>', "*").replace(
        '<span class="n">', ""
    ).replace("</span>", "")
    assert "Verifier log" in page and "round 0 (base)" in page
    assert "tool <code>write_file</code>" in page
    assert "outside the write allowlist" in page  # the refused call, folded
    dropped = page.index("Dropped by the audit")
    assert "<code>stray.txt</code>" in page[dropped : dropped + 800]
    assert "Result contract" in page and "SUCCESS" in page
    assert 'data-action="check"' in page and 'data-action="reject"' in page


def test_apply_check_runs_the_cli_and_changes_nothing(
    made: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    made.use_state(monkeypatch)
    http, guard = client(made.runs)
    source = made.runs.parent / "source"
    before = fingerprint(source)
    record = fingerprint(made.runs / "out")
    check = http.post("/act/task/check/0/out/fix-calc", headers={"X-CSRF-Token": guard.csrf})
    assert check.status_code == 200
    assert "would pass" in check.text and "exit 0" in check.text
    assert "nothing was changed" in check.text
    assert fingerprint(source) == before and fingerprint(made.runs / "out") == record


def test_reject_runs_the_cli_once_and_then_apply_is_refused(tmp_path: Path) -> None:
    runs = finished_task(tmp_path)
    http, guard = client(runs)
    source = tmp_path / "source"
    headers = {"X-CSRF-Token": guard.csrf}
    reject = http.post("/act/task/reject/0/out/fix-calc", headers=headers)
    assert "rejected" in reject.text and "exit 0" in reject.text
    again = http.post("/act/task/reject/0/out/fix-calc", headers=headers)
    assert "already rejected" in again.text  # a second click changes nothing
    refused = http.post("/act/task/apply/0/out/fix-calc", headers=headers)
    assert "was rejected" in refused.text and "exit 2" in refused.text
    assert (source / "calc.py").read_text() == CALC
    result = json.loads((runs / "out" / "fix-calc.result.json").read_text())
    assert result["decision"] == "rejected"


def test_the_exec_page_and_its_chart_data(runs: Path) -> None:
    http, _ = client(runs)
    page = http.get("/exec/0/exec1").text
    assert "completed" in page and "criteria" in page and "epoch 39" in page
    data = http.get("/data/exec/0/exec1").json()
    xs, ys = data["metrics"]["loss"]
    assert len(xs) == 40 and ys[0] == 1.0
    assert "val_loss" in data["metrics"]
    assert data["memory"][0], "memory samples over time"
    with http.stream("GET", "/stream/exec/0/exec1") as response:
        frames = "".join(response.iter_text())
    assert "event: status" in frames and '"state": "completed"' in frames
    assert frames.rstrip().splitlines()[-2] == "event: end"
    compare = http.get("/compare", params={"run": ["0/exec1"]}).text
    assert "<td>exec1</td>" in compare and '"loss": [[0.0' in compare  # the overlay's data


def test_the_event_stream_sends_every_event_then_ends(runs: Path) -> None:
    http, _ = client(runs)
    events = (runs / "out" / "fix-calc.events.jsonl").read_text().splitlines()
    with http.stream("GET", "/stream/task/0/out/fix-calc") as response:
        body = "".join(response.iter_text())
    assert body.count("event: event\n") == len(events)
    assert body.rstrip().splitlines()[-2] == "event: end"
    resumed_at = len(events[0]) + 1
    with http.stream(
        "GET", "/stream/task/0/out/fix-calc", headers={"Last-Event-ID": str(resumed_at)}
    ) as response:
        resumed = "".join(response.iter_text())
    assert resumed.count("event: event\n") == len(events) - 1


def test_the_stop_button_stops_a_running_exec(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "long"
    env = os.environ | {"CODE_RUNNER_MIN_INTERVAL_S": "0.05"}
    argv = [PY, "-m", "code_runner", "exec", "--yes", "--interval", "0.1", "--run-dir"]
    argv += [str(run_dir), "--cwd", str(tmp_path), "--", "sleep", "60"]
    running = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: read_state(run_dir) == "running", timeout_s=30)
        http, guard = client(tmp_path / "runs")
        page = http.get("/exec/0/long").text
        assert 'data-action="stop"' in page and "/stream/exec/0/long" in page
        stop = http.post("/act/exec/stop/0/long", headers={"X-CSRF-Token": guard.csrf})
        assert "stop requested (SIGTERM to its monitor" in stop.text
        assert running.wait(timeout=60) != 0
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["interrupted"] is True and result["state"] == "stopped_by_user"
    assert result["duration_s"] < 50
    # the same request as `code-runner stop`, recorded with who sent it and from where
    assert result["stop_reason"].startswith("stopped from the dashboard by ")
    assert result["stop_reason"].endswith(" from testclient")
    asked = json.loads((run_dir / "stop.json").read_text())
    assert asked["via"] == "web" and asked["by"] == result["stop_reason"].split(" by ", 1)[1]
    assert "stopped because: stopped from the dashboard by " in http.get("/exec/0/long").text
    again = http.post("/act/exec/stop/0/long", headers={"X-CSRF-Token": guard.csrf})
    assert "already finished" in again.text


def read_state(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / "status.json").read_text()).get("state"))
    except (OSError, ValueError):
        return ""

"""`code-runner summarize` over a folder holding task runs and experiments.

Real exec runs (a finished one, a failed one, one still running) and a real task run with the
scripted backend, all under one root, summarized by the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from code_runner.monitor import collect_experiments
from tests.helpers.monitor import FAST, PY, run_exec, wait_for
from tests.helpers.monitor_jobs import job_pids, read_status, start_monitor

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("fast_checks"),
    pytest.mark.usefixtures("no_leftover_jobs"),
]


def _summarize(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "code_runner", "summarize", *extra, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_summarize_lists_experiments_beside_task_runs(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    good = run_exec(tmp_path, [*FAST, "--", PY, "-c", "print('ok')"], run_dir=root / "a")
    bad = run_exec(tmp_path, [*FAST, "--", PY, "-c", "raise SystemExit(3)"], run_dir=root / "b")
    assert good.code == 0 and bad.code != 0
    monitor = start_monitor(tmp_path, root / "c", "60")
    job_pids(tmp_path)
    assert wait_for(lambda: read_status(root / "c").get("state") == "running")
    (root / "broken").mkdir()
    (root / "broken" / "spec.json").write_text("{")
    (root / "broken" / "status.json").write_text("[]")

    shown = _summarize(root)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "experiments (code-runner exec):" in out
    assert "completed" in out and "criteria met" in out and "print(" in out
    assert "0 run(s)" not in out  # no task run here: no empty task table
    assert "crashed" in out and "criteria NOT met" in out
    assert "running" in out and "job.py" in out
    assert "3 experiment(s): completed 1, crashed 1, running 1; criteria met 1" in out
    assert "1 unreadable run dir(s) skipped" in out

    data = json.loads(_summarize(root, "--json").stdout)
    states = sorted(line["state"] for line in data["experiments"])
    assert states == ["completed", "crashed", "running"]
    assert data["experiment_totals"]["succeeded"] == 1 and data["experiments_skipped"] == 1
    assert data["runs"] == []  # no task run here: nothing invented

    later = json.loads(_summarize(root, "--json", "--since", "2999-01-01").stdout)
    assert later["experiments"] == []
    monitor.kill()
    monitor.wait()


def test_listing_skips_workspaces_and_reads_each_run_once(tmp_path: Path) -> None:
    ran = run_exec(tmp_path, [*FAST, "--", PY, "-c", "print(1)"], run_dir=tmp_path / "r" / "x")
    assert ran.code == 0, ran.err
    hidden = tmp_path / "r" / "workspaces" / "y"
    hidden.mkdir(parents=True)
    for name in ("spec.json", "status.json"):
        (hidden / name).write_bytes((ran.run_dir / name).read_bytes())
    lines, skipped = collect_experiments(tmp_path / "r")
    assert [line.run_dir for line in lines] == [str(ran.run_dir)] and skipped == 0

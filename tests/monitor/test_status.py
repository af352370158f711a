"""`status.json` is a pure snapshot of the experiment (written after every check)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from code_runner.monitor import Experiment, ExperimentRecord, PlainUI, build_spec, detect_type
from code_runner.monitor.spec import MIN_INTERVAL_ENV
from code_runner.monitor.status import status

SETTLED = ("elapsed_s", "remaining_s", "updated_at")  # the clock; the writer adds the time


def test_a_finished_experiment_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MIN_INTERVAL_ENV, "0.05")
    code = "import time\nfor i in range(1, 4):\n    print(f'{i}/3', flush=True); time.sleep(0.3)\n"
    options = {
        "command": (sys.executable, "-c", code),
        "cwd": str(tmp_path),
        "interval": "0.1",
        "type": "etl",
        "timeout": "60s",
    }
    spec = build_spec({}, options, source="test")
    quiet = Console(file=io.StringIO())
    record = ExperimentRecord(tmp_path / "run")
    experiment = Experiment(spec, detect_type(spec.argv, tmp_path), record, PlainUI(quiet, quiet))
    result = experiment.run()
    written = json.loads(record.status_path.read_text())
    assert written["finished"] and written["state"] == result.state.value == "completed"
    assert written["check_no"] == result.checks >= 1
    again = status(experiment, pid=written["pid"], now_s=experiment.deadline_s, finished=True)
    assert again["remaining_s"] == 0.0 and again["elapsed_s"] == pytest.approx(60.0)
    assert again["progress"]["total"] == 3  # type: ignore[index]
    assert {k: v for k, v in again.items() if k not in SETTLED} == {
        k: v for k, v in written.items() if k not in SETTLED
    }

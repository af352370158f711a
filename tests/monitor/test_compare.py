"""`code-runner exec compare`: two real runs with different flags, side by side."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from code_runner.monitor.compare import parse_flags
from tests.helpers.monitor import FAST, PY, run_exec, script

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_checks")]

TRAIN = """
import sys
lr = float(sys.argv[sys.argv.index("--lr") + 1])
loss = 1.0
for epoch in range(5):
    loss *= 1 - lr
    print(f"epoch {epoch} loss {loss:.4f} acc {1 - loss:.4f}", flush=True)
"""


def test_flags_as_people_pass_them() -> None:
    argv = ["python", "train.py", "--lr", "0.1", "--seed=3", "--fp16", "--wd", "-1e-4", "-v"]
    assert parse_flags(argv) == {
        "lr": "0.1",
        "seed": "3",
        "fp16": "true",
        "wd": "-1e-4",
        "v": "true",
    }


def test_compare_two_runs_as_table_json_and_csv(tmp_path: Path) -> None:
    name = script(tmp_path, "train.py", TRAIN)
    runs = []
    for lr in ("0.1", "0.5"):
        ran = run_exec(
            tmp_path,
            [*FAST, "--type", "training", "--", PY, name, "--lr", lr],
            run_dir=tmp_path / f"run-{lr}",
        )
        assert ran.code == 0, ran.err
        runs.append(str(ran.run_dir))
    table = run_exec(tmp_path, ["compare", *runs])
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert any(line.startswith("--lr") and "0.1" in line and "0.5" in line for line in lines)
    assert any(line.startswith("state") and line.count("completed") == 2 for line in lines)
    assert any(line.startswith("loss best") for line in lines)
    rows = json.loads(run_exec(tmp_path, ["compare", "--json", *runs]).out)
    assert [r["--lr"] for r in rows] == ["0.1", "0.5"]
    assert rows[0]["loss final"] == pytest.approx(0.9**5, abs=1e-4)
    assert rows[1]["loss best"] == pytest.approx(0.5**5, abs=1e-4)  # lowest loss
    assert rows[1]["acc best"] == pytest.approx(1 - 0.5**5, abs=1e-4)  # highest accuracy
    table_csv = list(
        csv.DictReader(io.StringIO(run_exec(tmp_path, ["compare", "--csv", *runs]).out))
    )
    assert [r["state"] for r in table_csv] == ["completed", "completed"]
    assert table_csv[0]["command"].endswith("--lr 0.1")


def test_compare_of_a_path_that_is_no_run_dir_says_so(tmp_path: Path) -> None:
    ran = run_exec(tmp_path, [*FAST, "--", PY, "-c", "print('ok')"])
    assert ran.code == 0, ran.err
    wrong = run_exec(tmp_path, ["compare", str(ran.run_dir), str(tmp_path / "nope")])
    assert wrong.code == 2
    assert f"not an exec run dir (no status.json): {tmp_path / 'nope'}" in wrong.err
    assert "Traceback" not in wrong.err and "cannot start" not in wrong.err
    bare = run_exec(tmp_path, ["compare"])
    assert bare.code == 2 and "needs the run dirs to compare" in bare.err

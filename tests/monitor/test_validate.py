"""Validate mode: a recorded run re-run for real, and the seed's verdicts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from code_runner.monitor.validate import Verdict, compare_metric, relative_diff
from tests.helpers.monitor import FAST, PY, run_exec, script

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_checks")]

DETERMINISTIC = """
loss = 1.0
for epoch in range(6):
    loss *= 0.8
    print(f"epoch {epoch} loss {loss:.6f}", flush=True)
open("out.csv", "w").write("a,b\\n1,2\\n")
"""
# Seeded noise that is not the same seed twice: the run's counter file changes the seed,
# as a clock or an unseeded worker would; the noise stays under 1 %.
NOISY = """
import os, random
n = int(open("count").read()) if os.path.exists("count") else 0
open("count", "w").write(str(n + 1))
rng = random.Random(n)
loss = 1.0
for epoch in range(6):
    loss *= 0.8
    print(f"epoch {epoch} loss {loss * (1 + rng.uniform(-0.01, 0.01)):.6f}", flush=True)
"""
DRIFTING = """
import os
n = int(open("count").read()) if os.path.exists("count") else 0
open("count", "w").write(str(n + 1))
print(f"epoch 0 loss {0.5 + n} acc 0.9", flush=True)
"""


def _validate(tmp_path: Path, run_dir: Path) -> tuple[int, str, dict[str, Any]]:
    rerun = tmp_path / "rerun"
    ran = run_exec(tmp_path, ["--validate", str(run_dir), "--yes"], run_dir=rerun)
    data = json.loads((rerun / "validation.json").read_text())
    return ran.code, ran.out, data


def test_symmetric_relative_difference_near_zero() -> None:
    assert relative_diff(1e-9, -1e-9) == 2.0  # not divided by one side's tiny value
    assert relative_diff(0.0, 0.0) == 0.0
    assert math.isclose(relative_diff(100.0, 104.0), 4 / 102)
    assert compare_metric("x", 1.0, 1.0).verdict is Verdict.MATCH
    assert compare_metric("x", 1.0, 1.04).verdict is Verdict.WITHIN_TOLERANCE
    assert compare_metric("x", 1.0, 1.06).verdict is Verdict.MISMATCH


def test_a_deterministic_run_is_reproducible(tmp_path: Path) -> None:
    name = script(tmp_path, "train.py", DETERMINISTIC)
    first = run_exec(tmp_path, [*FAST, "--type", "training", "--expect", "out.csv", "--", PY, name])
    assert first.code == 0, first.err
    code, out, data = _validate(tmp_path, first.run_dir)
    assert code == 0, out
    assert data["verdict"] == "REPRODUCIBLE"
    assert [m["verdict"] for m in data["metrics"]] == ["MATCH"]
    assert [o["verdict"] for o in data["outputs"]] == ["MATCH"]
    assert "REPRODUCIBLE" in out and "loss" in out


def test_seeded_noise_is_within_tolerance(tmp_path: Path) -> None:
    name = script(tmp_path, "train.py", NOISY)
    first = run_exec(tmp_path, [*FAST, "--type", "training", "--", PY, name])
    code, out, data = _validate(tmp_path, first.run_dir)
    assert code == 0, out
    metrics = data["metrics"]
    assert [m["verdict"] for m in metrics] == ["WITHIN_TOLERANCE"]
    assert data["verdict"] == "REPRODUCIBLE"


def test_a_drifting_metric_is_partially_reproducible(tmp_path: Path) -> None:
    name = script(tmp_path, "train.py", DRIFTING)
    first = run_exec(tmp_path, [*FAST, "--type", "training", "--", PY, name])
    code, _out, data = _validate(tmp_path, first.run_dir)
    assert code == 1
    assert data["verdict"] == "PARTIALLY_REPRODUCIBLE"
    verdicts = {m["name"]: m["verdict"] for m in data["metrics"]}
    assert verdicts == {"loss": "MISMATCH", "acc": "MATCH"}


def test_validate_refuses_a_command_too(tmp_path: Path) -> None:
    ran = run_exec(tmp_path, ["--validate", str(tmp_path), "--yes", "--", "true"])
    assert ran.code == 2 and "give no command" in ran.err

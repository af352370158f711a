"""Plots people read: train and validation overlaid, a log scale across decades, memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_runner.monitor.figures import families, family_of, wants_log_scale
from tests.helpers.monitor import FAST, PY, run_exec, script

TRAIN = """
import time
for epoch in range(12):
    loss = 10 * 0.5 ** epoch
    print(f"epoch {epoch} loss {loss:.5f} val_loss {loss * 1.2:.5f} acc {1 - loss / 20:.3f}",
          flush=True)
    time.sleep(0.03)
"""


def test_a_metric_and_its_validation_twin_are_one_family() -> None:
    assert family_of("val_loss") == family_of("train/loss") == family_of("loss") == "loss"
    assert families(["loss", "val_loss", "acc", "eval_acc", "lr"]) == {
        "loss": ["loss", "val_loss"],
        "acc": ["acc", "eval_acc"],
        "lr": ["lr"],
    }


def test_log_scale_only_across_two_decades_of_positive_values() -> None:
    assert wants_log_scale([10.0, 0.05])
    assert not wants_log_scale([1.0, 0.5])
    assert not wants_log_scale([10.0, -1.0, 0.01])


@pytest.mark.integration
@pytest.mark.usefixtures("fast_checks")
def test_a_run_plots_loss_with_val_loss_and_memory(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="plots need the `plots` extra (matplotlib)")
    name = script(tmp_path, "train.py", TRAIN)
    ran = run_exec(tmp_path, [*FAST, "--type", "training", "--", PY, name])
    assert ran.code == 0, ran.err
    result = ran.result()
    plots = {m.name: m.plot for m in result.metrics}
    assert plots["loss"] == plots["val_loss"] == "plot-loss.png"
    assert plots["acc"] == "plot-acc.png"
    assert result.memory_plot == "plot-memory.png" and len(result.memory_samples) >= 2
    for png in ("plot-loss.png", "plot-memory.png"):
        assert (ran.run_dir / png).read_bytes()[:4] == b"\x89PNG"
    report = (ran.run_dir / "experiment_result.md").read_text()
    assert report.count("(plot-loss.png)") == 1 and "![memory](plot-memory.png)" in report

"""The checks, one observation at a time, with the facts from DESIGN.md as cases."""

from __future__ import annotations

import pytest

from code_runner.monitor.alerts import AlertKind
from code_runner.monitor.checks import (
    MemoryCheck,
    Observation,
    PlateauCheck,
    ProgressCheck,
    StallCheck,
    metric_mode,
)
from code_runner.monitor.launch import TreeSample
from code_runner.monitor.metrics import Progress

MiB = 1024 * 1024


def obs(n: int, t: float, *, cpu: float = 0.0, rss: int = 10 * MiB, out: int = 0) -> Observation:
    tree = TreeSample(2, cpu, rss, rss // 2, ((1, "python", rss),))
    return Observation(n, t, tree, (("stdout", out, out),))


def test_stall_needs_n_unchanged_checks_and_says_flat_or_rising() -> None:
    check = StallCheck(3)
    assert check.observe(obs(1, 30, out=5)) is None
    assert check.observe(obs(2, 60, out=5)) is None
    assert check.observe(obs(3, 90, out=5)) is None
    alert = check.observe(obs(4, 120, out=5, cpu=0.01))
    assert alert is not None and alert.kind is AlertKind.STALL_SUSPECTED
    assert alert.data["cpu_state"] == "flat" and "likely hung" in alert.detail
    busy = StallCheck(2, python_hint=True)
    busy.observe(obs(1, 10, out=1, cpu=1))
    busy.observe(obs(2, 20, out=1, cpu=9))
    alert = busy.observe(obs(3, 30, out=1, cpu=19))
    assert alert is not None and alert.data["cpu_state"] == "rising"
    assert "busy but silent" in alert.detail and "PYTHONUNBUFFERED" in alert.detail
    assert busy.observe(obs(4, 40, out=2, cpu=20)) is None  # output resumed


def test_memory_baseline_waits_for_warmup() -> None:
    check = MemoryCheck(factor=3, warmup_s=60)
    assert check.observe(obs(1, 30, rss=5 * MiB)) is None  # before warm-up: no baseline
    assert check.observe(obs(2, 60, rss=80 * MiB)) is None  # imports done: baseline
    assert check.baseline_bytes == 40 * MiB and check.measure == "pss"  # PSS where known
    assert check.observe(obs(3, 90, rss=200 * MiB)) is None  # 2.5x: fine
    alert = check.observe(obs(4, 120, rss=300 * MiB))
    assert alert is not None and alert.kind is AlertKind.RESOURCE_ALERT
    assert "PSS 150 MiB" in alert.detail and "3.8x" in alert.detail
    naive = MemoryCheck(factor=3, warmup_s=0)
    naive.observe(obs(1, 30, rss=5 * MiB))
    assert naive.observe(obs(2, 60, rss=80 * MiB)) is not None  # why the warm-up exists


def test_plateau_uses_relative_min_delta_and_patience() -> None:
    check = PlateauCheck(patience=3, min_delta=0.01)
    values = [1.0, 0.8, 0.7]
    assert check.observe("val_loss", values, 1, 1) is None
    values += [0.6995, 0.6990, 0.6989]  # improvements under 1% of |best|
    alert = check.observe("val_loss", values, 2, 2)
    assert alert is not None and alert.kind is AlertKind.METRIC_PLATEAU
    assert alert.data["best"] == 0.7 and alert.data["wait"] == 3
    values.append(0.5)  # a real improvement resets the wait
    assert check.observe("val_loss", values, 3, 3) is None
    acc = PlateauCheck(patience=2, min_delta=0.0)
    assert acc.observe("accuracy", [0.5, 0.6, 0.6, 0.59], 1, 1) is not None  # max mode
    assert metric_mode("val_acc") == "max" and metric_mode("loss") == "min"


def test_progress_rate_eta_and_slow_alert() -> None:
    check = ProgressCheck(slow_ratio=0.5)
    t = 0.0
    for i, done in enumerate([0, 100, 200, 300]):
        t = i * 10.0
        assert check.observe(Progress(done, 1000), obs(i + 1, t)) is None
    assert check.early_rate == 10.0
    assert check.eta_s is not None and abs(check.eta_s - 70) < 1e-6
    alert = None
    so_far = 300.0
    for i in range(4, 12):
        so_far += 10
        alert = check.observe(Progress(so_far, 1000), obs(i + 1, i * 10.0)) or alert
    assert alert is not None and alert.kind is AlertKind.SLOW_PROGRESS
    assert "ETA" in alert.detail
    assert check.rate is not None and check.rate < 5


def test_progress_restarts_on_a_new_bar() -> None:
    check = ProgressCheck(slow_ratio=0.5)
    for i, done in enumerate([0, 50, 100, 150]):
        check.observe(Progress(done, 150), obs(i, i * 1.0))
    check.observe(Progress(0, 80), obs(5, 5.0))
    assert check.early_rate is None and check.total == 80
    assert ProgressCheck(0.5, total_override=500).observe(Progress(1, None), obs(1, 1)) is None


def test_forked_workers_sharing_pages_are_judged_by_pss_not_summed_rss() -> None:
    check = MemoryCheck(factor=3, warmup_s=0)

    def tree(n: int, rss: int, pss: int) -> Observation:
        return Observation(n, n * 30.0, TreeSample(5, 0.0, rss, pss, ()), (("stdout", 0, 0),))

    assert check.observe(tree(1, 400 * MiB, 400 * MiB)) is None  # baseline: one process
    # four DataLoader workers fork: summed RSS 5.4x, PSS 1.5x
    assert check.observe(tree(2, 2160 * MiB, 600 * MiB)) is None
    alert = check.observe(tree(3, 4000 * MiB, 1300 * MiB))
    assert alert is not None and "tree PSS 1300 MiB is 3.2x" in alert.detail
    assert alert.data["measure"] == "PSS"


def test_the_eta_after_a_slowdown_uses_the_recent_rate() -> None:
    check = ProgressCheck(slow_ratio=0.5)
    for n in range(6):  # 100 items per 10 s
        check.observe(Progress(100.0 * n, 10_000), obs(n + 1, 10.0 * n))
    check.observe(Progress(510.0, 10_000), obs(7, 60.0))  # now 10 items per 10 s
    assert check.eta_s is not None
    assert check.eta_s == pytest.approx((10_000 - 510) / 1.0)  # the slow rate, not the EMA

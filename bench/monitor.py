"""What does watching an experiment cost, and how fast is a timeout kill?

Three measurements, each repeated; prints medians and ratios:

1. Per check, for a 50-process tree (bash + 49 sleeps): the monitor's own CPU time and wall
   time for one tree sample (with and without PSS) and for one whole check as the monitor
   loop runs it (sample, output pump, activity stats, checks, status.json). The CPU share at
   the default 30 s interval is that CPU time / 30 s. Target: under 1% of one core.
2. A bare run of a short CPU-bound command against the same command under `exec` (record,
   checks every 0.05 s and at 1 s, collection, report): wall-time medians and ratios.
3. Hard timeout on a 50-process tree with a `setsid` escapee, a double-forked orphan and a
   SIGTERM-ignoring process: time from the first SIGTERM to the last process gone, against
   the target grace + 1 s.

    python bench/monitor.py [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console

from code_runner.monitor import Experiment, ExperimentRecord, PlainUI, build_spec, detect_type
from code_runner.monitor.checks import MemoryCheck, Observation, StallCheck
from code_runner.monitor.launch import launch
from code_runner.monitor.spec import MIN_INTERVAL_ENV
from code_runner.monitor.watch import OutputWatch

TREE = "for i in $(seq 49); do sleep 600 & done; wait"
WORK = "s = 0\nfor i in range(4_000_000): s += i * i\nprint(s)"
NASTY = """
import os, subprocess, time
for i in range(45):
    subprocess.Popen(["sleep", "600"])
subprocess.Popen(["setsid", "sleep", "600"])
subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 600"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
print("tree up", flush=True)
time.sleep(600)
"""


def _quiet_ui() -> PlainUI:
    sink = io.StringIO()
    return PlainUI(Console(file=sink), Console(file=sink))


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def per_check(root: Path, samples: int) -> dict[str, float]:
    """CPU and wall cost of sampling a 50-process tree and of one whole check."""
    out, err = root / "tree.out", root / "tree.err"
    launched = launch(
        ["bash", "-c", TREE],
        cwd=root,
        env=dict(os.environ),
        stdout_path=out,
        stderr_path=err,
    )
    try:
        deadline = time.monotonic() + 10
        while launched.sample(with_pss=False).processes < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        monitored = root / "outputs"
        monitored.mkdir()
        for i in range(100):
            (monitored / f"f{i}.txt").write_text("x")
        watch = OutputWatch(out, err, root, ("outputs",), parse_metrics=True)
        stall, memory = StallCheck(3), MemoryCheck(3.0, 0.0)
        record = ExperimentRecord(root / "record")
        figures: dict[str, list[float]] = {
            k: [] for k in ("rss_cpu", "rss_wall", "pss_cpu", "pss_wall", "check_cpu", "check_wall")
        }
        size = launched.sample(with_pss=False).processes
        for n in range(samples):
            for key, pss in (("rss", False), ("pss", True)):
                c0, w0 = time.process_time(), time.perf_counter()
                launched.sample(with_pss=pss)
                figures[f"{key}_cpu"].append(time.process_time() - c0)
                figures[f"{key}_wall"].append(time.perf_counter() - w0)
            c0, w0 = time.process_time(), time.perf_counter()
            sample = launched.sample(with_pss=True)
            watch.pump()
            obs = Observation(n + 1, float(n), sample, watch.activity())
            stall.observe(obs)
            memory.observe(obs)
            record.write_status({"check_no": n + 1, "rss_bytes": sample.rss_bytes})
            figures["check_cpu"].append(time.process_time() - c0)
            figures["check_wall"].append(time.perf_counter() - w0)
        result = {key: _median_ms(values) for key, values in figures.items()}
        result["tree_processes"] = float(size)
        return result
    finally:
        launched.terminate_tree(1.0)
        launched.close()


def _exec(root: Path, argv: list[str], **options: Any) -> Any:
    spec = build_spec({}, {"command": tuple(argv), "cwd": str(root), **options}, source="bench")
    record = ExperimentRecord(root / f"run-{uuid.uuid4().hex[:8]}")
    return Experiment(spec, detect_type(spec.argv, root), record, _quiet_ui()).run()


def bare_vs_monitored(root: Path, repeat: int) -> dict[str, float]:
    argv = [sys.executable, "-c", WORK]
    bare: list[float] = []
    fast: list[float] = []
    slow: list[float] = []
    for _ in range(repeat):
        w0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        bare.append(time.perf_counter() - w0)
        for interval, bucket in (("0.05", fast), ("1", slow)):
            w0 = time.perf_counter()
            result = _exec(root, argv, interval=interval, type="generic")
            bucket.append(time.perf_counter() - w0)
            assert result.state.value == "completed", result
    b = statistics.median(bare)
    return {
        "bare_s": b,
        "exec_interval_0.05_s": statistics.median(fast),
        "exec_interval_1_s": statistics.median(slow),
        "ratio_0.05": statistics.median(fast) / b,
        "ratio_1": statistics.median(slow) / b,
    }


def timeout_kill(root: Path, repeat: int, grace_s: float) -> dict[str, float]:
    script = root / "nasty.py"
    script.write_text(NASTY)
    gone: list[float] = []
    survivors = 0
    for _ in range(repeat):
        result = _exec(
            root,
            [sys.executable, str(script)],
            timeout="2",
            grace=str(grace_s),
            interval="0.5",
            type="generic",
        )
        assert result.state.value == "timeout", result
        gone.append(result.kill.last_gone_s)
        survivors += len(result.kill.survivors)
    return {
        "grace_s": grace_s,
        "last_gone_median_s": statistics.median(gone),
        "last_gone_max_s": max(gone),
        "target_s": grace_s + 1.0,
        "survivors": float(survivors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault(MIN_INTERVAL_ENV, "0.05")
    with tempfile.TemporaryDirectory(prefix="monitor-bench-") as tmp:
        root = Path(tmp)
        check = per_check(root, args.samples)
        runs = bare_vs_monitored(root, args.repeat)
        kill = timeout_kill(root, max(2, args.repeat // 2), args.grace)
    share = check["check_cpu"] / 1000 / 30.0 * 100
    print(f"per check, {check['tree_processes']:.0f}-process tree (median of {args.samples}):")
    print(
        f"  tree sample, RSS only : {check['rss_cpu']:.2f} ms CPU, {check['rss_wall']:.2f} ms wall"
    )
    print(
        f"  tree sample, with PSS : {check['pss_cpu']:.2f} ms CPU, {check['pss_wall']:.2f} ms wall"
    )
    print(
        f"  whole check           : {check['check_cpu']:.2f} ms CPU, "
        f"{check['check_wall']:.2f} ms wall (incl. 100 file stats, status.json)"
    )
    print(f"  CPU share at the default 30 s interval: {share:.4f}% of one core (target < 1%)")
    print(f"bare vs exec, median of {args.repeat} (a short CPU-bound python command):")
    print(f"  bare                  : {runs['bare_s']:.3f} s")
    print(
        f"  exec, checks at 0.05 s: {runs['exec_interval_0.05_s']:.3f} s "
        f"(ratio {runs['ratio_0.05']:.2f})"
    )
    print(
        f"  exec, checks at 1 s   : {runs['exec_interval_1_s']:.3f} s (ratio {runs['ratio_1']:.2f})"
    )
    print("hard timeout, 50-process tree with escapees and a SIGTERM-ignorer:")
    print(
        f"  last process gone {kill['last_gone_median_s']:.3f} s (median), "
        f"{kill['last_gone_max_s']:.3f} s (max) after SIGTERM; target <= {kill['target_s']:.1f} s;"
        f" survivors {kill['survivors']:.0f}"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"per_check_ms": check, "runs": runs, "kill": kill}, indent=2)
        )


if __name__ == "__main__":
    main()

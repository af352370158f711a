"""Batch throughput against the ideal, and per-item overhead, on the local and Ray engines.

Each item is one cell of an `exec` sweep whose command sleeps `--seconds` (default 2 s), so
an item is the real path: the item function, the slot's resident item process, the cell run
as `code-runner exec` runs it, and the command. Each engine starts with its slots ready (its
resident processes, and on Ray its actors); that start is timed apart (`up s`).
For each engine, in the same run:

* single: `--single` items one after another on one slot; the median item time (driver
  submit to result) is the single-item time, and the per-item overhead is that time minus
  the sleep, and (engine only) minus the item function's own time measured in the worker;
* batch: `--items` items on `--slots` slots; throughput is items per second, and the ideal
  is slots / median single-item time (N slots x the median single-item time, as a rate).

Ray runs on a local Ray that the engine starts (127.0.0.1, `--slots` code_runner_slot) and
stops; its start and stop are timed apart and not counted in the throughput.

    python bench/batch.py [--slots 4] [--items 16] [--seconds 2] [--single 3] [--engines local,ray]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from code_runner.batch.driver import Driver, DriverOptions
from code_runner.batch.engine import EngineOptions
from code_runner.batch.items import load_items
from code_runner.batch.results import ResultsLog
from code_runner.batch.session import make_engine


def sweep(root: Path, count: int, seconds: float) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"sweep-{count}.json"
    path.write_text(
        json.dumps(
            {
                "command": ["sleep", "{s}"],
                "grid": {"i": list(range(count)), "s": [seconds]},
                "cwd": str(root),
            }
        )
    )
    return path


def drive(
    engine_name: str, items: Path, run_dir: Path, slots: int
) -> tuple[float, list[dict[str, Any]]]:
    """(wall seconds for the batch, its result lines); engine start and stop not counted."""
    engine = make_engine(engine_name, EngineOptions(run_dir=run_dir, slots=slots))
    try:
        batch = load_items(items)
        log = ResultsLog(run_dir)
        driver = Driver(batch, engine, log, run_dir, DriverOptions())
        started = time.monotonic()
        lines = driver.run(list(batch.items))
        return time.monotonic() - started, lines
    finally:
        engine.close()


def single(engine_name: str, root: Path, count: int, seconds: float) -> dict[str, float]:
    run_dir = root / f"{engine_name}-single"
    wall, lines = drive(engine_name, sweep(root, count, seconds), run_dir, 1)
    per_item = wall / count
    inner = statistics.median(line["duration_s"] for line in lines)
    return {
        "item_s": per_item,
        "inner_s": inner,
        "overhead_ms": (per_item - seconds) * 1000,
        "engine_overhead_ms": (per_item - inner) * 1000,
    }


def measure(engine_name: str, root: Path, args: argparse.Namespace) -> dict[str, float]:
    started = time.monotonic()
    engine = make_engine(engine_name, EngineOptions(run_dir=root / "probe", slots=args.slots))
    up = time.monotonic() - started
    started = time.monotonic()
    engine.close()
    down = time.monotonic() - started
    one = single(engine_name, root, args.single, args.seconds)
    wall, lines = drive(
        engine_name,
        sweep(root, args.items, args.seconds),
        root / f"{engine_name}-batch",
        args.slots,
    )
    assert all(line["status"] == "passed" for line in lines), lines
    throughput = args.items / wall
    ideal = args.slots / one["item_s"]
    return {
        **one,
        "up_s": up,
        "down_s": down,
        "wall_s": wall,
        "throughput": throughput,
        "ideal": ideal,
        "ratio": throughput / ideal,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--single", type=int, default=3)
    parser.add_argument("--engines", default="local,ray")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crbench-") as tmp:
        root = Path(tmp)
        os.environ.setdefault("CODE_RUNNER_STATE_DIR", str(root / "state"))
        print(
            f"{args.items} items of sleep {args.seconds:g} s on {args.slots} slots "
            f"(load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)"
        )
        print(
            f"{'engine':7} {'item s':>7} {'overhead ms':>12} {'engine ms':>10} "
            f"{'items/s':>8} {'ideal':>7} {'of ideal':>9} {'up s':>6} {'down s':>7}"
        )
        for name in args.engines.split(","):
            r = measure(name, root / name, args)
            print(
                f"{name:7} {r['item_s']:7.2f} {r['overhead_ms']:12.0f} "
                f"{r['engine_overhead_ms']:10.0f} {r['throughput']:8.3f} {r['ideal']:7.3f} "
                f"{r['ratio'] * 100:8.1f}% {r['up_s']:6.1f} {r['down_s']:7.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

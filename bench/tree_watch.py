"""What does watching a work tree during a CLI round cost?

Builds trees of N files (in nested folders, like a source repo), times one `scan` of each
(the median of several), and shows the interval the watch would wait between scans at its
duty bound (scans take at most 5 % of the wall clock), so the CPU cost is bounded whatever
the tree's size. Also times the cheap per-poll path (no scan due).

    python bench/tree_watch.py [--sizes 1000,10000,50000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from code_runner.agents.cli_agents.supervisor import Moment
from code_runner.agents.cli_agents.watch import TreeWatch, WatchLimits, scan
from code_runner.events import NullSink
from code_runner.task.paths import Allowlist


def build(root: Path, count: int) -> None:
    per_dir = 50
    for index in range(count):
        folder = root / f"pkg{index // (per_dir * per_dir)}" / f"mod{(index // per_dir) % per_dir}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index}.py").write_text("x = 1\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    limits = WatchLimits()
    print(f"{'files':>7} {'scan':>9} {'interval':>9} {'cpu share':>9} {'poll (no scan)':>15}")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="tree-watch-") as tmp:
            root = Path(tmp)
            build(root, size)
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                scan(root, limits.max_entries)
                times.append(time.perf_counter() - started)
            cost = statistics.median(times)
            interval = max(limits.scan_interval_s, cost / limits.max_duty)
            watch = TreeWatch(root, Allowlist.parse(["pkg0"]), NullSink(), limits)
            watch.start()
            watch.next_scan_s = 1e9  # no scan due: the path every 0.1 s poll takes
            started = time.perf_counter()
            for _ in range(10_000):
                watch.check(Moment(1.0, 0.0, None))
            poll = (time.perf_counter() - started) / 10_000
            print(
                f"{size:>7} {cost * 1000:7.1f}ms {interval:8.2f}s {cost / interval:8.1%} "
                f"{poll * 1e6:12.1f} us"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

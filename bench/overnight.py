"""What does an overnight run's guard cost: the monitor and its watchdog, at the default
interval, watching 100 processes?

Starts `code-runner exec` (default 30 s checks) on a job of 100 processes (bash + 99
sleeps), lets it run for --seconds, reads the CPU time the monitor and the watchdog used
(from /proc, through psutil), then stops the run with SIGTERM and checks nothing survived.
Target: each under 1 % of one core.

    python bench/overnight.py [--seconds 90] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

JOB = "for i in $(seq 99); do sleep 3600 & done; wait"


def _wait_status(run_dir: Path) -> dict[str, object]:
    for _ in range(600):
        try:
            status = json.loads((run_dir / "status.json").read_text())
            if status.get("watchdog_pid"):
                return dict(status)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise SystemExit("the run did not start")


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        monitor = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "code_runner.cli.exec_cmd",
                "--yes",
                "--timeout",
                "1h",
                "--run-dir",
                str(run_dir),
                "--",
                "bash",
                "-c",
                JOB,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        status = _wait_status(run_dir)
        watched = [psutil.Process(monitor.pid), psutil.Process(int(str(status["watchdog_pid"])))]
        start = [_cpu_s(p) for p in watched]
        began = time.monotonic()
        time.sleep(args.seconds)
        used = [_cpu_s(p) - s for p, s in zip(watched, start, strict=True)]
        wall = time.monotonic() - began
        processes = json.loads((run_dir / "status.json").read_text()).get("processes")
        monitor.send_signal(signal.SIGTERM)
        monitor.wait(timeout=60)
        result = json.loads((run_dir / "result.json").read_text())
    figures = {
        "seconds": round(wall, 1),
        "processes_watched": processes,
        "monitor_cpu_percent": round(used[0] / wall * 100, 3),
        "watchdog_cpu_percent": round(used[1] / wall * 100, 3),
        "survivors": result["kill"]["survivors"],
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

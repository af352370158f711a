"""How long does a cold `code-runner --help` take, against the floor measured in the same run?

Each sample is a fresh process. The floor is `python -c "import click, code_runner"`: the
interpreter, click and the package face, which any click CLI of ours must pay. Runs are
interleaved (floor, ours, floor, ours, ...) so machine noise hits both alike. If a peer CLI
is on PATH (mini-swe-agent's `mini`), its `--help` is measured too. Prints medians and ratios.

    python bench/cli_start.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def _once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    cases = {
        "floor: import click, code_runner": [sys.executable, "-c", "import click, code_runner"],
        "code-runner --help": [sys.executable, "-m", "code_runner", "--help"],
        "code-runner run --help": [sys.executable, "-m", "code_runner", "run", "--help"],
    }
    mini = shutil.which("mini")
    if mini:
        cases["peer: mini --help"] = [mini, "--help"]
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, argv in cases.items():
            samples[name].append(_once(argv))
    floor = statistics.median(samples["floor: import click, code_runner"])
    print(f"{'case':34} {'median':>9} {'x floor':>8}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:34} {median * 1000:7.1f}ms {median / floor:7.2f}x")
    if mini:
        ratio = statistics.median(samples["code-runner --help"]) / statistics.median(
            samples["peer: mini --help"]
        )
        print(f"code-runner --help / mini --help: {ratio:.2f}x (target <= 0.33x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

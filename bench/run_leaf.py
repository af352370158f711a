"""What joining a run's cgroup costs a command, back to back and with the runner idle between
commands (as in a run, where the model's turn comes between two commands).

Moving a process into a cgroup (a write to `cgroup.procs`) takes the kernel's cgroup
threadgroup lock for writing; once no move has happened for a while, that waits for an RCU
grace period. So the cost shows only when commands are apart (`--gap`), not in a tight
loop. Each row times ours and its floor interleaved, with the gap before each call (the gap
is not timed), and prints the medians and their ratio:

- `proc.run` of `true` as a run's command (it joins the run's leaf) against `proc.run` of
  `true` outside a run;
- the join alone: `sh -c 'echo $$ > LEAF/cgroup.procs && exec true'` against
  `sh -c 'exec true'`, both by a bare fork/exec/wait.

    python bench/run_leaf.py [--repeat 40] [--gap-ms 50]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from pathlib import Path

from bench_env import pair, positive_int

from code_runner import proc
from code_runner.proc import tracking


def _row(what: str, ours: float, floor: float) -> None:
    print(
        f"{what:52} {ours * 1000:9.2f} ms {floor * 1000:9.2f} ms {ours / floor:6.2f}x "
        f"{(ours - floor) * 1000:+8.2f} ms",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=positive_int, default=40, help="pairs per row")
    parser.add_argument(
        "--gap-ms", type=positive_int, default=50, help="idle time before each call"
    )
    args = parser.parse_args()
    if tracking.hierarchy() is None:
        print("not measured: no writable cgroup to track runs in here")
        return 0
    env = {k: v for k, v in os.environ.items() if k != proc.RUN_ID_ENV}
    run_id = f"run-leaf-{uuid.uuid4().hex[:8]}"
    in_run = {**env, proc.RUN_ID_ENV: run_id}
    prefix, leaf = tracking.join_argv(run_id, "join")
    assert leaf is not None
    join = [*prefix, "true"]
    hop = ["/bin/sh", "-c", 'exec "$@"', "code-runner-track", "true"]
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
    print(f"{'what':52} {'ours':>12} {'floor':>12} {'ratio':>7} {'over':>11}")
    try:
        for gap_ms in (0, args.gap_ms):
            gap = gap_ms / 1000
            ours, floor = pair(
                lambda: proc.run(["true"], cwd="/", env=in_run, timeout_s=30),
                lambda: proc.run(["true"], cwd="/", env=env, timeout_s=30),
                args.repeat,
                gap,
            )
            _row(f"proc.run of true in a run vs outside, {gap_ms} ms apart", ours, floor)
            ours, floor = pair(
                lambda: subprocess.run(join, check=True),
                lambda: subprocess.run(hop, check=True),
                args.repeat,
                gap,
            )
            _row(f"  the join alone (sh hop), {gap_ms} ms apart", ours, floor)
    finally:
        tracking.end_run(run_id)  # the join's leaf, the commands' spare and the group
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

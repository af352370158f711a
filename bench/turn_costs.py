"""What a turn costs code-runner around its command and its model call, part by part, each
against the way it was done before, measured in the same run (medians):

- the disk budget's check after a sandboxed tool call: the work tree's parts counted again
  (an overlay's upper layer: what changed) against a full count of the workspace (the git
  dir, HOME and TMPDIR as well), on a real overlay workspace after a sandboxed command;
- the transcript's request line at turn N of a round: the messages added since the previous
  request against the whole history, as bytes and as the time to write it;
- a turn's four events on a live record (model turn, tool call, tool result, and the next
  turn's), turns 5 ms apart: the CPU time of the process (the seal's thread included) with
  the seal written once per burst against once per event (`LIVE_SEAL_DELAY_S = 0`).

Needs a root runner for the overlay (else the workspace is a clone and the first row says
so). Where the time of a whole turn goes, and how it compares with mini-swe-agent's, is
`vs_mini.py` and `speed.py --only turn`.

    python bench/turn_costs.py [--repeat 200] [--turns 24,100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import overhead  # bench/overhead.py: the calc repo
from bench_env import file_counts, positive_int

from code_runner import proc, sandbox, workspace
from code_runner.agents.model.transcript import Transcript
from code_runner.events import EventKind
from code_runner.record import RunRecord, RunState, seal
from code_runner.repo import git

OWNER = (2_000_000_911, 2_000_000_911)


def _median_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - started) / 1000)
    return statistics.median(times)


def _row(what: str, ours: float, before: float, unit: str) -> None:
    print(f"{what:58} {ours:10.1f} {unit:3} {before:10.1f} {unit:3} {ours / before:6.2f}x")


def row_disk_check(root: Path, files: int, repeat: int) -> None:
    source = git.open_source(overhead.make_repo(root / "disk", files))
    ws = workspace.create(source, source.out("rev-parse", "HEAD"), run_id="bench", owner=OWNER)
    try:
        session = sandbox.open_session(
            ws,
            env=ws.env(),
            network=False,
            limits=sandbox.DEFAULT_LIMITS,
            cpu_s=60,
            name="turn-costs",
            identity=sandbox.SandboxUser(*OWNER),
        )
        with session:
            script = "sed -i 's/a - b/a + b/' calc.py && echo new > new.txt"
            ran = session.run(proc.shell_argv(script), cwd=ws.work_tree, env=ws.env(), timeout_s=60)
            if not ran.ok:
                raise SystemExit(f"the sandboxed command failed: {ran.stderr}")
            ws.written_bytes()  # the full count a round starts from
            tree = _median_us(lambda: ws.written_bytes(tree_only=True), repeat)
            full = _median_us(ws.written_bytes, repeat)
        label = f"disk check after a sandboxed call, {files} files ({ws.kind})"
        _row(label, tree, full, "us")
    finally:
        ws.release()


def row_transcript(root: Path, turns: int, repeat: int) -> None:
    """A round of `turns` turns, each adding a tool call and a 2 KB result; the request line
    of its last turn, written with the added messages and with the whole history."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s" * 2000},
        {"role": "user", "content": "u" * 2000},
    ]
    for n in range(turns - 1):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "run_command"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 2000})
    before = messages[:-2]
    sizes: dict[str, float] = {}
    times: dict[str, float] = {}
    for kind, previous in (("added", before), ("whole", [])):
        path = root / f"{kind}-{turns}.transcript.jsonl"
        transcript = Transcript(path)

        def last_request(t: Transcript = transcript, previous: list[Any] = previous) -> None:
            t._sent = list(previous)  # the round's previous request (none: the whole history)
            t.write("request", round=1, turn=turns, attempt=1, body={"messages": messages})

        last_request()
        sizes[kind] = len(path.read_bytes().splitlines()[-1]) / 1024
        times[kind] = _median_us(last_request, repeat)
        transcript.close()
    what = f"transcript request line at turn {turns}: added vs whole"
    _row(what, sizes["added"], sizes["whole"], "KiB")
    _row("  the time to write it", times["added"], times["whole"], "us")


def row_events(root: Path, turns: int) -> None:
    def run(delay: float, out: Path) -> float:
        seal.LIVE_SEAL_DELAY_S = delay
        record = RunRecord.open(out, "t", "run", max_rounds=1)
        record.transition(RunState.PREPARING, step="prepare")
        cpu = []
        for n in range(turns):
            started = time.process_time_ns()
            for kind in (EventKind.MODEL_TURN, EventKind.TOOL_CALL, EventKind.TOOL_RESULT):
                record.emit(kind, turn=n, name="run_command", args={"command": f"true {n}"})
            time.sleep(0.005)  # the command and the next model call
            cpu.append((time.process_time_ns() - started) / 1000)
        record.close()
        return statistics.median(cpu)

    delay = seal.LIVE_SEAL_DELAY_S
    ours, before = [], []
    try:
        for i in range(3):  # interleaved
            ours.append(run(delay, root / f"burst{i}"))
            before.append(run(0.0, root / f"each{i}"))
    finally:
        seal.LIVE_SEAL_DELAY_S = delay
    what = "a turn's events: CPU, one seal write per burst vs per event"
    _row(what, statistics.median(ours), statistics.median(before), "us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=positive_int, default=200)
    parser.add_argument("--turns", type=file_counts, default=[24, 100], help="e.g. 24,100")
    parser.add_argument("--files", type=file_counts, default=[100, 5000], help="e.g. 100,5000")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"{'what':58} {'ours':>14} {'before/full':>14} {'ratio':>7}")
    with tempfile.TemporaryDirectory(prefix="turn-costs-") as scratch:
        root = Path(scratch)
        os.environ["CODE_RUNNER_STATE_DIR"] = str(root / "state")
        for files in args.files:
            row_disk_check(root / f"f{files}", files, args.repeat)
        for turns in args.turns:
            row_transcript(root, turns, args.repeat)
        row_events(root, 60)
    after = os.getloadavg()
    print(f"load average: {load[0]:.2f} at the start, {after[0]:.2f} at the end (1 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The run's `timeout_s` bounds everything in it: a tool call asking for more time than is
left, a DoD that sleeps, and the release. A 5 s run whose agent runs `sleep 30` and whose
DoD sleeps ends within the timeout and a small grace, is recorded as a timeout, and leaves
no process behind. An agent CLI's round is cut at the run's timeout exactly, however little
time is left when it starts."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from code_runner import sandbox
from tests.helpers.attacks import MODES, attack, call, cmd, dump, held
from tests.helpers.tasks import FIXED_BOTH, calc_repo, fingerprint, run_cli, write_task

pytestmark = pytest.mark.integration

TIMEOUT_S = 5.0
GRACE_S = 4.0  # from the deadline to the cut command's end: the kill of its tree
# The whole run adds start-up, workspace, snapshots and release, which a busy machine
# stretches; it must still end far below every limit but the run's own: the DoD's 120 s,
# the tool call's 600 s and the sleeps' 3,000 s and more.
SLACK_S = 40.0


def _sleepers(seconds: str) -> list[psutil.Process]:
    found = []
    for candidate in psutil.process_iter(["cmdline"]):
        try:
            argv = candidate.info["cmdline"] or []
            sleeping = seconds in argv and any(a.endswith("sleep") for a in argv)
            if sleeping and candidate.status() != psutil.STATUS_ZOMBIE:
                found.append(candidate)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("mode", MODES)
def test_a_slow_agent_and_a_slow_dod_end_at_the_run_timeout(tmp_path: Path, mode: str) -> None:
    if mode == "required" and not sandbox.probe().ok:
        pytest.skip("no working sandbox here")
    agent_sleep = f"3{os.getpid() % 100:02d}{len(mode)}"  # a number no other test sleeps
    dod_sleep = f"4{os.getpid() % 100:02d}{len(mode)}"
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    calls = [
        call("write_file", path="calc.py", content=FIXED_BOTH),
        cmd(f"sleep {agent_sleep}", timeout_s=600),
        cmd("echo after the deadline"),
    ]
    started = time.monotonic()
    run = attack(
        tmp_path,
        calls,
        sandbox=mode,
        source=source,
        # fails at once on base; once fixed, it would pass after a long sleep
        command=f"grep -q 'a [*] b' calc.py && sleep {dod_sleep}",
        timeout_s=TIMEOUT_S,
    )
    took = time.monotonic() - started
    held(f"{mode}: the run ended near its timeout ({took:.1f} s)", took < TIMEOUT_S + SLACK_S)
    held(f"{mode}: recorded as a timeout", run.result["reason"] == "run_timeout", dump(run))
    held(f"{mode}: not recorded as passed", run.result["status"] == "failed")
    commands = [r for r in run.tool_results if r["name"] == "run_command"]
    held(f"{mode}: the sleep was cut at the deadline", commands[0]["error"] == "TIMEOUT")
    # the sleep ended at the deadline (or at once, if the run's start-up outlasted it)
    sleep_call, sleep_end = [e for e in run.events if e.get("name") == "run_command"][:2]
    cut_by = max(TIMEOUT_S, sleep_call["elapsed_s"]) + GRACE_S
    held(f"{mode}: cut at the deadline", sleep_end["elapsed_s"] < cut_by, sleep_end)
    held(f"{mode}: no command starts after it", "not run" in commands[1]["summary"])
    held(f"{mode}: the agent's sleep is gone", not _sleepers(agent_sleep))
    held(f"{mode}: the DoD's sleep is gone", not _sleepers(dod_sleep))
    held(f"{mode}: the source is unchanged", fingerprint(source) == before)
    held(f"{mode}: recorded near the timeout", run.result["duration_s"] < TIMEOUT_S + SLACK_S)


CLI_TIMEOUT_S = 8.0
CLI_ROUNDS = 6
# Each round reads the run's events. A round that started with under a second left sleeps
# far past the run's end: the runner must cut it at the timeout. An earlier round ends so
# that the next one starts about half a second before the timeout, by the longest gap
# between rounds seen so far (the first round ends at once, to measure one): however slow
# the machine, a round then starts with less than a second left.
CLI_AGENT = """
import datetime, json, pathlib, sys, time
events, timeout_s = pathlib.Path(sys.argv[1]), float(sys.argv[2])
found = [json.loads(line) for line in events.read_text().splitlines()]
starts = [e for e in found if e["kind"] == "cli_started"]
ends = [e for e in found if e["kind"] == "cli_finished"]
if timeout_s - starts[-1]["elapsed_s"] < 1.0:
    time.sleep(30)  # the late round: far past the run's end
gaps = [s["elapsed_s"] - e["elapsed_s"] for s, e in zip(starts[1:], ends)]
if gaps:
    last = found[-1]
    written = datetime.datetime.fromisoformat(last["ts"].replace("Z", "+00:00")).timestamp()
    now = last["elapsed_s"] + time.time() - written
    time.sleep(max(0.0, timeout_s - 0.5 - max(gaps) - now))
print(json.dumps({"type": "done"}), flush=True)
"""


def test_a_cli_round_that_starts_just_before_the_timeout_ends_at_it(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    agent = tmp_path / "agent.py"
    agent.write_text(CLI_AGENT)
    events = tmp_path / "out/fix-calc.events.jsonl"
    words = [sys.executable, str(agent), str(events), str(CLI_TIMEOUT_S)]
    spec = write_task(
        tmp_path,
        source,
        [[]] * CLI_ROUNDS,
        command="false",
        sandbox="off",
        backend="command:-- " + " ".join(words),
        timeout_s=CLI_TIMEOUT_S,
    )
    ran = run_cli("run", str(spec))
    found = [json.loads(line) for line in events.read_text().splitlines()]
    rounds = [e for e in found if e["kind"] == "cli_finished"]
    result = json.loads((tmp_path / "out/fix-calc.result.json").read_text())
    held("cli deadline: recorded as a timeout", result["reason"] == "run_timeout", ran.stderr)
    held("cli deadline: exit 124, as the help says", ran.returncode == 124, ran.returncode)
    # the late round's limit is the time left (under a second here), never a minimum of 1 s
    cut = [re.findall(r"longer than ([0-9.]+) s", e["detail"]) for e in rounds]
    limits = [float(hit[0]) for hit in cut if hit]
    late = [limit for limit in limits if limit >= 1.0]
    held("cli deadline: a late round gets no minimum of time", bool(limits) and late == [], rounds)
    ends = [e["elapsed_s"] for e in rounds]
    held("cli deadline: no round outlives the run", max(ends) < CLI_TIMEOUT_S + 0.5, ends)

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
GRACE_S = 4.0  # workspace, snapshot and release around the bounded parts


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
    held(f"{mode}: the run ended near its timeout ({took:.1f} s)", took < TIMEOUT_S + GRACE_S)
    held(f"{mode}: recorded as a timeout", run.result["reason"] == "run_timeout", dump(run))
    held(f"{mode}: not recorded as passed", run.result["status"] == "failed")
    commands = [r for r in run.tool_results if r["name"] == "run_command"]
    held(f"{mode}: the sleep was cut at the deadline", commands[0]["error"] == "TIMEOUT")
    held(f"{mode}: no command starts after it", "not run" in commands[1]["summary"])
    held(f"{mode}: the agent's sleep is gone", not _sleepers(agent_sleep))
    held(f"{mode}: the DoD's sleep is gone", not _sleepers(dod_sleep))
    held(f"{mode}: the source is unchanged", fingerprint(source) == before)
    held(f"{mode}: recorded within the timeout", run.result["duration_s"] < TIMEOUT_S + GRACE_S)


CLI_TIMEOUT_S = 4.0
CLI_AGENT = """
import json, pathlib, sys, time
events, mark, timeout_s = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), float(sys.argv[3])
if mark.exists():
    time.sleep(30)  # round 2: far past the run's end
else:
    mark.touch()  # round 1: end a moment before the run's timeout
    now = json.loads(events.read_text().splitlines()[-1])["elapsed_s"]
    time.sleep(max(0.0, timeout_s - 1.0 - now))
print(json.dumps({"type": "done"}), flush=True)
"""


def test_a_cli_round_that_starts_just_before_the_timeout_ends_at_it(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    agent = tmp_path / "agent.py"
    agent.write_text(CLI_AGENT)
    events = tmp_path / "out/fix-calc.events.jsonl"
    words = [sys.executable, str(agent), str(events), str(tmp_path / "mark"), str(CLI_TIMEOUT_S)]
    spec = write_task(
        tmp_path,
        source,
        [[], []],
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
    limits = [float(re.findall(r"longer than ([0-9.]+) s", e["detail"])[0]) for e in rounds[1:]]
    late = [limit for limit in limits if limit >= 1.0]
    held("cli deadline: a late round gets no minimum of time", bool(limits) and late == [], rounds)
    ends = [e["elapsed_s"] for e in rounds]
    held("cli deadline: no round outlives the run", max(ends) < CLI_TIMEOUT_S + 0.5, ends)

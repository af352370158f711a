"""The bytes a run may write to its workspace (work tree, git dir, HOME, TMPDIR) are bounded
by `limits.disk_mb`: an agent that writes past it ends the run with `disk_budget`, a message
that names the limit, and no further tool call; the workspace is removed and the source is
unchanged. Files written in the work tree, in HOME (without the sandbox) and by the DoD all
count. A single command that keeps writing is killed while it runs, soon after it passes the
budget, not when it ends."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from code_runner import sandbox
from tests.helpers.attacks import MODES, attack, call, cmd, dump, held
from tests.helpers.tasks import FIXED_BOTH, calc_repo, fingerprint, write_task
from tests.security.unprivileged import Nobody, nobody

__all__ = ["nobody"]  # a fixture

pytestmark = pytest.mark.integration

LIMITS = {"disk_mb": 5}
WRITERS = {
    "work tree": "head -c 20000000 /dev/zero > calc.bin",
    "many small files": "mkdir -p d && for i in $(seq 1 2000); do head -c 4096 /dev/zero "
    "> d/$i; done",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", WRITERS)
def test_writing_past_the_disk_budget_ends_the_run(tmp_path: Path, mode: str, where: str) -> None:
    if mode == "required" and not sandbox.probe().ok:
        pytest.skip("no working sandbox here")
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    calls = [cmd(WRITERS[where]), call("write_file", path="calc.py", content=FIXED_BOTH)]
    run = attack(tmp_path, calls, sandbox=mode, source=source, limits=LIMITS)
    held(f"{mode}/{where}: the run ended on its budget", run.result["reason"] == "disk_budget")
    held(f"{mode}/{where}: not passed", run.result["status"] == "failed", dump(run))
    held(f"{mode}/{where}: the message names the limit", "disk_mb = 5" in run.result["error"])
    held(f"{mode}/{where}: no call after it", len(run.tool_results) == 1, dump(run))
    held(f"{mode}/{where}: the source is unchanged", fingerprint(source) == before)


def test_writing_to_home_counts_without_the_sandbox(tmp_path: Path) -> None:
    # (in the sandbox HOME is a tmpfs of tmp_mb per command, gone after it)
    source = calc_repo(tmp_path)
    calls = [
        cmd('head -c 20000000 /dev/zero > "$HOME/cache.bin"'),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox="off", source=source, limits=LIMITS)
    held("writes to HOME end the run", run.result["reason"] == "disk_budget", dump(run))
    held("no call after it", len(run.tool_results) == 1, dump(run))


def test_the_dod_writing_past_the_budget_ends_the_run(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    calls = [call("write_file", path="calc.py", content=FIXED_BOTH)]
    command = "grep -q 'a [*] b' calc.py && head -c 20000000 /dev/zero > out.bin"
    run = attack(tmp_path, calls, sandbox="off", source=source, limits=LIMITS, command=command)
    held("the DoD's writes end the run", run.result["reason"] == "disk_budget", dump(run))


def test_a_run_within_its_budget_passes(tmp_path: Path) -> None:
    calls = [
        cmd("head -c 1000000 /dev/zero > scratch.bin"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox="off", limits=LIMITS)
    assert run.result["status"] == "passed", dump(run)


ENDLESS = "i=0; while :; do head -c 1000000 /dev/zero > w$i; i=$((i+1)); done"


@pytest.mark.parametrize("mode", MODES)
def test_one_command_writing_without_end_is_killed_as_it_passes_the_budget(
    tmp_path: Path, mode: str
) -> None:
    if mode == "required" and not sandbox.probe().ok:
        pytest.skip("no working sandbox here")
    calls = [cmd(ENDLESS, timeout_s=120), call("write_file", path="calc.py", content=FIXED_BOTH)]
    run = attack(tmp_path, calls, sandbox=mode, limits=LIMITS)
    details = run.tool_results[0]["details"]
    held(f"{mode}/endless: the run ended on its budget", run.result["reason"] == "disk_budget")
    held(
        f"{mode}/endless: the command was killed mid-run, long before its timeout",
        details["duration_s"] < 30,
        dump(run),
    )
    held(f"{mode}/endless: no call after it", len(run.tool_results) == 1, dump(run))


@pytest.mark.parametrize("mode", MODES)
def test_an_agent_cli_writing_past_the_budget_is_stopped_during_its_round(
    tmp_path: Path, mode: str
) -> None:
    """The `command:` backend stands for any agent CLI: it writes without the toolbox. The
    workspace it filled is removed (`attack` checks that)."""
    if mode == "required" and not sandbox.probe().ok:
        pytest.skip("no working sandbox here")
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    backend = f"command:timeout_s=120 idle_timeout_s=120 -- sh -c {shlex.quote(ENDLESS)}"
    run = attack(tmp_path, [], sandbox=mode, source=source, limits=LIMITS, backend=backend)
    finished = [e for e in run.events if e["kind"] == "cli_finished"]
    held(f"{mode}/cli: the run ended on its budget", run.result["reason"] == "disk_budget")
    held(f"{mode}/cli: the message names the limit", "disk_mb = 5" in run.result["error"])
    held(
        f"{mode}/cli: the round was stopped on its budget, long before its timeout",
        finished[-1]["ending"] == "disk_budget" and finished[-1]["duration_s"] < 30,
        finished,
    )
    held(f"{mode}/cli: the source is unchanged", fingerprint(source) == before)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("writer", ["command", "cli"])
def test_a_runner_that_is_not_root_stops_a_writer_at_the_budget(
    nobody: Nobody, mode: str, writer: str
) -> None:
    """The same budget for uid 65534: a tool call and an agent CLI round that write without
    end are each stopped soon after they pass it, and the source is unchanged."""
    if mode == "required" and not sandbox.probe().ok:
        pytest.skip("no working sandbox here")
    source = calc_repo(nobody.root)
    if writer == "command":
        rounds = [
            [cmd(ENDLESS, timeout_s=120), call("write_file", path="calc.py", content=FIXED_BOTH)]
        ]
        backend = "scripted:fix-calc.script.json"
    else:
        rounds = [[]]
        backend = f"command:timeout_s=120 idle_timeout_s=120 -- sh -c {shlex.quote(ENDLESS)}"
    spec = write_task(
        nobody.root,
        source,
        rounds,
        command="grep -q 'a [*] b' calc.py",
        sandbox=mode,
        limits=LIMITS,
        backend=backend,
    )
    nobody.own()
    before = fingerprint(source)
    done = nobody.run(spec, timeout=240)
    text = done.stdout + done.stderr
    result = nobody.result()
    name = f"nobody/{mode}/{writer}"
    held(f"{name}: the run ended on its budget", result["reason"] == "disk_budget", text[-2000:])
    held(f"{name}: exit 1, no traceback", done.returncode == 1 and "Traceback" not in text, text)
    held(f"{name}: the message names the limit", "disk_mb = 5" in result["error"], result)
    events = nobody.events()
    if writer == "command":
        ran = [e for e in events if e["kind"] == "tool_result"]
        held(f"{name}: one call, killed mid-run", len(ran) == 1, ran)
    else:
        finished = [e for e in events if e["kind"] == "cli_finished"]
        held(
            f"{name}: the round was stopped on its budget, long before its timeout",
            finished[-1]["ending"] == "disk_budget" and finished[-1]["duration_s"] < 30,
            finished,
        )
    held(f"{name}: the workspace is gone", not any(nobody.state.rglob("workspaces/*")))
    held(f"{name}: the source is unchanged", fingerprint(source) == before)

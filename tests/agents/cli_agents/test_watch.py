"""Live supervision of a CLI round: scope expansion at once, repeating failures, and no
progress (advisory), with real programs writing into a real work tree.

The "agent" is a small Python program run by the `command` backend (the same supervisor
as Codex and Claude Code); repeating failures come from the real Codex and Claude Code
CLIs' events.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from code_runner.agents.cli_agents.supervisor import Moment
from code_runner.agents.cli_agents.watch import (
    FailureCounter,
    TreeWatch,
    WatchLimits,
    changed,
    scan,
)
from code_runner.events import EventKind, ListSink
from code_runner.task.paths import Allowlist
from code_runner.testing import anthropic_messages as msgs
from code_runner.testing import responses_api as resp
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.agent_clis import FIXED, CliRun, backend, prepare, run, success_block
from tests.helpers.tasks import run_cli

PY = sys.executable

AGENT = r"""
import pathlib, sys, time
mode = sys.argv[1]
fixed = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
if mode == "scope":
    pathlib.Path("notes.txt").write_text("outside the owned paths\n")
    pathlib.Path("__pycache__").mkdir(exist_ok=True)
    pathlib.Path("__pycache__/x.pyc").write_text("ignored by git\n")
    for _ in range(40):  # keeps working: 4 s
        print("working", flush=True)
        time.sleep(0.1)
    pathlib.Path("calc.py").write_text(fixed)
    print("RESULT_STATUS: SUCCESS\nCHANGED_FILES: calc.py")
elif mode == "chatty":
    for _ in range(30):  # 3 s of output, no change to the tree
        print("thinking", flush=True)
        time.sleep(0.1)
    pathlib.Path("calc.py").write_text(fixed)
    print("RESULT_STATUS: SUCCESS\nCHANGED_FILES: calc.py")
"""


def _command(root: Path, mode: str, *options: str) -> str:
    agent = root / "agent.py"
    agent.write_text(AGENT)
    return f"command:{' '.join(options)} -- {shlex.join([PY, str(agent), mode])}"


def _scoped(root: Path, mode: str, on_scope: str | None, *options: str) -> CliRun:
    cli_run = prepare(root, _command(root, mode, "idle_timeout_s=30", *options))
    if on_scope:
        spec = json.loads(cli_run.spec_path.read_text())
        spec["on_scope"] = on_scope
        cli_run.spec_path.write_text(json.dumps(spec))
    return run(cli_run)


def _of(cli_run: CliRun, kind: str) -> list[dict[str, Any]]:
    return [e for e in cli_run.events() if e["kind"] == kind]


def test_a_scan_sees_writes_and_skips_git(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("x")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.txt").write_text("1")
    before = scan(tmp_path, 100)
    assert list(before) == ["a/b.txt"]
    (tmp_path / "a" / "b.txt").write_text("22")
    (tmp_path / "c.txt").write_text("new")
    assert changed(before, scan(tmp_path, 100)) == ["a/b.txt", "c.txt"]


def test_the_same_failing_command_three_times_is_a_repeating_failure() -> None:
    sink = ListSink()
    counter = FailureCounter(sink, repeat_failures=3)
    for ok in (False, True, False, False):
        counter.emit(EventKind.TOOL_CALL, name="codex:command", command="pytest -x")
        counter.emit(EventKind.TOOL_RESULT, name="codex:command", ok=ok, error="exit 1")
    counter.emit(EventKind.TOOL_CALL, name="codex:command", command="make")
    counter.emit(EventKind.TOOL_RESULT, name="codex:command", ok=False, error="exit 2")
    found = [data for kind, data in sink.events if kind is EventKind.REPEATING_FAILURE]
    assert found == [{"command": "pytest -x", "times": 3, "advisory": True, "error": "exit 1"}]


@pytest.mark.integration
def test_a_write_outside_the_owned_paths_is_reported_at_once_and_the_round_goes_on(
    tmp_path: Path,
) -> None:
    cli_run = _scoped(tmp_path, "scope", None)
    assert cli_run.proc.returncode == 0, cli_run.output()
    found = _of(cli_run, "scope_expansion")
    assert [e["paths"] for e in found] == [["notes.txt"]]  # __pycache__ is ignored by git
    assert found[0]["action"] == "warn"
    # reported at once: the agent still had most of its 4 s of work ahead (both times count
    # from the round's start, so the agent's start-up, slow on a busy machine, is in each)
    finished = _of(cli_run, "cli_finished")[-1]
    assert found[0]["elapsed_s"] < finished["duration_s"] - 2.0, (found[0], finished)
    assert "scope expansion" in cli_run.output() and "notes.txt" in cli_run.output()
    result = cli_run.result()
    assert result["status"] == "passed"
    assert [d["path"] for d in result["dropped_changes"]] == ["notes.txt"]
    watched = run_cli("watch", str(cli_run.out), "--timeout", "5")
    assert "scope expansion" in watched.stdout and "notes.txt" in watched.stdout
    assert finished["tree_watch"]["scans"] >= 2


@pytest.mark.integration
def test_on_scope_stop_ends_the_round_at_the_first_write_outside(tmp_path: Path) -> None:
    cli_run = _scoped(tmp_path, "scope", "stop")
    finished = _of(cli_run, "cli_finished")[-1]
    assert finished["ending"] == "scope_expansion" and finished["duration_s"] < 30
    # cut at the first write: the agent never got to the fix it writes after 4 s of work
    assert "calc.py" not in cli_run.patch()
    assert _of(cli_run, "scope_expansion")[0]["action"] == "stop"
    result = cli_run.result()
    assert result["status"] == "failed" and "on_scope: stop" in (result["error"] or "")
    assert "notes.txt" not in cli_run.patch() and cli_run.source_unchanged()


@pytest.mark.integration
def test_output_with_no_change_to_the_tree_is_no_progress_and_never_kills(
    tmp_path: Path,
) -> None:
    cli_run = _scoped(tmp_path, "chatty", None, "no_progress_s=1")
    assert cli_run.proc.returncode == 0, cli_run.output()
    found = _of(cli_run, "no_progress")
    assert len(found) == 1 and found[0]["advisory"] is True
    assert "no progress" in cli_run.output()
    assert _of(cli_run, "cli_finished")[-1]["ending"] == "exited"
    assert cli_run.result()["status"] == "passed"


@pytest.mark.e2e
def test_codex_running_the_same_failing_command_is_a_repeating_failure(
    tmp_path: Path, codex: str
) -> None:
    failing = "python3 -c 'import sys; sys.exit(\"still broken\")'"
    steps = [
        resp.shell(failing),
        resp.shell(failing),
        resp.shell(failing),
        resp.write_file("calc.py", FIXED),
        resp.say(success_block()),
    ]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("codex-cli", server.base_url)))
    assert cli_run.proc.returncode == 0, cli_run.output()
    found = _of(cli_run, "repeating_failure")
    assert len(found) == 1 and found[0]["times"] == 3 and "still broken" in found[0]["command"]
    assert "repeating failure" in cli_run.output()
    assert cli_run.result()["status"] == "passed"


@pytest.mark.e2e
def test_claude_code_running_the_same_failing_command_is_a_repeating_failure(
    tmp_path: Path, claude: str
) -> None:
    """Claude Code's Bash calls carry no command field of their own: the same call (tool
    and input) failing three times is the repeating failure, and a different one is not."""
    failing = "python3 -c 'import sys; sys.exit(\"still broken\")'"
    steps = [
        msgs.bash(failing),
        msgs.bash("python3 -c 'import sys; sys.exit(1)'"),
        msgs.bash(failing),
        msgs.bash(failing),
        *msgs.write_file("calc.py", FIXED),
        msgs.say(success_block()),
    ]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("claude-cli", server.origin)))
    assert cli_run.proc.returncode == 0, cli_run.output()
    found = _of(cli_run, "repeating_failure")
    assert len(found) == 1 and found[0]["times"] == 3, found
    assert "claude:Bash" in found[0]["command"] and "still broken" in found[0]["command"]
    assert "repeating failure" in cli_run.output()
    assert cli_run.result()["status"] == "passed"


def test_the_watch_keeps_its_cost_bounded_and_gives_up_on_a_huge_tree(tmp_path: Path) -> None:
    for index in range(200):
        (tmp_path / f"f{index}.txt").write_text("x")
    sink = ListSink()
    limits = WatchLimits(scan_interval_s=0.0, max_duty=0.001)
    watch = TreeWatch(tmp_path, Allowlist.parse(["f0.txt"]), sink, limits)
    watch.start()
    watch.check(Moment(0.0, 0.0, None))
    assert watch.scans == 2 and watch.last_scan_s > 0
    assert watch.next_scan_s >= watch.last_scan_s / 0.001  # waits 1000x what the scan took
    small = TreeWatch(tmp_path, Allowlist.parse(["f0.txt"]), sink, WatchLimits(max_entries=50))
    small.start()
    assert small.snapshot is None and small.stopped_watching
    (tmp_path / "f1.txt").write_text("changed")
    assert small.check(Moment(5.0, 0.0, None)) is None
    kinds = [kind for kind, _ in sink.events]
    assert EventKind.AGENT_WARNING in kinds and EventKind.SCOPE_EXPANSION not in kinds

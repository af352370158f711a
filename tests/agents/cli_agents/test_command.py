"""The `command` backend: any program as an agent, under the same bounds as the agent CLIs.

The "agent" here is a small Python program (real processes, real files): it reads the
contract prompt, edits the workspace, and prints a RESULT block, or misbehaves in the ways
agent CLIs are known to (waiting for an approval, going silent, leaving daemons, ending
without its final event).
"""

from __future__ import annotations

import json
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.agent_clis import CliRun, leftovers, prepare, run

pytestmark = pytest.mark.integration

PY = sys.executable

AGENT = r"""
import json, os, pathlib, subprocess, sys, time
mode, marker = sys.argv[1], sys.argv[2]
MUL = "def mul(a, b):\n    return a + b"
prompt = pathlib.Path(os.environ["CODE_RUNNER_PROMPT_FILE"]).read_text()
def daemon():
    # a grandchild in its own session, as a CLI's background helper would be
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker],
                     start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if mode == "fix":
    assert "RESULT_STATUS" in prompt and "`calc.py`" in prompt, prompt
    round_no = int(os.environ["CODE_RUNNER_ROUND"])
    source = pathlib.Path("calc.py").read_text()
    if round_no == 1:  # a first attempt that fixes only add
        pathlib.Path("calc.py").write_text(source.replace("a - b", "a + b"))
        print("RESULT_STATUS: PARTIAL\nCHANGED_FILES: calc.py")
    else:
        assert "previous round did not pass" in prompt and "mul(2, 3) should be 6" in prompt
        pathlib.Path("calc.py").write_text(source.replace(MUL, MUL.replace("+", "*")))
        print("Fixed both.\nRESULT_STATUS: SUCCESS\nCHANGED_FILES: calc.py\nOPEN_DECISIONS: none")
elif mode == "approval":
    daemon()
    print("Planning the change...", flush=True)
    print("Waiting for approval to run `rm -rf build`", flush=True)
    time.sleep(300)
elif mode == "silent":
    daemon()
    print("starting", flush=True)
    time.sleep(300)
elif mode == "no-final-event":
    print(json.dumps({"type": "progress", "step": 1}), flush=True)
elif mode == "final-event":
    fixed = pathlib.Path("calc.py").read_text().replace("a - b", "a + b")
    pathlib.Path("calc.py").write_text(fixed.replace(MUL, MUL.replace("+", "*")))
    print(json.dumps({"type": "done"}), flush=True)
    sys.exit(3)
"""


def _agent(root: Path) -> Path:
    path = root / "agent.py"
    path.write_text(AGENT)
    return path


def _backend(root: Path, mode: str, marker: str, *options: str) -> str:
    words = [PY, str(_agent(root)), mode, marker]
    return f"command:{' '.join(options)} -- {shlex.join(words)}"


def _finished(cli_run: CliRun) -> dict[str, Any]:
    found = [e for e in cli_run.events() if e["kind"] == "cli_finished"]
    assert found
    return found[-1]


def test_a_program_fixes_the_bug_in_two_rounds_with_the_verdict_in_between(
    tmp_path: Path,
) -> None:
    marker = uuid.uuid4().hex
    backend = _backend(tmp_path, "fix", marker)
    cli_run = run(prepare(tmp_path, backend, max_rounds=2))
    assert cli_run.proc.returncode == 0, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "passed" and result["rounds"] == 2
    assert [c["path"] for c in result["changed_files"]] == ["calc.py"]
    assert result["result_contract"]["claimed_status"] == "SUCCESS"
    assert result["result_contract"]["mismatch"] is False
    prompts = sorted((cli_run.out / "fix-calc.agent").glob("round-*.prompt.md"))
    assert [p.name for p in prompts] == ["round-1.prompt.md", "round-2.prompt.md"]
    assert "## Round 2 of 2" in prompts[1].read_text()
    info = json.loads(cli_run.file("run.json").read_text())
    assert info["command_line"][0] == PY and info["sandbox"]["os_sandbox"] is None
    assert cli_run.source_unchanged()


def test_a_known_failure_text_blocks_the_run_at_once_and_kills_the_tree(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    backend = _backend(tmp_path, "approval", marker, "idle_timeout_s=120")
    cli_run = run(prepare(tmp_path, backend))
    assert cli_run.proc.returncode == 1, cli_run.output()
    result = cli_run.result()
    assert result["reason"] == "blocked_needs_decision"
    assert "waiting for an approval" in result["error"]
    finished = _finished(cli_run)
    assert finished["ending"] == "blocked" and finished["duration_s"] < 20
    assert finished["blocker"]["blocker"] == "waiting_for_approval"
    assert finished["killed"] >= 1  # the daemon in its own session went too
    assert leftovers(marker) == []
    assert result["result_contract"]["evidence_status"] == "BLOCKED_NEEDS_DECISION"
    assert cli_run.source_unchanged()


def test_a_silent_program_is_killed_by_the_idle_timeout_with_its_daemon(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    cli_run = run(prepare(tmp_path, _backend(tmp_path, "silent", marker, "idle_timeout_s=1.5")))
    result = cli_run.result()
    assert result["reason"] == "agent_timeout", result
    finished = _finished(cli_run)
    assert finished["ending"] == "idle_timeout" and 1.5 <= finished["silent_s"] < 10
    assert leftovers(marker) == []
    assert result["worktree_removed"] is True and cli_run.source_unchanged()


def test_the_wall_clock_limit_of_a_round_kills_a_chatty_program(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    ticker = tmp_path / "ticker.py"
    ticker.write_text(
        "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.1)\n"
    )
    backend = f"command:timeout_s=2 idle_timeout_s=60 -- {PY} {ticker} {marker}"
    cli_run = run(prepare(tmp_path, backend))
    result = cli_run.result()
    assert result["reason"] == "agent_timeout" and "longer than 2 s" in result["error"]
    assert leftovers(marker) == []


def test_without_its_final_event_a_clean_exit_is_a_failure(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    backend = _backend(tmp_path, "no-final-event", marker, "final_event=done")
    cli_run = run(prepare(tmp_path, backend))
    result = cli_run.result()
    assert result["reason"] == "agent_error"
    assert "without its final event `done`" in result["error"]
    assert _finished(cli_run)["exit_code"] == 0


def test_with_its_final_event_the_round_counts_whatever_the_exit_code(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    cli_run = run(prepare(tmp_path, _backend(tmp_path, "final-event", marker, "final_event=done")))
    result = cli_run.result()
    assert result["status"] == "passed", result["error"]
    assert _finished(cli_run)["exit_code"] == 3


def test_a_missing_program_is_a_preflight_error_with_the_fix(tmp_path: Path) -> None:
    cli_run = run(prepare(tmp_path, "command:/nonexistent/agent --go"))
    assert cli_run.proc.returncode == 3
    assert "is not installed" in cli_run.proc.stderr and "Fix:" in cli_run.proc.stderr
    assert "Traceback" not in cli_run.output()
    assert not (tmp_path / "out").exists()


def test_bad_backend_options_are_one_paragraph_errors(tmp_path: Path) -> None:
    for backend, words in (
        ("codex-cli:sandbox=yolo", "is not one of"),
        ("claude-cli:max_turns=zero", "is not a number"),
        ("command:idle_timeout_s=5 --", "no program to run"),
        ("codex-cli:colour=red", "unknown option 'colour'"),
    ):
        cli_run = run(prepare(tmp_path / backend.split(":")[0], backend))
        assert cli_run.proc.returncode == 2, (backend, cli_run.output())
        assert words in cli_run.proc.stderr and "Fix:" in cli_run.proc.stderr
        assert "Traceback" not in cli_run.output()

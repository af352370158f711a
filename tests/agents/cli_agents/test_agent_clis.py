"""The real Codex and Claude Code CLIs as code-runner backends, against scripted servers.

Each test drives `code-runner run` in a real process; the CLI is the npm package, pointed
at a `ScriptedServer` on 127.0.0.1 that replays fixed model turns (the Responses API for
Codex, the Messages API for Claude Code). The CLI's own tools make the edits. Assertions
are on the workspace diff (the patch), the request log, the CLI's events in the record and
the source fingerprint, never on which tool names a CLI version advertises.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from code_runner.sandbox import probe
from code_runner.testing import anthropic_messages as msgs
from code_runner.testing import responses_api as resp
from code_runner.testing.scripted_server import Fail, Reply, ScriptedServer
from tests.helpers.agent_clis import (
    BUGGY,
    CHECK,
    FIXED,
    KEY,
    backend,
    leftovers,
    prepare,
    processes_of,
    run,
    success_block,
    wait_for,
)
from tests.helpers.tasks import run_cli

pytestmark = pytest.mark.e2e


def _workspace_root(result: dict[str, Any]) -> str:
    return str(Path(result["worktree_path"]).parent)


def _assert_clean_end(cli_run: Any, result: dict[str, Any]) -> None:
    assert result["worktree_removed"] is True
    assert not Path(result["worktree_path"]).exists()
    assert cli_run.source_unchanged(), "the source repo changed"
    assert leftovers(_workspace_root(result)) == []


def _cli_finished(cli_run: Any) -> dict[str, Any]:
    found: list[dict[str, Any]] = [e for e in cli_run.events() if e["kind"] == "cli_finished"]
    assert found, cli_run.kinds()
    return found[-1]


# --- a bug fixed through the CLI's own tools --------------------------------------------


def test_codex_fixes_the_bug_with_its_own_shell_tool(tmp_path: Path, codex: str) -> None:
    steps = [
        dataclasses.replace(resp.write_file("calc.py", FIXED), usage=resp.Usage(1234, 56)),
        dataclasses.replace(resp.say(success_block()), usage=resp.Usage(2000, 7)),
    ]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("codex-cli", server.base_url)))
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "passed" and result["dod_passed"] is True
    # the usage Codex reported is what the server sent; Codex reports no cost: unknown
    assert result["usage"] == {
        "model_calls": None,
        "prompt_tokens": 3234,
        "completion_tokens": 63,
        "total_tokens": 3297,
        "usage_reported": True,
        "price_known": False,
        "cost_usd": None,
        "reported_by": "codex",
    }
    assert [c["path"] for c in result["changed_files"]] == ["calc.py"]
    patch = cli_run.patch()
    assert "+    return a * b" in patch and "check_calc.py" not in patch
    # the request log: the contract prompt went out, and Codex ran the command and sent
    # its output back in the second request
    assert len(requests) == 2
    prompt = resp.user_text(requests[0].body)
    assert "RESULT_STATUS" in prompt and "`calc.py`" in prompt and "check_calc.py" in prompt
    assert resp.tool_outputs(requests[1].body), "no tool output came back to the model"
    assert requests[0].headers.get("authorization") == f"Bearer {KEY}"
    # the CLI's events, translated into the record
    kinds = cli_run.kinds()
    for kind in ("cli_started", "tool_call", "tool_result", "agent_message", "cli_finished"):
        assert kind in kinds
    finished = _cli_finished(cli_run)
    assert finished["ending"] == "exited" and finished["stream"]["final_seen"] is True
    # the result contract agrees with the evidence
    contract = result["result_contract"]
    assert contract["claimed_status"] == "SUCCESS" == contract["evidence_status"]
    assert contract["mismatch"] is False
    # run.json: the hermetic command line, no secret in it
    info = json.loads(cli_run.file("run.json").read_text())
    line = info["command_line"]
    assert line[1:3] == ["exec", "--json"] and "--ephemeral" in line
    assert line[line.index("--sandbox") + 1] == "workspace-write"
    assert 'approval_policy="never"' in line and "analytics.enabled=false" in line
    assert KEY not in json.dumps(info) and KEY not in cli_run.file("events.jsonl").read_text()
    assert info["owned_paths"] == ["calc.py"] and info["workspace"]
    assert "# fix-calc: SUCCESS" in cli_run.file("result.md").read_text()
    assert "`calc.py` (modified)" in cli_run.file("eval.md").read_text()
    # code-runner's OS sandbox (where it works) judged the DoD, with Codex's own around Codex
    if probe().ok:
        assert result["sandbox"]["kind"] == "bwrap"
        assert json.loads(cli_run.file("run.json").read_text())["os_sandbox"]["kind"] == "bwrap"
    _assert_clean_end(cli_run, result)


def test_claude_fixes_the_bug_with_read_and_edit_in_tmux(tmp_path: Path, claude: str) -> None:
    steps = [
        *msgs.edit_file("calc.py", "return a - b", "return a + b"),
        msgs.tool(
            "Edit",
            file_path="calc.py",
            old_string="def mul(a, b):\n    return a + b",
            new_string="def mul(a, b):\n    return a * b",
        ),
        msgs.say(success_block()),
    ]
    steps = [
        dataclasses.replace(turn, input_tokens=1000 + n, output_tokens=10 * n)
        for n, turn in enumerate(steps, 1)
    ]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("claude-cli", server.origin)), "--tmux")
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "passed"
    # the usage Claude Code reported is what the server sent, with its own cost figure
    final = [e for e in cli_run.events() if e.get("type") == "result"][-1]
    assert final["cost_usd"] > 0
    assert result["usage"] == {
        "model_calls": 4,
        "prompt_tokens": 4010,
        "completion_tokens": 100,
        "total_tokens": 4110,
        "usage_reported": True,
        "price_known": True,
        "cost_usd": final["cost_usd"],
        "reported_by": "claude-code",
    }
    shown = run_cli("result", str(cli_run.out)).stdout
    assert f"4 model calls, 4,110 tokens (4,010 in, 100 out), ${final['cost_usd']:.4f}" in shown
    patch = cli_run.patch()
    assert "+    return a + b" in patch and "+    return a * b" in patch
    # Read, Edit, Edit, final message: four model calls, each after the previous tool ran
    assert len(requests) == 4
    assert "RESULT_STATUS" in msgs.user_text(requests[0].body)
    results = msgs.tool_results(requests[3].body)
    assert len(results) == 3 and "return a - b" in results[0]
    assert requests[0].body["max_tokens"] > 0 and requests[0].headers["x-api-key"] == KEY
    # the tools given to Claude are the ones the backend allows, nothing more
    assert {t["name"] for t in requests[0].body["tools"]} <= {
        "Read", "Edit", "Write", "Glob", "Grep", "Bash"
    }  # fmt: skip
    # the tmux pane showed the CLI's stream and was piped to terminal.log
    terminal = cli_run.file("terminal.log").read_text(errors="replace")
    assert '"type":"result"' in terminal and "code-runner: claude-cli, round 1" in terminal
    tmux_info = json.loads(cli_run.file("tmux.json").read_text())
    assert not Path(tmux_info["socket"]).exists(), "the run's tmux server was left behind"
    assert leftovers(tmux_info["socket"]) == []
    info = json.loads(cli_run.file("run.json").read_text())
    line = info["command_line"]
    assert line[1:5] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert line[line.index("--permission-mode") + 1] == "acceptEdits"
    assert "--max-turns" in line and KEY not in json.dumps(info)
    assert info["agent"]["supervision"]["tmux"] is True
    _assert_clean_end(cli_run, result)


# --- the claim against the evidence -----------------------------------------------------


def test_a_success_claim_with_a_failing_dod_is_a_recorded_mismatch(
    tmp_path: Path, codex: str
) -> None:
    wrong = BUGGY.replace("a - b", "a + b")  # fixes add, leaves mul broken
    steps = [resp.write_file("calc.py", wrong), resp.say(success_block())]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("codex-cli", server.base_url)))
    assert cli_run.proc.returncode == 1, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "failed" and result["reason"] == "dod_failed"
    contract = result["result_contract"]
    assert contract["claimed_status"] == "SUCCESS"
    assert contract["evidence_status"] == "FAILED" and contract["mismatch"] is True
    assert "the worker claims SUCCESS, the evidence says FAILED" in contract["mismatches"]
    assert "result_contract" in cli_run.kinds()
    report = cli_run.file("result.md").read_text()
    assert "# fix-calc: FAILED" in report and "MISMATCH" in report
    assert "mul(2, 3) should be 6" in cli_run.file("eval.md").read_text()
    _assert_clean_end(cli_run, result)


def test_a_write_outside_the_owned_paths_is_dropped_and_reported(
    tmp_path: Path, claude: str
) -> None:
    weakened = "print('2 passed')\n"  # the worker "fixes" the check instead of the code
    steps = [
        *msgs.write_file("calc.py", FIXED),
        *msgs.write_file("check_calc.py", weakened),
        msgs.bash("echo leftover > notes.txt"),
        msgs.say(success_block("calc.py, check_calc.py")),
    ]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("claude-cli", server.origin)))
    assert cli_run.proc.returncode == 0, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "passed"  # judged on calc.py alone, against the real check
    dropped = {d["path"]: d for d in result["dropped_changes"]}
    assert set(dropped) == {"check_calc.py", "notes.txt"}
    assert dropped["check_calc.py"]["reason"] == "outside the allowlist"
    assert "check_calc.py" not in cli_run.patch()
    assert "changes_dropped" in cli_run.kinds()
    contract = result["result_contract"]
    assert "claimed as changed but not in the patch: check_calc.py" in contract["mismatches"]
    evaluation = cli_run.file("eval.md").read_text()
    assert "`check_calc.py` (modified, round 1): outside the allowlist" in evaluation
    assert (cli_run.source / "check_calc.py").read_text() == CHECK
    _assert_clean_end(cli_run, result)


def test_a_commit_by_the_cli_is_a_safety_violation(tmp_path: Path, claude: str) -> None:
    commit = (
        "git -c user.name=w -c user.email=w@example.com commit -qam sneaky && git log --oneline"
    )
    steps = [*msgs.write_file("calc.py", FIXED), msgs.bash(commit), msgs.say(success_block())]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("claude-cli", server.origin)))
        requests = server.stream_requests()
    assert "sneaky" in msgs.tool_results(requests[-1].body)[-1], "the commit did not happen"
    assert cli_run.proc.returncode == 1, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "failed" and result["reason"] == "safety_violation"
    assert any("refs changed" in v or "HEAD changed" in v for v in result["safety_violations"])
    assert result["result_contract"]["mismatch"] is True
    _assert_clean_end(cli_run, result)


# --- hangs, missing final events, known failure texts -----------------------------------


@pytest.mark.parametrize("cli", ["codex", "claude"])
def test_a_stalled_stream_is_ended_by_the_idle_timeout(
    tmp_path: Path, cli: str, request: pytest.FixtureRequest
) -> None:
    """The idle limit outlasts the CLI's start-up, which is silent (Claude Code's takes 8 s
    on a loaded 2-core machine): the silence that ends the round is the stalled stream's."""
    program = request.getfixturevalue(cli)
    idle_s = 12
    if cli == "codex":
        server = ScriptedServer(
            resp.ResponsesApi(), [Reply(resp.say("hi"), stall_after=1, stall_s=120)]
        )
        url = server.base_url
    else:
        server = ScriptedServer(
            msgs.AnthropicMessages(), [Reply(msgs.say("hi"), stall_after=1, stall_s=120)]
        )
        url = server.origin
    with server:
        cli_run = run(prepare(tmp_path, backend(f"{cli}-cli", url, idle_timeout_s=idle_s)))
        assert len(server.stream_requests()) == 1
    assert cli_run.proc.returncode == 1, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "failed" and result["reason"] == "agent_timeout"
    assert f"wrote nothing for {idle_s} s" in result["error"]
    finished = _cli_finished(cli_run)
    assert finished["ending"] == "idle_timeout" and finished["silent_s"] >= idle_s
    # ended by the idle limit, not by the server's 120 s stall
    assert finished["duration_s"] < idle_s + 60
    assert leftovers(program.rsplit("/", 1)[0], _workspace_root(result)) == []
    _assert_clean_end(cli_run, result)


def test_codex_without_turn_completed_fails_the_round(tmp_path: Path, codex: str) -> None:
    claim = resp.say(success_block())
    events = len(resp.ResponsesApi().render(claim, {}))
    steps = [Reply(claim, cut_after=events - 1)]  # every event but response.completed
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        cli_run = run(prepare(tmp_path, backend("codex-cli", server.base_url)))
    assert cli_run.proc.returncode == 1, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "failed" and result["reason"] == "agent_error"
    assert "response.completed" in result["error"]
    stream = _cli_finished(cli_run)["stream"]
    assert stream["final_ok"] is False and stream["final_event"] == "turn.completed"
    # the worker's message said SUCCESS; the record says it was not
    assert result["result_contract"]["claimed_status"] == "SUCCESS"
    assert result["result_contract"]["mismatch"] is True
    _assert_clean_end(cli_run, result)


def test_claude_killed_before_its_result_event_fails_the_round(tmp_path: Path, claude: str) -> None:
    steps = [Reply(msgs.say("thinking"), stall_after=1, stall_s=120)]
    with ScriptedServer(msgs.AnthropicMessages(), steps) as server:
        cli_run = prepare(tmp_path, backend("claude-cli", server.origin))
        killer_done: list[int] = []

        def kill_claude_when_it_asks() -> None:
            wait_for(lambda: server.stream_requests(), 60, "Claude's first request")
            for process in processes_of("stream-json"):
                if "claude" in " ".join(process.cmdline()):
                    process.send_signal(signal.SIGKILL)
                    killer_done.append(process.pid)

        killer = threading.Thread(target=kill_claude_when_it_asks)
        killer.start()
        run(cli_run)
        killer.join(timeout=60)
    assert killer_done, "Claude Code was never seen running"
    result = cli_run.result()
    assert result["status"] == "failed" and result["reason"] == "agent_error"
    assert "without its final event `result`" in result["error"]
    assert _cli_finished(cli_run)["exit_code"] == 128 + signal.SIGKILL
    _assert_clean_end(cli_run, result)


@pytest.mark.parametrize("cli", ["codex", "claude"])
def test_an_authentication_failure_blocks_at_once(
    tmp_path: Path, cli: str, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue(cli)
    protocol: Any = resp.ResponsesApi() if cli == "codex" else msgs.AnthropicMessages()
    with ScriptedServer(protocol, [Fail(401, "invalid x-api-key")]) as server:
        url = server.base_url if cli == "codex" else server.origin
        cli_run = run(prepare(tmp_path, backend(f"{cli}-cli", url, idle_timeout_s=300)))
    assert cli_run.proc.returncode == 1, cli_run.output()
    result = cli_run.result()
    assert result["status"] == "failed" and result["reason"] == "blocked_needs_decision"
    assert "needs credentials" in result["error"] and "Fix:" in result["error"]
    assert result["result_contract"]["evidence_status"] == "BLOCKED_NEEDS_DECISION"
    blocked = [e for e in cli_run.events() if e["kind"] == "agent_blocked"]
    assert blocked and blocked[0]["blocker"] == "authentication_required"
    assert blocked[0]["text"] and blocked[0]["fix"]
    assert _cli_finished(cli_run)["duration_s"] < 30  # not the 300 s idle timeout
    assert "BLOCKED_NEEDS_DECISION" in cli_run.file("result.md").read_text()
    _assert_clean_end(cli_run, result)


@pytest.mark.parametrize("cli", ["codex", "claude"])
def test_a_server_that_is_down_fails_fast_with_the_reason(
    tmp_path: Path, cli: str, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue(cli)
    protocol: Any = resp.ResponsesApi() if cli == "codex" else msgs.AnthropicMessages()
    with ScriptedServer(protocol, []) as server:
        url = server.base_url if cli == "codex" else server.origin
    # closed: nothing listens on that port now
    cli_run = run(prepare(tmp_path, backend(f"{cli}-cli", url, idle_timeout_s=300)))
    result = cli_run.result()
    assert result["reason"] == "blocked_needs_decision", result["error"]
    assert "cannot be reached" in result["error"] and "base_url" in result["error"]
    assert _cli_finished(cli_run)["duration_s"] < 30
    _assert_clean_end(cli_run, result)


# --- many runs ---------------------------------------------------------------------------


def test_summarize_reads_the_runs_of_every_backend(tmp_path: Path, codex: str) -> None:
    runs_root = tmp_path / "runs"
    with ScriptedServer(
        resp.ResponsesApi(), [resp.write_file("calc.py", FIXED), resp.say(success_block())]
    ) as server:
        good = run(
            prepare(tmp_path / "a", backend("codex-cli", server.base_url), out=runs_root / "a")
        )
    with ScriptedServer(resp.ResponsesApi(), [Fail(401, "bad key")]) as server:
        blocked = run(
            prepare(tmp_path / "b", backend("codex-cli", server.base_url), out=runs_root / "b")
        )
    scripted = tmp_path / "c" / "script.json"
    scripted.parent.mkdir(parents=True)
    scripted.write_text(json.dumps({"rounds": [{"calls": [], "response": success_block()}]}))
    other = prepare(tmp_path / "c", f"scripted:{scripted}", out=runs_root / "c")
    run(other)
    assert good.proc.returncode == 0 and blocked.proc.returncode == 1
    shown = run_cli("summarize", str(runs_root), "--json")
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    by_backend = {line["backend_name"]: line for line in summary["runs"] if line["status"]}
    statuses = sorted(line["status"] for line in summary["runs"])
    assert statuses == ["BLOCKED_NEEDS_DECISION", "FAILED", "SUCCESS"]
    assert summary["totals"]["runs"] == 3 and summary["totals"]["dod_passed"] == 1
    assert summary["totals"]["by_backend"] == {"codex-cli": 2, "scripted": 1}
    # the scripted worker claimed SUCCESS and a changed calc.py: two mismatches
    assert summary["totals"]["runs_with_mismatch"] == 1
    assert by_backend["scripted"]["mismatches"] == 2
    text = run_cli("summarize", str(runs_root))
    assert "3 run(s): SUCCESS 1, PARTIAL 0, BLOCKED_NEEDS_DECISION 1, FAILED 1" in text.stdout
    later = run_cli("summarize", str(runs_root), "--since", "2999-01-01", "--json")
    assert json.loads(later.stdout)["totals"]["runs"] == 0


def test_a_config_entry_names_the_provider_model_and_key(
    tmp_path: Path, codex: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = [resp.write_file("calc.py", FIXED), resp.say(success_block())]
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        config = tmp_path / "code-runner.toml"
        config.write_text(
            "[backends.local-codex]\n"
            'kind = "codex-cli"\n'
            f'base_url = "{server.base_url}"\n'
            'model = "configured-model"\n'
            'api_key_env = "CR_TEST_CLI_KEY"\n'
            "idle_timeout_s = 30\n"
        )
        monkeypatch.setenv("CODE_RUNNER_CONFIG", str(config))
        cli_run = run(prepare(tmp_path / "run", "local-codex"))
        requests = server.stream_requests()
    assert cli_run.proc.returncode == 0, cli_run.output()
    assert requests[0].body["model"] == "configured-model"
    assert requests[0].headers["authorization"] == f"Bearer {KEY}"
    info = json.loads(cli_run.file("run.json").read_text())
    assert info["agent"]["settings"]["config_backend"] == "local-codex"
    assert info["agent"]["settings"]["idle_timeout_s"] == 30


def test_doctor_reports_the_installed_clis(codex: str, claude: str) -> None:
    shown = run_cli("doctor", "--json", timeout=120)
    report = json.loads(shown.stdout)
    clis = report["agent_clis"]
    assert clis["codex"]["found"] and "0.171.0" in clis["codex"]["version"]
    assert clis["claude"]["found"] and "2.1.197" in clis["claude"]["version"]
    assert {"codex-cli", "claude-cli", "command"} <= set(report["backends"])

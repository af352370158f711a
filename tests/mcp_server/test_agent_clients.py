"""A real MCP client: the Claude Code CLI, given `code-runner mcp` through `--mcp-config`,
against a scripted model server whose turns call run_task on a repo with a bug, poll
task_status until the run ends, and read task_result. The nested run's record must be
whole and the source byte-identical.

The model's turns react to what the tools answered (the run id is only known once
run_task returned), so the script's steps are functions of the request they answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from code_runner.testing import anthropic_messages as msgs
from code_runner.testing import responses_api as resp
from code_runner.testing.scripted_server import ScriptedServer, SseEvent
from tests.helpers.programs import installed_program
from tests.helpers.tasks import fingerprint
from tests.mcp_server.mcp_helpers import calc_source, fix_script, server_log, task_spec

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLAUDE = REPO / ".tools" / "agent-clis" / "node_modules" / ".bin" / "claude"
KEY = "sk-test-mcp-0123456789"
TOOL = "mcp__code-runner__{}"


class ReactiveMessages(msgs.AnthropicMessages):
    """The Messages API, where a step may be a function of the request it answers."""

    def render(self, turn: Any, request: Mapping[str, Any]) -> Any:
        if callable(turn):
            turn = turn(request)
        return super().render(turn, request)


def _answers(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for raw in msgs.tool_results(request):
        try:
            data = json.loads(raw)
        except ValueError:
            data = {"unparsed": raw}
        found.append(data if isinstance(data, dict) else {"value": data})
    return found


def next_move(request: Mapping[str, Any]) -> msgs.Turn:
    """After run_task: poll until the run is terminal, then read the result, then report."""
    answers = _answers(request)
    run_id = answers[0].get("run_id")
    last = answers[-1]
    if not run_id:
        return msgs.say(f"run_task failed: {answers[0]}")
    if "patch" in last:
        return msgs.say(f"RUN {run_id} {last['status']}; patch:\n{last['patch']}")
    if last.get("terminal") is True:
        return msgs.tool(TOOL.format("task_result"), run_id=run_id)
    return msgs.tool(TOOL.format("task_status"), run_id=run_id, wait_s=20)


def _claude(tmp_path: Path, server: ScriptedServer, source: Path, prompt: str) -> Any:
    installed_program(str(CLAUDE), "the claude CLI", "./scripts/bootstrap --tests")
    config = {
        "mcpServers": {
            "code-runner": {
                "type": "stdio",
                "command": sys.executable,
                "args": ["-m", "code_runner", "mcp", "--allow-source", str(source),
                         "--allow-backend", "scripted"],
                "env": {"CODE_RUNNER_STATE_DIR": os.environ["CODE_RUNNER_STATE_DIR"]},
            }
        }
    }  # fmt: skip
    config_path = tmp_path / "mcp.json"
    config_path.write_text(json.dumps(config))
    (tmp_path / "claude-config").mkdir()
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": server.origin,
        "ANTHROPIC_API_KEY": KEY,
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "MCP_CONNECTION_NONBLOCKING": "0",  # -p would otherwise start before the server is up
        # Claude Code gives a server 5 s to connect; importing the MCP SDK alone takes longer
        # on a busy machine, and the tools would then be missing from every turn
        "MCP_CONNECT_TIMEOUT_MS": "120000",
    }
    argv = [
        str(CLAUDE), "-p", "--output-format", "stream-json", "--verbose",
        "--no-session-persistence", "--setting-sources", "user",
        "--mcp-config", str(config_path), "--strict-mcp-config",
        "--model", "scripted-model", "--tools", "", "--allowedTools", "mcp__code-runner",
        "--max-turns", "20", "--", prompt,
    ]  # fmt: skip
    return subprocess.run(
        argv,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_claude_code_hands_a_bug_to_code_runner_over_mcp(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    spec = task_spec(source, fix_script(tmp_path))
    steps: list[Any] = [msgs.tool(TOOL.format("run_task"), spec=spec)]
    steps += [next_move] * 14
    with ScriptedServer(ReactiveMessages(), steps) as server:
        proc = _claude(tmp_path, server, source, "Fix calc.py through code-runner.")
        requests = server.stream_requests()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    final = [e for e in events if e.get("type") == "result"]
    assert final and final[-1].get("is_error") is False, output[-3000:]
    # the MCP server's tools were offered to the model under Claude Code's names
    offered = {t["name"] for t in requests[0].body.get("tools", [])}
    assert TOOL.format("run_task") in offered and TOOL.format("task_result") in offered
    # the model's last word quotes what task_result returned
    last = final[-1].get("result", "")
    assert " passed; patch:" in last and "+    return a * b" in last, last
    # the calls, as the server logged them: run_task, task_status polls, task_result
    calls = [e["tool"] for e in server_log() if e["kind"] == "tools/call"]
    assert calls[0] == "run_task" and calls[-1] == "task_result", calls
    assert set(calls[1:-1]) == {"task_status"}
    assert all(e["ok"] for e in server_log() if e["kind"] == "tools/call")
    # the nested run: a whole record, and the source untouched
    run_id = last.split()[1]
    out = Path(os.environ["CODE_RUNNER_STATE_DIR"]) / "mcp" / "runs" / run_id / "out"
    result = json.loads((out / "fix-calc.result.json").read_text())
    assert result["status"] == "passed" and result["source_unchanged"] is True
    for suffix in ("request.json", "status.json", "events.jsonl", "rounds.jsonl", "patch"):
        assert (out / f"fix-calc.{suffix}").is_file(), suffix
    assert json.loads((out / "fix-calc.status.json").read_text())["terminal"] is True
    assert fingerprint(source) == before, "the source changed"


# --- Codex: `mcp_servers` in its config; MCP tools arrive as a namespace once connected --

CODEX = REPO / ".tools" / "agent-clis" / "node_modules" / ".bin" / "codex"
NAMESPACE = "mcp__code_runner"


class NamespacedResponses(resp.ResponsesApi):
    """The Responses API where a step may be a function of its request, and a call named
    `NAMESPACE.tool` goes out as a namespaced function call (how Codex names MCP tools)."""

    def render(self, turn: Any, request: Mapping[str, Any]) -> Any:
        if callable(turn):
            turn = turn(request)
        events = []
        for event in super().render(turn, request):
            data = json.loads(event.data)
            item = data.get("item")
            if isinstance(item, dict) and "." in str(item.get("name", "")):
                item["namespace"], item["name"] = item["name"].split(".", 1)
            events.append(SseEvent(json.dumps(data), event=event.event))
        return events


def _codex_answers(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON answers of the code-runner tools among a request's tool outputs."""
    found: list[dict[str, Any]] = []
    for raw in resp.tool_outputs(request):
        texts = [raw]
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            texts += [str(p.get("text", "")) for p in parsed if isinstance(p, dict)]
        elif isinstance(parsed, str):
            texts.append(parsed)
        for text in texts:
            start = text.find("{")
            try:
                data, _ = json.JSONDecoder().raw_decode(text[start:]) if start >= 0 else (None, 0)
            except ValueError:
                continue
            if isinstance(data, dict) and "run_id" in data:
                found.append(data)
                break
    return found


def codex_move(spec: dict[str, Any]) -> Callable[[Mapping[str, Any]], resp.Turn]:
    def move(request: Mapping[str, Any]) -> resp.Turn:
        names = [t.get("name") for t in request.get("tools") or [] if isinstance(t, dict)]
        answers = _codex_answers(request)
        if not answers:
            if NAMESPACE not in names:
                return resp.shell("sleep 2")  # the MCP server is still connecting
            return resp.Turn([resp.FunctionCall(f"{NAMESPACE}.run_task", {"spec": spec})])
        run_id, last = answers[0]["run_id"], answers[-1]
        if "patch" in last:
            return resp.say(f"RUN {run_id} {last['status']}; patch:\n{last['patch']}")
        tool = "task_result" if last.get("terminal") is True else "task_status"
        arguments: dict[str, Any] = {"run_id": run_id}
        if tool == "task_status":
            arguments["wait_s"] = 20
        return resp.Turn([resp.FunctionCall(f"{NAMESPACE}.{tool}", arguments)])

    return move


def test_codex_hands_a_bug_to_code_runner_over_mcp(tmp_path: Path) -> None:
    installed_program(str(CODEX), "the codex CLI", "./scripts/bootstrap --tests")
    source = calc_source(tmp_path)
    before = fingerprint(source)
    spec = task_spec(source, fix_script(tmp_path))
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    args = ["-m", "code_runner", "mcp", "--allow-source", str(source), "--allow-backend",
            "scripted"]  # fmt: skip
    state = os.environ["CODE_RUNNER_STATE_DIR"]
    with ScriptedServer(NamespacedResponses(), [codex_move(spec)] * 60) as server:
        provider = (
            f'{{name="scripted",base_url="{server.base_url}",env_key="CR_TEST_MCP_KEY",'
            'wire_api="responses",request_max_retries=0,stream_max_retries=0}'
        )
        argv = [
            str(CODEX), "exec", "--json", "--ephemeral", "--skip-git-repo-check",
            "--ignore-user-config", "--ignore-rules", "--color", "never", "-C", str(tmp_path),
            "-m", "scripted-model", "-c", "model_provider=scripted",
            "-c", f"model_providers.scripted={provider}", "-c", 'approval_policy="never"',
            "--sandbox", "read-only", "--disable", "plugins",
            "--disable", "unbounded_connection_retries", "-c", "analytics.enabled=false",
            "-c", f'mcp_servers.code_runner.command="{sys.executable}"',
            "-c", f"mcp_servers.code_runner.args={json.dumps(args)}",
            "-c", f'mcp_servers.code_runner.env={{CODE_RUNNER_STATE_DIR="{state}"}}',
            "-c", 'mcp_servers.code_runner.default_tools_approval_mode="approve"',
            "-c", "mcp_servers.code_runner.startup_timeout_sec=120",  # as Claude Code's above
            "--", "Fix calc.py through code-runner.",
        ]  # fmt: skip
        env = {**os.environ, "CODEX_HOME": str(codex_home), "CR_TEST_MCP_KEY": KEY}
        proc = subprocess.run(
            argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    messages = [
        e["item"]["text"]
        for e in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]
    assert messages and " passed; patch:" in messages[-1], output[-3000:]
    assert "+    return a * b" in messages[-1]
    calls = [e["tool"] for e in server_log() if e["kind"] == "tools/call"]
    assert calls[0] == "run_task" and calls[-1] == "task_result", calls
    run_id = messages[-1].split()[1]
    out = Path(state) / "mcp" / "runs" / run_id / "out"
    result = json.loads((out / "fix-calc.result.json").read_text())
    assert result["status"] == "passed" and result["source_unchanged"] is True
    assert fingerprint(source) == before, "the source changed"

"""The `openai` backend end to end: the real `openai` SDK, over real HTTP and SSE, against
the scripted server, through the whole `code-runner run` path (spec, preflight, workspace,
rounds, DoD, record)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from code_runner.agents.model.prompts import NUDGE
from code_runner.agents.model.transcript import request_bodies
from code_runner.testing.chat_completions import ChatCompletions, Usage
from code_runner.testing.scripted_server import Fail, Reply, ScriptedServer
from tests.helpers.model_runs import (
    FIXED_ADD,
    FIXED_BOTH,
    KEY,
    ToolCall,
    Turn,
    call,
    model_task,
    no_workspaces,
    tool_messages,
    write,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ChatCompletions()) as scripted:
        yield scripted


def bodies(server: ScriptedServer) -> list[dict[str, Any]]:
    return [r.body for r in server.stream_requests()]


def test_the_transcript_writes_each_message_once_and_gives_every_request_back_whole(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation re-sends its history every turn; the transcript writes each message
    once (a request line holds what the turn added), and every request comes back whole."""
    server.add(
        *(Turn(tool_calls=[call("read_file", path="calc.py", start_line=n)]) for n in (1, 2, 3)),
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)]),
        Turn(content="Fixed."),
    )
    run = model_task(tmp_path, server, monkeypatch)
    assert run.run() == 0
    sent = [b["messages"] for b in bodies(server)]
    rebuilt = request_bodies(run.out / "fix-calc.transcript.jsonl")
    assert [b["messages"] for b in rebuilt] == sent
    assert [b["tools"] for b in rebuilt] == [b["tools"] for b in bodies(server)]
    lines = [e["body"] for e in run.transcript() if e["kind"] == "request"]
    assert "messages_from" not in lines[0] and lines[0]["messages"] == sent[0]
    for before, line in zip(sent, lines[1:], strict=False):
        assert line["messages_from"] == len(before)
        assert [m["role"] for m in line["messages"]] == ["assistant", "tool"]


def test_bug_fixed_over_two_rounds(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.add(
        # round 1: two tool calls in one turn, arguments split into 3-character chunks;
        # only add is fixed, so the DoD fails
        Turn(
            content="Let me look, then fix add.",
            tool_calls=[call("read_file", path="calc.py"), write("calc.py", FIXED_ADD)],
            argument_chunk_chars=3,
        ),
        Turn(content="Fixed add."),
        # round 2: sees the DoD failure and the current file, fixes mul
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)], argument_chunk_chars=1),
        Turn(content="Fixed mul too."),
    )
    settings = {
        "headers": {"X-Team": "compilers"},
        "extra_body": {"temperature": 0, "seed": 7},
        "max_tokens": 512,
        "tool_choice": "required",
    }
    run = model_task(tmp_path, server, monkeypatch, max_rounds=2, backend_settings=settings)
    assert run.run() == 0
    result = run.result()
    assert (result["status"], result["reason"], result["rounds"]) == ("passed", "dod_passed", 2)
    request = server.stream_requests()[0]
    assert request.headers["x-team"] == "compilers"
    transcript_text = (run.out / "fix-calc.transcript.jsonl").read_text()
    assert "compilers" not in transcript_text  # header values are not recorded, names are
    assert run.transcript()[0]["settings"]["headers"] == {"X-Team": "(set)"}
    assert (request.body["temperature"], request.body["seed"]) == (0, 7)
    assert (request.body["max_tokens"], request.body["tool_choice"]) == (512, "required")
    assert b"return a * b" in run.patch() and b"return a + b" in run.patch()
    first, _, third, _ = bodies(server)
    assert "round 1 of at most 2" in first["messages"][1]["content"]
    assert "return a - b" in first["messages"][1]["content"]  # fresh file context
    opening = third["messages"][1]["content"]
    assert "round 2 of at most 2" in opening
    assert "Result: failed" in opening and "Exit code: 1" in opening  # previous DoD
    assert "AssertionError" in opening  # its stderr tail
    assert "return a + b" in opening  # the file as round 1 left it
    assert [t["function"]["name"] for t in first["tools"]] == [
        "read_file",
        "write_file",
        "edit_file",
        "run_command",
        "search_code",
    ]
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    details = result["round_details"]
    assert [d.get("agent_stop") for d in details[1:]] == ["done", "done"]
    assert details[2]["agent_usage"]["total_tokens"] == 4 * 120
    assert details[2]["agent_usage"]["cost_usd"] is None  # no price: unknown, not 0
    assert details[2]["agent_usage"]["price_known"] is False
    kinds = [e["kind"] for e in run.transcript()]
    assert kinds[0] == "session" and kinds.count("request") == 4 and kinds.count("stop") == 2
    assert "Fixed mul too." in (run.out / "fix-calc.response.txt").read_text()
    assert no_workspaces()
    progress = capsys.readouterr().err
    assert "model turn 1: read_file, write_file (" in progress and "120 tokens)" in progress


@pytest.mark.parametrize(
    ("cut_after", "message"),
    [(2, "without a terminal chunk"), (0, "the stream was empty")],
)
def test_stream_without_terminal_chunk_is_a_failure(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    cut_after: int,
    message: str,
) -> None:
    # a well-formed HTTP body that stops after the role chunk and the tool-call header
    server.add(Reply(Turn(tool_calls=[write("calc.py", FIXED_BOTH)]), cut_after=cut_after))
    run = model_task(tmp_path, server, monkeypatch, backend_settings={"retries": 0})
    assert run.run() == 1
    result = run.result()
    assert result["reason"] == "agent_error"
    assert message in result["error"]
    assert result["patch_bytes"] == 0  # the half-received call was never executed
    assert not any(e["kind"] == "tool_call" and e["name"] == "write_file" for e in run.events())


def test_broken_stream_is_retried(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(
        Reply(Turn(tool_calls=[write("calc.py", FIXED_BOTH)]), cut_after=3, abrupt=True),
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)]),
        Turn(content="done"),
    )
    run = model_task(tmp_path, server, monkeypatch)
    assert run.run() == 0
    errors = [e for e in run.transcript() if e["kind"] == "error"]
    assert [(e["kind"], e["attempt"], e["retry_in_s"]) for e in errors] == [("error", 1, 0.05)]


def test_http_400_is_not_retried_and_its_message_is_shown(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.add(Fail(400, "The model `scripted-model` does not support tools"))
    run = model_task(tmp_path, server, monkeypatch)
    assert run.run() == 1
    assert len(server.stream_requests()) == 1
    result = run.result()
    assert result["reason"] == "agent_error"
    assert "HTTP 400: The model `scripted-model` does not support tools" in result["error"]
    assert "does not support tools" in capsys.readouterr().err


def test_a_key_refused_at_the_first_model_call_is_said_and_not_retried(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A gateway whose /models is open but whose chat endpoint refuses the key, as a
    LiteLLM proxy without a database does: one request, then the words and the fix."""
    no_db = {"error": {"message": "No connected db.", "type": "no_db_connection", "code": "400"}}
    server.add(*[Fail(400, body=no_db)] * 3)
    run = model_task(tmp_path, server, monkeypatch, backend_settings={"retries": 2})
    assert run.run() == 1
    assert len(server.stream_requests()) == 1  # the same key gets the same answer: no retry
    error = run.result()["error"]
    assert "the gateway refused the key (HTTP 400: No connected db.)" in error
    assert "master_key" in error and "Traceback" not in capsys.readouterr().err


def test_send_max_tokens_false_leaves_it_out(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(Turn(tool_calls=[write("calc.py", FIXED_BOTH)]), Turn(content="done"))
    settings = {"max_tokens": 512, "send_max_tokens": False, "include_usage": False}
    run = model_task(tmp_path, server, monkeypatch, backend_settings=settings)
    assert run.run() == 0
    body = server.stream_requests()[0].body
    assert "max_tokens" not in body and "stream_options" not in body
    usage = run.result()["round_details"][1]["agent_usage"]
    assert usage["usage_reported"] is False and usage["total_tokens"] == 0


def test_429_with_retry_after_then_success(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(
        Fail(429, "Rate limit reached", headers={"Retry-After": "1"}),
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)]),
        Turn(content="done"),
    )
    run = model_task(tmp_path, server, monkeypatch)
    assert run.run() == 0
    first, second = server.stream_requests()[:2]
    assert second.received_at - first.received_at >= 0.95  # Retry-After honoured, not backoff
    error = next(e for e in run.transcript() if e["kind"] == "error")
    assert (error["status"], error["retry_in_s"]) == (429, 1.0)


def test_500_three_times_then_give_up(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(*[Fail(500, "upstream exploded")] * 3, Turn(content="never reached"))
    run = model_task(tmp_path, server, monkeypatch, backend_settings={"retries": 2})
    assert run.run() == 1
    assert len(server.stream_requests()) == 3
    result = run.result()
    assert result["reason"] == "agent_error"
    assert (
        "after 3 attempts" in result["error"] and "HTTP 500: upstream exploded" in result["error"]
    )
    waits = [e["retry_in_s"] for e in run.transcript() if e["kind"] == "error"]
    assert waits == [0.05, 0.1, None]  # exponential backoff, then give up


def test_malformed_arguments_repaired_or_returned_as_typed_errors(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    content = json.dumps(FIXED_BOTH)
    server.add(
        Turn(
            tool_calls=[
                ToolCall("read_file", '{"path": "calc.py"'),  # truncated: not guessed at
                ToolCall("write_file", '{"path": "calc.py", "content": ' + content + ",}"),
            ]
        ),
        Turn(content="done"),
    )
    run = model_task(tmp_path, server, monkeypatch)
    assert run.run() == 0  # the repaired write_file (trailing comma) ran
    truncated, repaired = tool_messages(server.stream_requests()[1].body)
    assert truncated.startswith("INVALID_ARGS: read_file: the arguments are not valid JSON")
    assert repaired.startswith("wrote calc.py") or "calc.py" in repaired
    assert not repaired.startswith("INVALID_ARGS")


def test_unknown_tool_and_duplicate_call_are_typed_errors(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(
        Turn(
            tool_calls=[
                call("delete_everything", path="."),
                call("read_file", path="calc.py"),
                call("read_file", path="calc.py"),
                call("read_file", path="calc.py", start_line=1),
            ]
        ),
        Turn(content="I give up."),
    )
    run = model_task(tmp_path, server, monkeypatch)
    assert run.run() == 1
    unknown, first, duplicate, different = tool_messages(server.stream_requests()[1].body)
    assert unknown.startswith("UNKNOWN_TOOL: there is no tool named 'delete_everything'")
    assert "return a - b" in first and "return a - b" in different
    assert duplicate.startswith("DUPLICATE_CALL: read_file was already called")


def test_prose_only_is_told_once_then_the_round_ends(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(Turn(content="You should change - to +."), Turn(content="Really, just do it."))
    run = model_task(tmp_path, server, monkeypatch)
    assert run.run() == 1
    requests = server.stream_requests()
    assert len(requests) == 2
    assert requests[1].body["messages"][-1] == {"role": "user", "content": NUDGE}
    result = run.result()
    assert result["reason"] == "no_allowed_changes"
    assert result["round_details"][1]["agent_stop"] == "no_action"


def test_turn_budget_ends_the_run_and_keeps_the_best_patch(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(
        Turn(tool_calls=[write("calc.py", FIXED_ADD)]),
        *[Turn(tool_calls=[call("run_command", command=f"echo {i}")]) for i in range(10)],
    )
    run = model_task(tmp_path, server, monkeypatch, budget={"turns_per_round": 4}, max_rounds=3)
    assert run.run() == 1
    result = run.result()
    assert (result["status"], result["reason"], result["rounds"]) == ("failed", "budget_turns", 1)
    assert "4 model turns" in result["error"]
    assert len(server.stream_requests()) == 4
    assert b"return a + b" in run.patch()  # the partial fix is the best patch, kept


def test_token_budget_exceeded_mid_run(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = Usage(prompt_tokens=1000, completion_tokens=200)
    server.add(
        Turn(tool_calls=[write("calc.py", FIXED_ADD)], usage=usage),
        Turn(content="Done with add.", usage=usage),
        Turn(tool_calls=[call("read_file", path="calc.py")], usage=usage),
        Turn(tool_calls=[call("run_command", command="true")], usage=usage),
    )
    run = model_task(tmp_path, server, monkeypatch, budget={"tokens_per_run": 3000}, max_rounds=3)
    assert run.run() == 1
    result = run.result()
    assert (result["reason"], result["rounds"]) == ("budget_tokens", 2)
    assert "token budget of 3000 is spent (3600 tokens)" in result["error"]
    assert len(server.stream_requests()) == 3  # checked before the 4th call
    assert b"return a + b" in run.patch()


def test_cost_budget_counts_reported_usage_at_the_configured_price(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(*[Turn(tool_calls=[call("run_command", command=f"echo {i}")]) for i in range(5)])
    run = model_task(
        tmp_path,
        server,
        monkeypatch,
        backend_settings={"price_in_per_mtok": 10.0, "price_out_per_mtok": 50.0},
        budget={"cost_per_run_usd": 0.005},  # one call: 100*10e-6 + 20*50e-6 = $0.002
    )
    assert run.run() == 1
    result = run.result()
    assert result["reason"] == "budget_cost"
    assert len(server.stream_requests()) == 3
    usage = result["round_details"][1]["agent_usage"]
    assert usage["price_known"] is True and usage["cost_usd"] == pytest.approx(0.006)


def test_cost_budget_with_unknown_price_is_refused_before_the_run(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = model_task(tmp_path, server, monkeypatch, budget={"cost_per_run_usd": 1.0})
    assert run.run() == 3
    err = capsys.readouterr().err
    assert "no price" in err and "never taken as 0" in err and "price_in_per_mtok" in err
    assert not run.out.exists() and no_workspaces()


def test_wall_clock_budget_per_round(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(
        Turn(tool_calls=[write("calc.py", FIXED_ADD), call("run_command", command="sleep 1.2")]),
        Turn(content="never asked"),
    )
    run = model_task(tmp_path, server, monkeypatch, budget={"round_wall_clock_s": 1.0})
    assert run.run() == 1
    result = run.result()
    assert result["reason"] == "budget_wall_clock"
    assert "round's wall-clock budget of 1 s is spent" in result["error"]
    assert len(server.stream_requests()) == 1
    assert b"return a + b" in run.patch()


def test_a_stalled_stream_times_out_and_is_retried(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    stall_s = 120.0
    server.add(
        Reply(Turn(tool_calls=[write("calc.py", FIXED_BOTH)]), stall_after=1, stall_s=stall_s),
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)]),
        Turn(content="done"),
    )
    run = model_task(tmp_path, server, monkeypatch, backend_settings={"request_timeout_s": 0.5})
    started = time.monotonic()
    assert run.run() == 0
    assert time.monotonic() - started < stall_s / 2  # the stall was cut, never waited out
    error = next(e for e in run.transcript() if e["kind"] == "error")
    assert error["kind"] == "error" and error["message"].startswith("no complete answer within")
    # the call ended at its 0.5 s limit (plus what a busy machine adds), not at the stall's end
    assert 0.4 < error["duration_s"] < 10
    assert "request timeout of 0.5 s" in error["message"], error["message"]


def test_the_key_never_reaches_a_tool_process(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(
        Turn(
            tool_calls=[
                call("run_command", command="env; echo HOME=$HOME"),
                call("run_command", command="cat /proc/self/environ | tr '\\0' '\\n'"),
            ]
        ),
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)]),
        Turn(content="done"),
    )
    monkeypatch.setenv("OPENAI_API_KEY", KEY + "-openai")
    run = model_task(tmp_path, server, monkeypatch)
    proc = run.run_process()  # a real `code-runner run` process with the key in its env
    assert proc.returncode == 0, proc.stderr
    env_output, proc_environ = tool_messages(server.stream_requests()[1].body)
    assert "PATH=" in env_output and "HOME=" in env_output  # the command did print its env
    assert "PATH=" in proc_environ
    for text in (env_output, proc_environ):
        assert KEY not in text and "[redacted]" not in text  # absent, not merely hidden
        assert "CR_TEST_MODEL_KEY" not in text and "OPENAI_API_KEY" not in text
    # the key did go to the model server, and nowhere in the record
    assert server.stream_requests()[0].headers["authorization"] == f"Bearer {KEY}"
    for path in run.out.iterdir():
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path.name


def test_sigterm_during_a_stalled_model_call_ends_the_run_cleanly(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(Reply(Turn(tool_calls=[write("calc.py", FIXED_BOTH)]), stall_after=1, stall_s=60))
    run = model_task(tmp_path, server, monkeypatch, backend_settings={"request_timeout_s": 60})
    process = subprocess.Popen(
        [sys.executable, "-m", "code_runner", "run", str(run.spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    # the signal goes only once the runner is in the model call: on a busy machine its
    # start-up alone can take tens of seconds
    deadline = time.monotonic() + 120
    while not server.stream_requests() and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    assert server.stream_requests(), "the run never reached its model call"
    time.sleep(0.3)  # inside the stalled stream now
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    result = run.result()
    assert (result["status"], result["reason"]) == ("interrupted", "interrupted")
    assert result["worktree_removed"] is True and no_workspaces()
    assert [e["kind"] for e in run.transcript()][-1] == "stop"  # written in `finally`

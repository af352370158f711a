"""Malformed model streams, end to end: the real `openai` SDK reads bytes a loopback server
writes on purpose, and `code-runner run` ends the round with `agent_error` and a typed
`stream_malformed` failure (retried first, offending bytes in the transcript), never with
a traceback and exit 70."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner.testing.chat_completions import ChatCompletions
from code_runner.testing.scripted_server import Raw, ScriptedServer
from tests.helpers.model_runs import FIXED_BOTH, Turn, model_task, no_workspaces, write
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.e2e

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'

MALFORMED = {
    "bad JSON in a data line": (Raw([ROLE, b'data: {"choices": [\n\n']), "is not JSON"),
    "a line that is not UTF-8": (Raw([ROLE, b"data: \xff\xfe{}\n\n"]), "is not UTF-8"),
    "an HTML page": (
        Raw([b"<html><body>Gateway login</body></html>"], content_type="text/html"),
        "Content-Type 'text/html'",
    ),
    "a non-streamed JSON answer": (
        Raw([b'{"choices": [{"message": {"content": "hi"}}]}'], content_type="application/json"),
        "Content-Type 'application/json'",
    ),
    "a body that is not SSE": (Raw([b"hello, world\nnot an event stream\n"]), "not an event"),
    "a chunk that is a number": (Raw([b"data: 42\n\n"]), "a chunk is a JSON number"),
    "choices that are not a list": (Raw([b'data: {"choices": 5}\n\n']), "choices is a JSON"),
    "usage that is not a count": (
        Raw([b'data: {"choices": [], "usage": {"prompt_tokens": Infinity}}\n\n']),
        "usage.prompt_tokens is inf",
    ),
    "tool-call arguments that are not text": (
        Raw(
            [
                b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c",'
                b'"function":{"name":"write_file","arguments":{"path":"calc.py"}}}]}}]}\n\n'
            ]
        ),
        "arguments is a JSON object",
    ),
    "an oversized line": (Raw([b"data: " + b"x" * 70_000 + b"\n\n"]), "longer than"),
}


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ChatCompletions()) as scripted:
        yield scripted


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_stream_ends_the_round_with_a_typed_error(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    step, words = MALFORMED[case]
    server.add(step, step)
    settings = {"retries": 1, "max_stream_line_bytes": 65536}
    run = model_task(tmp_path, server, monkeypatch, backend_settings=settings)
    before = fingerprint(run.source)
    assert run.run() == 1
    assert len(server.stream_requests()) == 2  # retried once, like a cut stream
    result = run.result()
    assert result["reason"] == "agent_error"
    assert words in result["error"]
    assert server.base_url in result["error"]  # names the server
    assert "Fix:" in result["error"] and "text/event-stream" in result["error"]
    errors = [e for e in run.transcript() if e["kind"] == "error"]
    assert [e["failure"] for e in errors] == ["stream_malformed"] * 2
    assert errors[0]["retry_in_s"] is not None and errors[1]["retry_in_s"] is None
    for error in errors:
        assert error["evidence"] and len(error["evidence"].encode()) < 1200  # bounded
    err = capsys.readouterr().err
    assert "Traceback" not in err and "the stream is malformed" in err
    assert fingerprint(run.source) == before
    assert no_workspaces()


def test_bad_json_then_a_good_answer_passes(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(
        Raw([ROLE, b'data: {"choices": [{"index": 0, "delta": {"content": "hal\n\n']),
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)]),
        Turn(content="done"),
    )
    run = model_task(tmp_path, server, monkeypatch)
    assert run.run() == 0
    assert run.result()["status"] == "passed"
    (error,) = [e for e in run.transcript() if e["kind"] == "error"]
    assert error["failure"] == "stream_malformed" and '"hal' in error["evidence"]


def test_a_slow_drip_ends_at_the_request_timeout(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an SSE comment every 0.2 s never makes the SDK yield a chunk, and never lets a read
    # time out: only a limit under the decoder ends it
    server.add(Raw([b": keep-alive\n"] * 1500, delay_s=0.2))  # 300 s of comments
    settings = {"retries": 0, "request_timeout_s": 1.5}
    run = model_task(tmp_path, server, monkeypatch, backend_settings=settings)
    started = time.monotonic()
    assert run.run() == 1
    assert time.monotonic() - started < 120  # far from the drip's end, however busy the machine
    result = run.result()
    assert result["duration_s"] < 30
    assert result["reason"] == "agent_error"
    assert "within the request timeout of 1.5 s" in result["error"]


def test_the_cli_process_never_exits_70_on_bad_json(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed's soak failure, as the user saw it: a real process, a real exit code."""
    server.add(*[Raw([ROLE, b"data: {not json}\n\n"])] * 3)
    run = model_task(tmp_path, server, monkeypatch, backend_settings={"retries": 2})
    proc = run.run_process()
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "a data line is not JSON" in proc.stderr and server.base_url in proc.stderr

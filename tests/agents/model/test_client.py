"""The model client's cap on one turn's answer: a stream larger than `max_response_bytes`
(however well-formed its lines) ends the call at once with its own failure kind, unretried;
the round ends with `agent_error` and a message that says what to change; the transcript
holds the failure and a bounded piece of the answer, not the answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner.testing.chat_completions import ChatCompletions
from code_runner.testing.scripted_server import Raw, ScriptedServer
from tests.helpers.model_runs import model_task, no_workspaces
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.e2e

CAP = 64 * 1024
CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 4000 + b'"}}]}\n\n'


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ChatCompletions()) as scripted:
        yield scripted


def test_an_answer_larger_than_the_cap_ends_the_round_with_its_own_error(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.add(Raw([CHUNK] * 1000))  # 4 MB of well-formed content chunks
    settings = {"retries": 2, "max_response_bytes": CAP}
    run = model_task(tmp_path, server, monkeypatch, backend_settings=settings)
    before = fingerprint(run.source)
    assert run.run() == 1
    assert len(server.stream_requests()) == 1  # not retried: the same answer would come
    result = run.result()
    assert result["reason"] == "agent_error"
    assert f"larger than max_response_bytes = {CAP} bytes" in result["error"]
    assert "Fix:" in result["error"] and "max_tokens" in result["error"]
    (error,) = [e for e in run.transcript() if e["kind"] == "error"]
    assert error["failure"] == "response_too_large"
    assert error["evidence"] and len(error["evidence"].encode()) < 1200
    assert not [e for e in run.transcript() if e["kind"] == "response"]
    transcript = run.out / f"{run.task_id}.transcript.jsonl"
    assert transcript.stat().st_size < CAP, "the transcript holds the failure, not the answer"
    assert "Traceback" not in capsys.readouterr().err
    assert fingerprint(run.source) == before
    assert no_workspaces()

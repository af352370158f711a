"""What one model call puts on the wire, through the real `openai` SDK: the body as built,
at the base URL's path, with the headers a Chat Completions server needs and the backend's
own, and none of the SDK's telemetry headers (`X-Stainless-*`), on every call of a client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2._urlparse
import httpx2._urls
import openai
import pytest

from code_runner.agents.model.client import OpenAIChatClient
from code_runner.agents.model.transcript import FailureKind, ModelError, Transcript
from code_runner.config import OpenAIBackend
from code_runner.testing.chat_completions import ChatCompletions, Turn
from code_runner.testing.scripted_server import ScriptedServer

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "hi"}]
# what the SDK and httpx send for a call, whatever the backend's settings
SENT = {
    "host",
    "accept",
    "accept-encoding",
    "connection",
    "authorization",
    "content-type",
    "content-length",
    "user-agent",
}


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ChatCompletions()) as scripted:
        yield scripted


def _client(base_url: str, tmp_path: Path, **settings: object) -> OpenAIChatClient:
    backend = OpenAIBackend(base_url=base_url, model="scripted-model", retries=0, **settings)
    return OpenAIChatClient(backend, api_key="k-1", transcript=Transcript(tmp_path / "t.jsonl"))


def test_every_call_sends_the_body_and_the_needed_headers_only(
    server: ScriptedServer, tmp_path: Path
) -> None:
    calls = 3
    server.add(*[Turn(content=f"answer {n}") for n in range(calls)])
    headers = {"X-Team": "compilers", "X-Stainless-Lang": "set-by-the-backend"}
    client = _client(server.base_url + "/", tmp_path, headers=headers, max_tokens=64)
    for n in range(calls):
        turn = client.complete(MESSAGES, [], deadline=None, tag={"round": 1, "turn": n})
        assert turn.content == f"answer {n}"
    requests = server.stream_requests()
    assert len(requests) == calls
    for request in requests:
        assert (request.method, request.path) == ("POST", "/v1/chat/completions")
        assert request.body == json.loads(json.dumps(client.body(MESSAGES, [])))
        assert set(request.headers) == SENT | {"x-team", "x-stainless-lang"}, request.headers
        assert request.headers["authorization"] == "Bearer k-1"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["user-agent"] == f"OpenAI/Python {openai.__version__}"
        assert request.headers["x-team"] == "compilers"
        assert request.headers["x-stainless-lang"] == "set-by-the-backend"


def test_each_client_joins_its_own_base_url(server: ScriptedServer, tmp_path: Path) -> None:
    server.add(Turn(content="here"))
    here = _client(server.base_url, tmp_path)
    elsewhere = _client(server.origin + "/v2", tmp_path)
    assert here.complete(MESSAGES, [], deadline=None, tag={"turn": 1}).content == "here"
    with pytest.raises(ModelError) as failed:
        elsewhere.complete(MESSAGES, [], deadline=None, tag={"turn": 2})
    assert failed.value.kind is FailureKind.HTTP_STATUS and failed.value.status == 404
    paths = [r.path for r in server.requests]
    assert paths == ["/v1/chat/completions", "/v2/chat/completions"]
    assert set(server.requests[0].headers) == SENT


def test_a_client_parses_its_request_url_once(
    server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK hands httpx each request's URL as text; parsing it is the largest single
    cost of building a request, so a client parses it on its first call only."""
    parsed: list[str] = []
    parse = httpx2._urlparse.urlparse  # what httpx2.URL parses text with

    def counted(url: str = "", **kwargs: Any) -> Any:
        parsed.append(url)
        return parse(url, **kwargs)

    monkeypatch.setattr(httpx2._urls, "urlparse", counted)
    calls = 4
    server.add(*[Turn(content=f"answer {n}") for n in range(calls)])
    client = _client(server.base_url, tmp_path)
    first = client.complete(MESSAGES, [], deadline=None, tag={"turn": 0})
    parsed_first = len(parsed)
    for n in range(1, calls):
        turn = client.complete(MESSAGES, [], deadline=None, tag={"turn": n})
        assert turn.content == f"answer {n}"
    assert first.content == "answer 0"
    assert len(parsed) == parsed_first, parsed[parsed_first:]
    assert [r.path for r in server.stream_requests()] == ["/v1/chat/completions"] * calls

"""One connection for a whole run: the client reads each answer's end-of-body after
`[DONE]`, so the next turn reuses the connection, and a server that never ends its body
after `[DONE]` costs at most the drain's bound, not the answer. The guard's line limit
holds however the body is cut into chunks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from code_runner.agents.model.client import OpenAIChatClient
from code_runner.agents.model.stream_guard import DRAIN_S, MalformedStream, StreamGuard
from code_runner.agents.model.transcript import Transcript
from code_runner.config import OpenAIBackend
from code_runner.testing.chat_completions import ChatCompletions, Turn
from code_runner.testing.scripted_server import Raw, ScriptedServer

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "hi"}]
STALL_S = 1.0
ANSWER = (
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"ok"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ChatCompletions()) as scripted:
        yield scripted


def _client(server: ScriptedServer, tmp_path: Path) -> OpenAIChatClient:
    settings = OpenAIBackend(base_url=server.base_url, model="scripted-model", retries=0)
    return OpenAIChatClient(settings, api_key="test", transcript=Transcript(tmp_path / "t.jsonl"))


def test_every_turn_of_a_run_reuses_one_connection(server: ScriptedServer, tmp_path: Path) -> None:
    turns = 12
    server.add(*[Turn(content=f"answer {n}") for n in range(turns)])
    client = _client(server, tmp_path)
    for n in range(turns):
        turn = client.complete(MESSAGES, [], deadline=None, tag={"round": 1, "turn": n})
        assert turn.content == f"answer {n}"
    assert len(server.stream_requests()) == turns
    assert server.connections == 1


def test_a_body_left_open_after_done_costs_the_drain_bound_not_the_answer(
    server: ScriptedServer, tmp_path: Path
) -> None:
    # the whole answer, [DONE] included, then the body stays open for STALL_S
    server.add(Raw([ANSWER, b": late\n\n"], delay_s=STALL_S), Turn(content="next"))
    client = _client(server, tmp_path)
    started = time.monotonic()
    turn = client.complete(MESSAGES, [], deadline=None, tag={"round": 1, "turn": 1})
    waited = time.monotonic() - started
    assert turn.content == "ok" and turn.finish_reason == "stop"
    assert waited < 2 * STALL_S - 0.3, f"the drain waited for the server ({waited:.2f} s)"
    assert waited < STALL_S + DRAIN_S + 0.5
    nxt = client.complete(MESSAGES, [], deadline=None, tag={"round": 1, "turn": 2})
    assert nxt.content == "next"
    assert server.connections == 2  # the hung-up connection was not reused


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(
        st.tuples(st.integers(0, 300), st.sampled_from([b"\n", b"\r", b"\r\n"])),
        min_size=1,
        max_size=12,
    ),
    cuts=st.lists(st.integers(1, 200), max_size=30),
    limit=st.integers(40, 250),
)
def test_the_line_limit_holds_however_the_body_is_cut(
    lines: list[tuple[int, bytes]], cuts: list[int], limit: int
) -> None:
    body = b"".join(bytes([65 + n % 26]) * length + end for n, (length, end) in enumerate(lines))
    chunks, start = [], 0
    for size in cuts:
        chunks.append(body[start : start + size])
        start += size
    chunks.append(body[start:])
    guard = StreamGuard(limit_s=60, max_line_bytes=limit)
    too_long = [(n, length) for n, (length, _) in enumerate(lines) if length > limit]
    if not too_long:
        assert b"".join(guard.watch(iter(chunks))) == body
        return
    with pytest.raises(MalformedStream, match="longer than max_stream_line_bytes") as cut:
        for _ in guard.watch(iter(chunks)):
            pass
    n, length = too_long[0]  # the first line over the limit, its first bytes as evidence
    assert cut.value.evidence.startswith(chr(65 + n % 26) * min(length, 30))

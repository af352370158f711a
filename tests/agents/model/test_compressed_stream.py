"""A compressed stream reaches the guard only as it decodes: a server that trickles empty
deflate blocks under `Content-Encoding: gzip` must still end at the request timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from code_runner.agents.model.client import OpenAIChatClient
from code_runner.agents.model.transcript import ModelError, Transcript
from code_runner.config import OpenAIBackend
from code_runner.testing.chat_completions import ChatCompletions
from code_runner.testing.scripted_server import Raw, ScriptedServer

GZIP_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
EMPTY_BLOCK = b"\x00\x00\x00\xff\xff"  # a stored deflate block of no bytes


def test_a_gzip_trickle_of_empty_blocks_ends_at_the_request_timeout(tmp_path: Path) -> None:
    with ScriptedServer(ChatCompletions()) as server:
        server.add(
            Raw(
                [GZIP_HEAD] + [EMPTY_BLOCK] * 200, delay_s=0.1, headers={"Content-Encoding": "gzip"}
            )
        )
        settings = OpenAIBackend(
            model="m", base_url=server.base_url, retries=0, request_timeout_s=1.0
        )
        client = OpenAIChatClient(
            settings, api_key="k", transcript=Transcript(tmp_path / "t.jsonl")
        )
        started = time.monotonic()
        with pytest.raises(ModelError):
            client.complete([{"role": "user", "content": "hi"}], [], deadline=None, tag={})
        assert time.monotonic() - started < 10, "the trickle outlived the request timeout"
        (request,) = server.stream_requests()
        assert request.headers.get("accept-encoding") == "identity"

"""The model backend behind a real LiteLLM proxy (`litellm[proxy]`, on loopback) in front of
the scripted server: a key the gateway refuses stops the run at preflight, and the right key
runs end to end with streamed tool calls, usage and cost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner.testing.chat_completions import ChatCompletions
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.litellm_proxy import MASTER_KEY, Proxy, litellm_proxy
from tests.helpers.model_runs import (
    FIXED_BOTH,
    KEY_ENV,
    Turn,
    model_task,
    no_workspaces,
    write,
)

pytestmark = pytest.mark.e2e

PRICES = (10.0, 50.0)  # USD per million input and output tokens, at the gateway and here


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer(ChatCompletions()) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    with litellm_proxy(upstream.base_url, tmp_path_factory.mktemp("litellm"), prices=PRICES) as p:
        yield p


def backend(proxy: Proxy) -> dict[str, object]:
    return {
        "base_url": proxy.base_url,
        "price_in_per_mtok": PRICES[0],
        "price_out_per_mtok": PRICES[1],
        "request_timeout_s": 30.0,
    }


def test_a_key_the_gateway_refuses_stops_the_run_at_preflight(
    tmp_path: Path,
    upstream: ScriptedServer,
    gateway: Proxy,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = len(upstream.stream_requests())
    run = model_task(tmp_path, upstream, monkeypatch, backend_settings=backend(gateway))
    assert run.run() == 3  # the test key is not the proxy's master key
    err = capsys.readouterr().err
    assert "the gateway refused the key" in err and "HTTP 400" in err
    assert "No connected db" in err  # LiteLLM's own words, quoted
    assert f"${KEY_ENV}" in err and "master_key" in err and "Traceback" not in err
    assert not run.out.exists() and no_workspaces()
    assert len(upstream.stream_requests()) == before  # no model call was spent


def test_the_right_key_runs_end_to_end_with_usage_and_cost(
    tmp_path: Path,
    upstream: ScriptedServer,
    gateway: Proxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream.add(
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)], argument_chunk_chars=7),
        Turn(content="Fixed."),
    )
    run = model_task(tmp_path, upstream, monkeypatch, backend_settings=backend(gateway))
    monkeypatch.setenv(KEY_ENV, MASTER_KEY)
    done = run.run_process()  # `code-runner run` in a process of its own, as a user runs it
    assert done.returncode == 0, done.stderr
    result = run.result()
    assert (result["status"], result["reason"]) == ("passed", "dod_passed")
    usage = result["usage"]
    assert usage["model_calls"] == 2 and usage["usage_reported"] is True
    tokens_in, tokens_out = usage["prompt_tokens"], usage["completion_tokens"]
    assert tokens_in > 0 and tokens_out > 0  # the upstream's usage came through the gateway
    expected = (tokens_in * PRICES[0] + tokens_out * PRICES[1]) / 1e6
    assert usage["cost_usd"] == pytest.approx(expected, abs=1e-6)

"""The model loop under the run's timeout: a model that asks for a long command gets it cut
at the run's deadline, gets no further turn, and the run ends as `run_timeout` within the
timeout and a small grace, never as passed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner.testing.chat_completions import ChatCompletions, Turn, call
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.model_runs import FIXED_BOTH, model_task, no_workspaces, write

pytestmark = pytest.mark.e2e


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ChatCompletions()) as scripted:
        yield scripted


def test_the_run_timeout_cuts_a_long_command_and_ends_the_model_loop(
    tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add(
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)]),
        Turn(tool_calls=[call("run_command", command="sleep 300", timeout_s=600)]),
        Turn(tool_calls=[call("run_command", command="echo one more")]),
        Turn(content="done"),
    )
    # the DoD would pass after a long sleep; it fails at once on base
    dod = "grep -q 'a [*] b' calc.py && sleep 300"
    # long enough for start-up and two model calls on a busy machine; the sleeps outlast it
    timeout_s = 12
    run = model_task(tmp_path, server, monkeypatch, command=dod, timeout_s=timeout_s)
    started = time.monotonic()
    assert run.run() == 124  # the documented timeout exit, as `exec` and timeout(1)
    # far from the sleeps' 300 s: the start-up before the run and the release after its
    # timeout are all a busy machine can add
    assert time.monotonic() - started < 120
    result = run.result()
    assert result["duration_s"] < timeout_s + 30
    assert (result["status"], result["reason"]) == ("failed", "run_timeout")
    assert len(server.stream_requests()) == 2, "no model call after the deadline"
    stops = [e for e in run.transcript() if e["kind"] == "stop"]
    assert stops[-1]["stop"] == "timeout"
    assert no_workspaces()

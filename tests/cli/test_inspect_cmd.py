"""`status`, `watch`, `result` and `summarize` on a real model-backend run: the run's tokens
and cost at the top of the record and on every screen, the apply decision, and every event
said in words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner.cli.boundary import run_cli as invoke
from code_runner.cli.main import cli
from code_runner.cli.narrate import narrate
from code_runner.events import EventKind
from code_runner.testing.chat_completions import ChatCompletions
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.model_runs import FIXED_BOTH, ModelRun, Turn, model_task, write

pytestmark = pytest.mark.e2e

PRICES = {"price_in_per_mtok": 10.0, "price_out_per_mtok": 50.0}
# two model calls of 100 prompt and 20 completion tokens: 200 * 10e-6 + 40 * 50e-6
COST = "$0.0040"


@pytest.fixture
def priced_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[ModelRun]:
    with ScriptedServer(ChatCompletions()) as server:
        server.add(Turn(tool_calls=[write("calc.py", FIXED_BOTH)]), Turn(content="Fixed."))
        run = model_task(tmp_path, server, monkeypatch, backend_settings=PRICES)
        assert run.run() == 0
    assert f"usage:  2 model calls, 240 tokens (200 in, 40 out), {COST}" in capsys.readouterr().err
    yield run


def said(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    invoke(cli, list(args))
    out = capsys.readouterr().out
    assert "Traceback" not in out
    return out


def test_usage_and_cost_are_at_the_top_and_on_every_screen(
    priced_run: ModelRun, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(priced_run.out)
    usage = priced_run.result()["usage"]
    assert usage == {
        "model_calls": 2,
        "prompt_tokens": 200,
        "completion_tokens": 40,
        "total_tokens": 240,
        "usage_reported": True,
        "price_known": True,
        "cost_usd": pytest.approx(0.004),
    }
    status = json.loads((priced_run.out / "fix-calc.status.json").read_text())
    assert status["usage"]["total_tokens"] == 240
    words = "2 model calls, 240 tokens (200 in, 40 out), " + COST
    assert words in said(capsys, "status", out)
    assert words in said(capsys, "result", out)
    assert words in said(capsys, "watch", out, "--interval", "0.1")
    line = said(capsys, "summarize", str(priced_run.root))
    assert "240 tok " + COST in line and "240 tokens, " + COST in line
    data = json.loads(said(capsys, "summarize", str(priced_run.root), "--json"))
    assert data["runs"][0]["cost_usd"] == pytest.approx(0.004)
    assert data["totals"]["tokens"] == 240


def test_the_apply_decision_is_shown(
    priced_run: ModelRun, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(priced_run.out)
    assert "apply: not applied" in said(capsys, "result", out)
    assert invoke(cli, ["apply", out, "--commit", "--author", "Ann <ann@example.com>"]) == 0
    capsys.readouterr()
    assert "apply: committed " in said(capsys, "result", out)
    assert "fix-calc (dod_passed, committed)" in said(capsys, "summarize", str(priced_run.root))
    assert "apply: committed" in said(capsys, "watch", out, "--interval", "0.1")


def test_watch_says_what_happened_without_the_json(
    priced_run: ModelRun, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = said(capsys, "watch", str(priced_run.out), "--interval", "0.1").splitlines()
    text = "\n".join(lines)
    for expected in (
        "run started: task fix-calc with scripted-llm",
        "round 0 (base): the DoD failed",
        "round 1: model turn 1 asked for write_file",
        "round 1: tool write_file ok",
        "round 1: the agent stopped (done) after 2 turn(s); so far 2 model calls",
        "round 1: audit: 1 allowed change(s) (calc.py)",
        "round 1: the DoD passed",
        "the patch changes calc.py",
        "the source repo is unchanged",
        "run finished: passed (dod_passed)",
    ):
        assert expected in text, expected
    assert "{" not in text and "state_changed" not in text  # no raw event dicts or names


@pytest.mark.parametrize("kind", list(EventKind))
def test_every_event_kind_has_words_and_a_bad_event_is_never_dropped(kind: EventKind) -> None:
    bare = narrate({"kind": kind.value, "round": 1})
    assert bare and "{" not in bare
    odd = narrate({"kind": kind.value, "round": 2, "score": "high", "paths": 3})
    assert odd


def test_an_unknown_event_is_shown_with_its_fields() -> None:
    assert narrate({"kind": "new_thing", "round": 3, "ts": "x", "what": "it"}) == (
        "round 3: new thing: what it"
    )

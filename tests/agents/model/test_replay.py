"""Replay: a recorded run re-run from its transcript with no network gives the same tool
calls, the same patch and the same result (timestamps, run ids and paths aside)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from code_runner import files
from code_runner.cli.boundary import run_cli as invoke
from code_runner.cli.main import cli
from code_runner.cli.replay_cmd import comparable
from code_runner.record import load_result
from code_runner.testing.chat_completions import ChatCompletions
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.git import make_repo
from tests.helpers.model_runs import FIXED_ADD, FIXED_BOTH, Turn, call, model_task, write
from tests.helpers.records import reseal, sealed_copy
from tests.helpers.tasks import run_cli

pytestmark = pytest.mark.e2e

RECORDED = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "recorded"
FIXTURES = sorted(p.name for p in RECORDED.iterdir() if (p / "source.json").is_file())


def tool_calls(transcript: Path) -> list[tuple[int, str, str]]:
    return [
        (e["round"], c["name"], c["arguments"])
        for e in files.read_jsonl(transcript)
        if e["kind"] == "response"
        for c in e["tool_calls"]
    ]


def result(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def test_fixtures_are_the_expected_runs() -> None:
    assert len(FIXTURES) >= 3
    reasons = {name: result(RECORDED / name / f"{name}.result.json")["reason"] for name in FIXTURES}
    assert reasons == {
        "two-rounds-fix": "dod_passed",
        "turn-budget": "budget_turns",
        "errors-then-400": "agent_error",
    }


@pytest.mark.parametrize("name", FIXTURES)
def test_recorded_run_replays_identically(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = sealed_copy(RECORDED / name, tmp_path / "recorded", name)
    source = make_repo(tmp_path / "source", json.loads((recorded / "source.json").read_text()))
    out = tmp_path / "replay"
    code = invoke(cli, ["replay", str(recorded), "--source", str(source), "--output-dir", str(out)])
    assert code == 0, capsys.readouterr()
    assert "reproduced" in capsys.readouterr().out
    assert (out / f"{name}.patch").read_bytes() == (recorded / f"{name}.patch").read_bytes()
    before = comparable(load_result(recorded / f"{name}.result.json"))
    after = comparable(load_result(out / f"{name}.result.json"))
    assert after == before
    assert tool_calls(out / f"{name}.transcript.jsonl") == tool_calls(
        recorded / f"{name}.transcript.jsonl"
    )


def test_replay_of_a_fresh_recording_in_a_real_process_with_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = [
        Turn(tool_calls=[call("read_file", path="calc.py"), write("calc.py", FIXED_ADD)]),
        Turn(content="add fixed"),
        Turn(tool_calls=[write("calc.py", FIXED_BOTH)], argument_chunk_chars=2),
        Turn(content="mul fixed"),
    ]
    with ScriptedServer(ChatCompletions(), steps) as server:
        run = model_task(tmp_path, server, monkeypatch, max_rounds=2)
        assert run.run() == 0
    # the server is gone; the replay must not need it (nor the key)
    monkeypatch.delenv("CR_TEST_MODEL_KEY")
    proc = run_cli("replay", str(run.out), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["reproduced"] is True and report["differences"] == {}
    replayed = run.out / "replay"
    assert (replayed / "fix-calc.patch").read_bytes() == run.patch()
    assert result(replayed / "fix-calc.result.json")["status"] == "passed"
    session = files.read_jsonl(replayed / "fix-calc.transcript.jsonl")[0]
    assert session["backend"] == "replay" and session["recorded_backend"] == "scripted-llm"


def test_a_replay_that_diverges_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "two-rounds-fix"
    recorded = tmp_path / "recorded"
    sealed_copy(RECORDED / name, recorded, name)
    transcript = recorded / f"{name}.transcript.jsonl"
    lines = transcript.read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    cut = next(i for i, e in enumerate(entries) if e["kind"] == "response" and e["round"] == 2)
    transcript.write_text("\n".join(lines[:cut]) + "\n")  # round 2 has no answers left
    assert invoke(cli, ["replay", str(recorded)]) == 5  # an edited record is refused
    assert f"{transcript} was changed after the run" in capsys.readouterr().err
    reseal(recorded, name)  # as if the run had recorded this transcript
    source = make_repo(tmp_path / "source", json.loads((recorded / "source.json").read_text()))
    code = invoke(cli, ["replay", str(recorded), "--source", str(source)])
    assert code == 1
    out = capsys.readouterr().out
    assert "differs" in out and "reason" in out
    replayed = result(recorded / "replay" / f"{name}.result.json")
    assert "the replay diverged from the recorded run" in replayed["error"]


def test_replay_of_a_directory_without_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert invoke(cli, ["replay", str(tmp_path)]) == 5
    err = capsys.readouterr().err
    assert "holds 0 *.request.json" in err and "Fix:" in err and "Traceback" not in err

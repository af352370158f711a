"""The pieces of the model backend that need no server: config, argument repair,
Retry-After, budgets, and reading a transcript back."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from code_runner import config
from code_runner.agents.base import BudgetKind
from code_runner.agents.model.arguments import parse_arguments
from code_runner.agents.model.budget import Budget
from code_runner.agents.model.client import retry_after_s
from code_runner.agents.model.transcript import (
    FailureKind,
    ModelError,
    ModelTurn,
    ToolCallData,
    Transcript,
    Usage,
    read_recording,
)
from code_runner.errors import RecordError, SpecError

# --- config ---------------------------------------------------------------------------


def test_builtin_openai_backend_without_any_file(tmp_path: Path) -> None:
    cfg = config.load_config(tmp_path)
    assert cfg.source is None and cfg.origin == "built-in defaults"
    openai = cfg.backends["openai"]
    assert (openai.base_url, openai.model, openai.api_key_env) == (None, None, "OPENAI_API_KEY")
    assert config.resolve(cfg, "openai", "gpt-x").model == "gpt-x"  # type: ignore[union-attr]
    assert config.resolve(cfg, "nope", None) is None


def test_precedence_explicit_then_user_over_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = config.user_config_path()
    user.parent.mkdir(parents=True)
    user.write_text('[budget]\nturns_per_round = 3\n[backends.a]\nmodel = "from-user"\n')
    repo = tmp_path / "repo"
    repo.mkdir()
    assert config.load_config(repo).backends["a"].model == "from-user"
    (repo / "code-runner.toml").write_text(
        "[budget]\nturns_per_round = 9\ntokens_per_run = 5000\n"
        '[backends.a]\nmodel = "from-repo"\n[backends.b]\nmodel = "repo-only"\n'
    )
    cfg = config.load_config(repo)
    assert cfg.backends["a"].model == "from-user"  # the user's config wins every clash
    assert cfg.backends["b"].model == "repo-only"  # an untrusted repo may add a model entry
    assert (cfg.budget.turns_per_round, cfg.budget.tokens_per_run) == (3, 5000)
    assert cfg.sources == (user, repo / "code-runner.toml")
    explicit = tmp_path / "x.toml"
    explicit.write_text('[backends.a]\nmodel = "explicit"\n')
    monkeypatch.setenv(config.CONFIG_ENV, str(explicit))
    assert config.load_config(repo).backends["a"].model == "explicit"


def test_budget_defaults_and_per_backend_overrides() -> None:
    cfg = config.parse_config(
        {
            "budget": {"turns_per_round": 7, "tokens_per_run": 1000},
            "backends": {"b": {"model": "m", "budget": {"tokens_per_run": 50}}},
        }
    )
    assert cfg.budget_for(cfg.backends["openai"]).tokens_per_run == 1000
    limits = cfg.budget_for(cfg.backends["b"])
    assert (limits.turns_per_round, limits.tokens_per_run) == (7, 50)


def test_every_config_problem_at_once() -> None:
    with pytest.raises(SpecError) as info:
        config.parse_config(
            {
                "budjet": {},
                "budget": {"turns_per_round": 0},
                "backends": {
                    "a": {"kind": "telepathy"},
                    "b": {"model": 3, "tool_choice": "sometimes", "budget": {"tokens_per_run": -1}},
                    "9bad": {},
                },
            }
        )
    problems = info.value.problems
    assert len(problems) == 7, problems
    text = "\n".join(problems)
    for needle in (
        "unknown table 'budjet'; did you mean 'budget'?",
        "budget.turns_per_round:",
        "unknown kind 'telepathy'; the kinds are: openai",
        "backends.b.model: expected a string, got a whole number 3",
        "backends.b.tool_choice:",
        "backends.b.budget.tokens_per_run:",
        "backends.9bad:",
    ):
        assert needle in text


def test_a_toml_syntax_error_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "code-runner.toml").write_text("[backends.a\n")
    with pytest.raises(SpecError, match="TOML syntax error"):
        config.load_config(tmp_path)


# --- arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "repair"),
    [
        ('{"path": "a.py"}', {"path": "a.py"}, None),
        ("", {}, None),
        ('```json\n{"path": "a.py"}\n```', {"path": "a.py"}, "code fence"),
        (
            '{"path": "a.py", "lines": [1, 2,],}',
            {"path": "a.py", "lines": [1, 2]},
            "trailing comma",
        ),
        ('{"path": "a.py"}{"path": "a.py"}', {"path": "a.py"}, "repeated object"),
        ("{'path': 'a.py', 'force': True}", {"path": "a.py", "force": True}, "python literal"),
    ],
)
def test_arguments_strict_then_safely_repaired(
    text: str, value: dict[str, object], repair: str | None
) -> None:
    parsed = parse_arguments(text)
    assert (parsed.value, parsed.repair, parsed.problem) == (value, repair, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"path": "a.py", "content": "def f(', "not valid JSON"),  # truncated: not guessed
        ('{"a": 1}{"a": 2}', "not valid JSON"),  # two different objects: which one?
        ('["a.py"]', "must be a JSON object, not list"),
        ("{'x': __import__('os')}", "not valid JSON"),  # never evaluated
    ],
)
def test_arguments_that_are_refused(text: str, problem: str) -> None:
    parsed = parse_arguments(text)
    assert parsed.value is None and problem in (parsed.problem or "")


# --- Retry-After ----------------------------------------------------------------------


def test_retry_after_forms() -> None:
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after": "0.5"}) == 0.5
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # past
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


# --- budgets --------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def budget(clock: Clock, price: float | None = None, **limits: object) -> Budget:
    return Budget(
        config.BudgetConfig.model_validate(limits),
        price_in_per_mtok=price,
        price_out_per_mtok=price,
        clock=clock,
    )


def test_each_budget_names_itself() -> None:
    clock = Clock()
    b = budget(clock, turns_per_round=2, round_wall_clock_s=5, run_wall_clock_s=8)
    b.start_round()
    assert b.check(1) is None
    assert b.check(2).kind is BudgetKind.TURNS  # type: ignore[union-attr]
    assert b.deadline() == 105.0
    clock.now = 105.0
    assert b.check(0).kind is BudgetKind.WALL_CLOCK  # type: ignore[union-attr]
    b.start_round()
    assert b.deadline() == 108.0  # the run's end is nearer than the round's
    clock.now = 108.0
    exceeded = b.check(0)
    assert exceeded is not None and "run's wall-clock budget of 8 s" in exceeded.message


def test_tokens_and_cost_from_reported_usage() -> None:
    b = budget(Clock(), price=2.0, tokens_per_run=1000, cost_per_run_usd=0.0015)
    b.start_round()
    b.add(Usage(400, 100))
    assert b.check(0) is None and b.cost_usd == pytest.approx(0.001)
    b.add(Usage(300, 100))
    exceeded = b.check(0)
    assert exceeded is not None and exceeded.kind is BudgetKind.COST
    b.add(Usage(100, 0))
    assert b.check(0).kind is BudgetKind.TOKENS  # type: ignore[union-attr]


def test_unknown_price_is_never_zero_and_missing_usage_stops_a_token_budget() -> None:
    free = budget(Clock())
    free.start_round()
    free.add(Usage(10, 10))
    assert free.summary()["cost_usd"] is None and free.summary()["price_known"] is False
    capped = budget(Clock(), tokens_per_run=10_000)
    capped.start_round()
    capped.add(None)
    exceeded = capped.check(0)
    assert exceeded is not None and exceeded.kind is BudgetKind.TOKENS
    assert "reported no token usage" in exceeded.message
    assert capped.summary()["usage_reported"] is False


# --- transcripts ----------------------------------------------------------------------


def test_a_transcript_reads_back_as_calls_and_stops(tmp_path: Path) -> None:
    path = tmp_path / "t.transcript.jsonl"
    transcript = Transcript(path)
    transcript.write("session", backend="x", budget={})
    turn = ModelTurn(
        "hi", (ToolCallData("c1", "read_file", '{"path": "a"}'),), "tool_calls", Usage(1, 2)
    )
    transcript.write("request", round=1, turn=1, attempt=1, body={})
    transcript.write("error", round=1, turn=1, attempt=1, failure="timeout", retry_in_s=0.5)
    transcript.write("response", round=1, turn=1, attempt=2, **turn.to_record())
    error = ModelError(FailureKind.HTTP_STATUS, "HTTP 400: no", status=400)
    transcript.write("error", round=2, turn=1, attempt=1, retry_in_s=None, **error.to_record())
    transcript.write("stop", round=2, stop="error", budget=None, turns=0)
    recording = read_recording(path)
    assert recording.session["backend"] == "x"
    (call,) = recording.round(1).calls
    assert isinstance(call, ModelTurn) and call.tool_calls == turn.tool_calls
    assert call.usage == Usage(1, 2)
    (failed,) = recording.round(2).calls
    assert isinstance(failed, ModelError) and failed.kind is FailureKind.HTTP_STATUS
    assert failed.status == 400 and recording.round(2).stop["stop"] == "error"  # type: ignore[index]


def test_not_a_transcript(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no transcript"):
        read_recording(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"kind": "request"}) + "\n")
    with pytest.raises(RecordError, match="no session line"):
        read_recording(bad)
    bad.write_text(
        json.dumps({"kind": "session"}) + "\n" + json.dumps({"kind": "error", "round": 1}) + "\n"
    )
    with pytest.raises(RecordError, match="not a valid transcript line"):
        read_recording(bad)


def _descriptors_on(path: Path) -> list[str]:
    """This process's descriptors open on the file at `path` (matched by device and inode)."""
    want = (path.stat().st_dev, path.stat().st_ino)
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            info = fd.stat()
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if (info.st_dev, info.st_ino) == want:
            found.append(fd.name)
    return found


def test_a_transcript_appends_through_one_descriptor_held_open(tmp_path: Path) -> None:
    path = tmp_path / "t.transcript.jsonl"
    transcript = Transcript(path)
    transcript.write("session", backend="x", budget={})
    held = _descriptors_on(path)
    transcript.write("request", round=1, turn=1, attempt=1, body={"name": "\udcff"})
    assert len(held) == 1 and _descriptors_on(path) == held  # not reopened per line
    raw = path.read_bytes()
    raw.decode("utf-8")  # a lone surrogate is escaped, the file stays UTF-8
    assert [json.loads(line)["seq"] for line in raw.splitlines()] == [1, 2]
    assert "\\xff" in json.loads(raw.splitlines()[1])["body"]["name"]
    transcript.close()
    assert _descriptors_on(path) == []
    transcript.write("stop", round=1, stop="done")  # opened again, appended after the rest
    assert [json.loads(line)["seq"] for line in path.read_bytes().splitlines()] == [1, 2, 3]
    del transcript
    assert _descriptors_on(path) == []  # let go of with the transcript


def test_a_killed_writer_leaves_every_transcript_line_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "t.transcript.jsonl"
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from code_runner.agents.model.transcript import Transcript\n"
        "t = Transcript(Path(sys.argv[1]))\n"
        "t.write('session', backend='x', budget={})\n"
        "for n in range(1, 51):\n"
        "    t.write('request', round=1, turn=n, attempt=1, body={'messages': ['x' * 500] * n})\n"
        "    t.write('response', round=1, turn=n, attempt=1, content='ok', tool_calls=[],\n"
        "            finish_reason='stop', usage=None, chunks=1, duration_s=0.0, ttft_s=0.0)\n"
        "print('written', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "written\n"
        child.send_signal(signal.SIGKILL)  # mid-run: the transcript is still open
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    recording = read_recording(path)
    assert [call.content for call in recording.round(1).calls] == ["ok"] * 50  # type: ignore[union-attr]
    assert len(path.read_bytes().splitlines()) == 101

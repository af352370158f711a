"""Agent CLI backends without processes: the contract, blockers, settings, translation,
the hermetic command lines and redaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from code_runner.agents.cli_agents.agent import Invocation, LaunchRequest
from code_runner.agents.cli_agents.blockers import BlockerKind, classify
from code_runner.agents.cli_agents.claude import ClaudeFlavor
from code_runner.agents.cli_agents.codex import CodexFlavor
from code_runner.agents.cli_agents.command import CommandFlavor
from code_runner.agents.cli_agents.settings import CliKind, resolve
from code_runner.agents.cli_agents.translate import (
    ClaudeTranslator,
    CodexTranslator,
    PlainTranslator,
)
from code_runner.agents.redact import redact
from code_runner.errors import PreflightError, UsageError
from code_runner.events import EventKind, ListSink
from code_runner.task import contract, validate_spec_data
from code_runner.verify import Verdict

# --- the contract ---------------------------------------------------------------------


def _task(tmp_path: Path, **extra: Any) -> Any:
    data = {
        "task_id": "t",
        "title": "Fix it",
        "prompt": "Make add add.",
        "backend": "codex-cli",
        "cwd": str(tmp_path),
        "output_dir": str(tmp_path.parent / "out"),
        "allowlist": ["src/calc.py", "tests"],
        "definition_of_done": {"command": "pytest -q", "assertion": "exit_code == 0"},
        **extra,
    }
    return validate_spec_data(data, base_dir=tmp_path, source="spec", check_repo=False)


def test_the_prompt_states_objective_owned_paths_non_goals_acceptance_and_the_block(
    tmp_path: Path,
) -> None:
    prompt = contract.build_prompt(
        _task(tmp_path, read_context=["docs/api.md"]), round_index=1, max_rounds=3
    )
    for part in (
        "## Objective\nMake add add.",
        "- `src/calc.py`\n- `tests`",
        "## Non-goals",
        "commit",
        "```\npytest -q\n```",
        "`exit_code == 0`",
        "- `docs/api.md`",
        "RESULT_STATUS: SUCCESS | PARTIAL | BLOCKED_NEEDS_DECISION | FAILED",
        "CHANGED_FILES:",
        "OPEN_DECISIONS:",
        "Must not regress",
    ):
        assert part in prompt
    assert "## Round" not in prompt


def test_a_later_round_carries_the_previous_verdict(tmp_path: Path) -> None:
    verdict = Verdict(
        passed=False,
        reason="exit 1; required exit_code == 0",
        assertion="exit_code == 0",
        exit_code=1,
        timed_out=False,
        duration_s=0.1,
        stdout_tail="x" * 5000 + "1 failed, 1 passed",
        stderr_tail="",
    )
    prompt = contract.build_prompt(_task(tmp_path), round_index=2, max_rounds=3, previous=verdict)
    assert "## Round 2 of 3" in prompt and "exit code 1" in prompt
    assert "1 failed, 1 passed" in prompt and "x" * 4000 not in prompt


def test_the_block_is_parsed_with_markdown_decoration_and_continuation_lines() -> None:
    text = (
        "Done.\n\n**RESULT_STATUS**: partial\n- SUMMARY: fixed add,\n  mul remains\n"
        "CHANGED_FILES: `src/calc.py`, ./tests/test_calc.py\n"
        "VERIFICATION: pytest -q: 1 failed, 1 passed\nOPEN_DECISIONS: none\n"
    )
    claim = contract.parse_claim(text)
    assert claim is not None
    assert claim.status is contract.WorkerStatus.PARTIAL
    assert claim.summary == "fixed add,\n  mul remains"
    assert claim.changed_files == ("src/calc.py", "tests/test_calc.py")
    assert claim.open_decisions == ()
    assert contract.parse_claim("no block here") is None
    odd = contract.parse_claim("RESULT_STATUS: mostly done")
    assert odd is not None and odd.status is None and odd.raw_status == "mostly done"


def _result(**fields: Any) -> contract.Evidence:
    base: dict[str, Any] = {
        "status": "failed",
        "reason": "dod_failed",
        "source_unchanged": True,
        "changed_paths": ("calc.py",),
        "dropped_paths": (),
        "tests_passed_base": 0,
        "tests_passed_best": 1,
    }
    return contract.Evidence(**(base | fields))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"status": "passed", "reason": "dod_passed"}, "SUCCESS"),
        ({"status": "passed", "reason": "dod_passed", "source_unchanged": False}, "FAILED"),
        ({"reason": "blocked_needs_decision"}, "BLOCKED_NEEDS_DECISION"),
        ({}, "PARTIAL"),  # one more test passes than on the base
        ({"changed_paths": ()}, "FAILED"),
        ({"reason": "safety_violation"}, "FAILED"),
        ({"tests_passed_best": None}, "FAILED"),  # no test counts: no proof of progress
    ],
)
def test_the_status_comes_from_evidence(fields: dict[str, Any], expected: str) -> None:
    assert contract.evidence_status(_result(**fields)).value == expected


def test_a_claim_that_disagrees_with_the_evidence_is_a_mismatch() -> None:
    claim = "RESULT_STATUS: SUCCESS\nCHANGED_FILES: calc.py, secret.py, notes.md"
    assessed = contract.assess(
        claim, _result(dropped_paths=("notes.md",), changed_paths=("calc.py",))
    )
    assert assessed["claimed_status"] == "SUCCESS" and assessed["evidence_status"] == "PARTIAL"
    assert assessed["mismatch"] is True
    assert "the worker claims SUCCESS, the evidence says PARTIAL" in assessed["mismatches"]
    assert "claimed as changed but not in the patch: notes.md, secret.py" in assessed["mismatches"]
    assert any("outside the owned paths" in f for f in assessed["findings"])
    agreed = contract.assess("RESULT_STATUS: PARTIAL\nCHANGED_FILES: calc.py", _result())
    assert agreed["mismatch"] is False and agreed["mismatches"] == []
    silent = contract.assess("", _result())
    assert silent["claim"] is None and silent["mismatch"] is False
    assert "no RESULT_STATUS block" in silent["findings"][0]


# --- known failure texts ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            "unexpected status 401 Unauthorized: Incorrect API key provided",
            "authentication_required",
        ),
        ("Invalid API key · Fix external API key", "authentication_required"),
        ("Missing environment variable: `OPENAI_API_KEY`.", "authentication_required"),
        ("Codex ran out of room in the model's context window.", "context_exhausted"),
        ("Prompt is too long · the request is ~250000 tokens", "context_exhausted"),
        ("Waiting for approval to run `rm -rf build`", "waiting_for_approval"),
        (
            "bwrap: setting up uid map: Permission denied (sandbox failed to start)",
            "sandbox_denied",
        ),
        ("API Error: Unable to connect to API (ConnectionRefused)", "model_server_unreachable"),
        ("Connection failed: error sending request", "model_server_unreachable"),
        ("Missing optional dependency @openai/codex-linux-x64. Reinstall Codex", "not_installed"),
        ("sh: 1: codex: command not found", "not_installed"),
    ],
)
def test_known_failure_texts(text: str, kind: str) -> None:
    found = classify(text)
    assert found is not None and found.kind is BlockerKind(kind)
    assert found.reason and found.fix


def test_ordinary_output_is_not_a_blocker() -> None:
    for text in ("Model metadata for `x` not found. Defaulting", "2 passed in 0.1s", ""):
        assert classify(text) is None


# --- settings -------------------------------------------------------------------------------


def test_options_config_entries_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "cr.toml"
    config.write_text(
        '[backends.local]\nkind = "claude-cli"\nbase_url = "http://127.0.0.1:9"\n'
        'model = "m1"\nmax_turns = 7\ntools = ["Read", "Edit"]\n'
        '[backends.mine]\nkind = "command"\ncommand = ["./agent.sh", "{prompt_file}"]\n'
    )
    monkeypatch.setenv("CODE_RUNNER_CONFIG", str(config))
    monkeypatch.setenv("CODE_RUNNER_TMUX", "1")
    local = resolve(CliKind.CLAUDE, "local", environ={"CODE_RUNNER_TMUX": "1"})
    assert (local.base_url, local.model, local.max_turns) == ("http://127.0.0.1:9", "m1", 7)
    assert local.tools == ("Read", "Edit") and local.tmux is True
    assert local.api_key_env == "ANTHROPIC_API_KEY" and local.config_backend == "local"
    override = resolve(CliKind.CLAUDE, "backend=local model=m2 tmux=off", environ={})
    assert override.model == "m2" and override.tmux is False
    as_model = resolve(CliKind.CODEX, "gpt-5-codex", environ={"CODE_RUNNER_CODEX_BIN": "/x/codex"})
    assert as_model.model == "gpt-5-codex" and as_model.program == "/x/codex"
    assert as_model.api_key_env == "OPENAI_API_KEY" and as_model.sandbox == "workspace-write"
    by_entry = resolve(CliKind.COMMAND, None, config_name="mine", environ={})
    assert by_entry.program == "./agent.sh" and by_entry.command == ("{prompt_file}",)
    words = resolve(CliKind.COMMAND, "idle_timeout_s=3 -- python3 a.py 'two words'", environ={})
    assert words.idle_timeout_s == 3.0 and words.command == ("a.py", "two words")


@pytest.mark.parametrize(
    ("kind", "arg", "words"),
    [
        (CliKind.CODEX, "sandbox=none", "is not one of"),
        (CliKind.CODEX, "retries=9", "outside 0..5"),
        (CliKind.CLAUDE, "tools=", "lists no tool"),
        (CliKind.CLAUDE, "tmux=maybe", "not true or false"),
        (CliKind.CODEX, "api_key_env=MY-KEY", "not a variable name"),
        (CliKind.COMMAND, "tmux=1 --", "no program to run"),
        (CliKind.CODEX, "model='unclosed", "cannot split"),
        (CliKind.CODEX, "model=x b", "is not a key=value option"),
    ],
)
def test_bad_options_are_usage_errors_with_a_fix(kind: CliKind, arg: str, words: str) -> None:
    with pytest.raises(UsageError) as caught:
        resolve(kind, arg, environ={})
    assert words in caught.value.message and caught.value.fix


def test_an_unknown_config_entry_is_a_preflight_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "cr.toml"
    config.write_text("")
    monkeypatch.setenv("CODE_RUNNER_CONFIG", str(config))
    with pytest.raises(PreflightError, match="defines no backend 'nope'"):
        resolve(CliKind.CODEX, "backend=nope", environ={})


# --- translation --------------------------------------------------------------------------


def _item(kind: str, item_type: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "item": {"type": item_type, **fields}}


CODEX_LINES = [
    {"type": "thread.started", "thread_id": "th_1"},
    _item("item.completed", "error", message="Model metadata for `m` not found"),
    {"type": "turn.started"},
    _item("item.started", "command_execution", command="bash -lc ls"),
    _item("item.completed", "command_execution", command="ls", exit_code=2, aggregated_output="no"),
    _item("item.completed", "file_change", changes=[{"path": "a.py"}], status="completed"),
    _item("item.completed", "agent_message", text="RESULT_STATUS: SUCCESS"),
    {"type": "a.new.event.type"},
    {"type": "turn.completed", "usage": {"input_tokens": 3}},
]


def test_codex_events_become_code_runner_events() -> None:
    sink = ListSink()
    translator = CodexTranslator(sink)
    for line in CODEX_LINES:
        translator.stdout_line(json.dumps(line))
    translator.stdout_line("not json at all")
    state = translator.state
    assert state.final_seen and state.final_ok and state.blocker is None
    assert state.final_text == "RESULT_STATUS: SUCCESS" and state.session == "th_1"
    assert state.steps == 3 and state.unknown_events == 1 and state.usage == {"input_tokens": 3}
    kinds = [k for k, _ in sink.events]
    assert kinds.count(EventKind.TOOL_CALL) == 1 and kinds.count(EventKind.TOOL_RESULT) == 2
    failed = next(d for k, d in sink.events if k is EventKind.TOOL_RESULT)
    assert failed["ok"] is False and failed["error"] == "exit 2"


def test_codex_turn_failed_is_a_final_failure_with_its_reason() -> None:
    translator = CodexTranslator(ListSink())
    translator.stdout_line(
        json.dumps({"type": "error", "message": "Connection failed: error sending request"})
    )
    translator.stdout_line(json.dumps({"type": "turn.failed", "error": {"message": "boom"}}))
    state = translator.state
    assert state.final_seen and not state.final_ok and state.error == "boom"
    assert state.blocker is not None and state.blocker.kind is BlockerKind.UNREACHABLE


def test_claude_events_become_code_runner_events() -> None:
    sink = ListSink()
    translator = ClaudeTranslator(sink)

    def blocks(role: str, *content: dict[str, Any]) -> dict[str, Any]:
        return {"type": role, "message": {"content": list(content)}}

    lines = [
        {"type": "system", "subtype": "init", "session_id": "s1", "model": "m", "tools": ["Read"]},
        blocks("assistant", {"type": "tool_use", "name": "Read", "input": {"file_path": "a"}}),
        blocks(
            "user",
            {"type": "tool_result", "content": "invalid api key in a file", "is_error": True},
        ),
        blocks("assistant", {"type": "text", "text": "done"}),
        {"type": "result", "subtype": "error_max_turns", "is_error": True, "num_turns": 9},
    ]
    for line in lines:
        translator.stdout_line(json.dumps(line))
    state = translator.state
    assert state.final_seen and not state.final_ok and state.turn_limit
    assert state.final_text == "done" and state.blocker is None  # tool output never blocks
    result = next(d for k, d in sink.events if k is EventKind.TOOL_RESULT)
    assert result["ok"] is False and result["name"] == "claude:tool"


def test_claude_api_errors_block_with_their_text() -> None:
    translator = ClaudeTranslator(ListSink())
    synthetic = {
        "type": "assistant",
        "error": "authentication_failed",
        "message": {
            "content": [{"type": "text", "text": "Invalid API key · Fix external API key"}]
        },
    }
    translator.stdout_line(json.dumps(synthetic))
    assert translator.state.blocker is not None
    assert translator.state.blocker.kind is BlockerKind.AUTHENTICATION


def test_a_plain_program_is_done_on_exit_0_or_its_final_event() -> None:
    plain = PlainTranslator(ListSink())
    plain.stdout_line("working")
    plain.finish(0)
    assert plain.state.final_seen and plain.state.final_text == "working"
    strict = PlainTranslator(ListSink(), final_event="done")
    strict.finish(0)
    assert not strict.state.final_seen
    strict = PlainTranslator(ListSink(), final_event="done")
    strict.stdout_line('{"type": "done"}')
    strict.finish(1)
    assert strict.state.final_seen and strict.state.final_ok


# --- hermetic command lines ------------------------------------------------------------------


def _invocation(flavor: Any, settings: Any, tmp_path: Path, prompt: str = "-do it") -> Invocation:
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin", "HOME": str(home), "TMPDIR": str(tmp_path / "tmp")}
    request = LaunchRequest(
        program="/bin/cli",
        prompt=prompt,
        prompt_file=tmp_path / "p.md",
        workspace=tmp_path / "wt",
        round_index=2,
        env=env,
        home=home,
    )
    invocation: Invocation = flavor.invocation(settings, request)
    return invocation


def test_codex_runs_hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K", "sk-abcdefghijkl")
    settings = resolve(
        CliKind.CODEX, "base_url=http://127.0.0.1:1/v1 api_key_env=K retries=1", environ={}
    )
    inv = _invocation(CodexFlavor(), settings, tmp_path)
    argv = list(inv.argv)
    for flag in ("--json", "--ephemeral", "--skip-git-repo-check", "--ignore-user-config"):
        assert flag in argv
    assert argv[argv.index("--sandbox") + 1] == "workspace-write"
    assert argv[argv.index("-C") + 1] == str(tmp_path / "wt")
    provider = next(a for a in argv if a.startswith("model_providers."))
    assert 'env_key="K"' in provider and "request_max_retries=1" in provider
    assert 'wire_api="responses"' in provider and "stream_max_retries=1" in provider
    assert argv[-2:] == ["--", "-do it"]  # a prompt starting with '-' is not a flag
    codex_home = inv.env["CODEX_HOME"]
    assert codex_home.startswith(str(tmp_path / "home")) and not codex_home.startswith(
        inv.env["TMPDIR"]
    )
    assert inv.env["K"] == "sk-abcdefghijkl"
    shown = inv.shown("-do it", tmp_path / "p.md")
    assert shown[-1] == f"<prompt: see {tmp_path / 'p.md'}>"
    assert "sk-abcdefghijkl" not in json.dumps(shown)


def test_claude_runs_hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-ant-secret-value")
    settings = resolve(CliKind.CLAUDE, "api_key_env=MY_KEY max_turns=5 tools=Read,Edit", environ={})
    inv = _invocation(ClaudeFlavor(), settings, tmp_path)
    argv = list(inv.argv)
    assert argv[1:5] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert argv[argv.index("--tools") + 1] == "Read,Edit" == argv[argv.index("--allowedTools") + 1]
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert argv[argv.index("--max-turns") + 1] == "5"
    env = inv.env
    assert env["CLAUDE_CONFIG_DIR"].startswith(str(tmp_path / "home"))
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" == env["DISABLE_TELEMETRY"]
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-secret-value" and "ANTHROPIC_BASE_URL" not in env
    assert inv.secret_names == ("ANTHROPIC_API_KEY",)


def test_command_placeholders(tmp_path: Path) -> None:
    settings = resolve(
        CliKind.COMMAND, "-- agent --prompt-file={prompt_file} --round {round} {prompt}", environ={}
    )
    inv = _invocation(CommandFlavor(), settings, tmp_path, prompt="do {round} it")
    assert inv.argv == (
        "/bin/cli",
        f"--prompt-file={tmp_path / 'p.md'}",
        "--round",
        "2",
        "do {round} it",  # the prompt is passed as is, never re-templated
    )
    assert inv.env["CODE_RUNNER_PROMPT_FILE"] == str(tmp_path / "p.md")


def test_redaction() -> None:
    text = "Authorization: Bearer abc.def key=sk-proj-12345678 api_key=hunter2 token=x1"
    shown = redact(text, ["hunter2"])
    assert "abc.def" not in shown and "sk-proj-12345678" not in shown and "hunter2" not in shown
    assert "x1" not in shown and shown.count("<redacted>") >= 3

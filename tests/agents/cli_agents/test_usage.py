"""The usage agent CLIs report, read from the lines the pinned CLIs print, summed per run:
what a CLI does not report stays unknown, never 0."""

from __future__ import annotations

from code_runner.agents.cli_agents.translate import ClaudeTranslator, CodexTranslator
from code_runner.agents.cli_agents.usage import RunTally
from code_runner.events import NullSink
from code_runner.record import RunUsage

# as Codex 0.171 and Claude Code 2.1.197 print them (trimmed to the fields that matter)
CODEX_DONE = (
    '{"type":"turn.completed","usage":{"input_tokens":3234,"cached_input_tokens":1000,'
    '"cache_write_input_tokens":0,"output_tokens":63,"reasoning_output_tokens":0}}'
)
CLAUDE_RESULT = (
    '{"type":"result","subtype":"success","is_error":false,"num_turns":4,"result":"done",'
    '"total_cost_usd":0.0226,"usage":{"input_tokens":4000,"cache_creation_input_tokens":7,'
    '"cache_read_input_tokens":3,"output_tokens":100,"service_tier":"standard"}}'
)


def test_codex_tokens_are_read_and_its_cost_stays_unknown() -> None:
    translator = CodexTranslator(NullSink())
    translator.stdout_line(CODEX_DONE)
    tally = RunTally("codex")
    tally.add_round(translator.state.reported)
    usage = RunUsage.model_validate(tally.summary())
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (3234, 63, 3297)
    assert usage.cost_usd is None and usage.model_calls is None
    assert (
        usage.describe() == "3,297 tokens (3,234 in, 63 out), cost unknown (codex reports no cost)"
    )


def test_claude_tokens_turns_and_cost_are_summed_over_rounds() -> None:
    tally = RunTally("claude-code")
    for _ in range(2):
        translator = ClaudeTranslator(NullSink())
        translator.stdout_line(CLAUDE_RESULT)
        tally.add_round(translator.state.reported)
    usage = RunUsage.model_validate(tally.summary())
    assert usage.model_calls == 8 and usage.prompt_tokens == 8020 and usage.completion_tokens == 200
    assert usage.cost_usd == 0.0452 and usage.price_known
    assert usage.describe().endswith("$0.0452 (as claude-code reported it)")


def test_a_round_without_a_report_makes_the_cost_unknown_not_zero() -> None:
    tally = RunTally("claude-code")
    assert tally.summary() == {}  # nothing reported: no usage at all
    finished = ClaudeTranslator(NullSink())
    finished.stdout_line(CLAUDE_RESULT)
    tally.add_round(finished.state.reported)
    tally.add_round(ClaudeTranslator(NullSink()).state.reported)  # killed before `result`
    usage = RunUsage.model_validate(tally.summary())
    assert usage.cost_usd is None and usage.model_calls is None and not usage.usage_reported
    assert usage.prompt_tokens == 4010  # what was reported: a lower bound
    assert "$" not in usage.describe()
    assert "cost unknown (claude-code reported no usage for some rounds)" in usage.describe()

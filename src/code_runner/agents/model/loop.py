"""The model-driven agent: a tool-use loop over any `ModelClient` (live API or replay).

One round is one conversation: the round's opening messages (`prompts`), then turns until
the model stops calling tools or a budget runs out. Before every model call the budget is
checked; each answer's tool calls go to the toolbox (which enforces every rule); invalid
arguments, unknown tools and duplicate calls come back to the model as typed tool errors;
a model that answers with prose and no tool call is told once, then the round ends. Every
exchange is in the transcript, and the round's stop is written in `finally`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from code_runner.agents.base import AgentOutcome, AgentStop, BudgetKind, RoundContext
from code_runner.agents.model import prompts
from code_runner.agents.model.arguments import parse_arguments
from code_runner.agents.model.budget import Budget
from code_runner.agents.model.transcript import (
    FailureKind,
    ModelClient,
    ModelError,
    ModelTurn,
    Transcript,
)
from code_runner.agents.redact import redact
from code_runner.events import EventKind, EventSink
from code_runner.record import RecordPaths
from code_runner.tools.base import ToolErrorCode, ToolResult, ToolRunner

MUTATING_TOOLS = frozenset({"write_file", "edit_file", "run_command"})
REDACTED = "[redacted]"

ClientFactory = Callable[[Transcript], ModelClient]


class ModelLoopAgent:
    """An `Agent` that asks a model what to do, one tool call at a time."""

    def __init__(
        self,
        *,
        name: str,
        make_client: ClientFactory,
        budget: Budget,
        session: Mapping[str, Any],
        secrets: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.budget = budget
        self.session = dict(session)
        self._make_client = make_client
        self._secrets = tuple(s for s in secrets if len(s) >= 4)
        self._client: ModelClient | None = None
        self.transcript: Transcript | None = None

    def run_round(self, ctx: RoundContext, tools: ToolRunner, events: EventSink) -> AgentOutcome:
        client, transcript = self._open(
            RecordPaths(ctx.task.output_dir, ctx.task.task_id).transcript
        )
        self.budget.start_round()
        messages: list[dict[str, Any]] = prompts.round_messages(ctx, tools)
        specs = [
            tool_schema(spec.name, spec.description, spec.parameters) for spec in tools.specs()
        ]
        turns, nudged, acted, answer = 0, False, False, ""
        seen: set[str] = set()  # calls made since the last change (duplicates are refused)
        outcome = AgentOutcome(AgentStop.ERROR, error="the round did not finish")
        try:
            while True:
                if _passed(ctx.deadline):
                    outcome = self._outcome(
                        AgentStop.TIMEOUT, answer, turns, "the run's timeout has passed"
                    )
                    return outcome
                exceeded = self.budget.check(turns)
                if exceeded is not None:
                    outcome = self._outcome(
                        AgentStop.BUDGET, answer, turns, exceeded.message, exceeded.kind
                    )
                    return outcome
                tag = {"round": ctx.round_index, "turn": turns + 1}
                try:
                    turn = client.complete(
                        messages,
                        specs,
                        deadline=_nearer(self.budget.deadline(), ctx.deadline),
                        tag=tag,
                    )
                except ModelError as exc:
                    if exc.kind is FailureKind.DEADLINE and _passed(ctx.deadline):
                        continue  # the check at the top says the run's time is up
                    if exc.kind is FailureKind.DEADLINE and self.budget.check(turns) is not None:
                        continue  # the check at the top names the budget that ran out
                    outcome = self._outcome(AgentStop.ERROR, answer, turns, exc.render())
                    return outcome
                turns += 1
                turn = unique_ids(turn, tag)
                self.budget.add(turn.usage)
                events.emit(
                    EventKind.MODEL_TURN,
                    turn=turns,
                    finish_reason=turn.finish_reason,
                    tool_calls=[c.name for c in turn.tool_calls],
                    usage=turn.usage.to_dict() if turn.usage else None,
                    duration_s=round(turn.duration_s, 4),
                )
                messages.append(turn.assistant_message())
                answer = turn.content or answer
                if not turn.tool_calls:
                    if acted or nudged:
                        stop = AgentStop.DONE if acted else AgentStop.NO_ACTION
                        outcome = self._outcome(stop, answer, turns)
                        return outcome
                    nudged = True
                    messages.append({"role": "user", "content": prompts.NUDGE})
                    continue
                acted = True
                for call in turn.tool_calls:
                    content = self._call(call.name, call.arguments, tools, events, seen, turn)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        finally:
            transcript.write(
                "stop",
                round=ctx.round_index,
                stop=outcome.stop.value,
                budget=outcome.budget.value if outcome.budget else None,
                turns=outcome.turns,
                error=outcome.error,
                usage=self.budget.summary(),
            )

    def _open(self, path: Path) -> tuple[ModelClient, Transcript]:
        if self._client is None or self.transcript is None:
            self.transcript = Transcript(path)
            self.transcript.write("session", **self.session)
            self._client = self._make_client(self.transcript)
        return self._client, self.transcript

    def _call(
        self,
        name: str,
        raw_arguments: str,
        tools: ToolRunner,
        events: EventSink,
        seen: set[str],
        turn: ModelTurn,
    ) -> str:
        parsed = parse_arguments(raw_arguments)
        if parsed.value is None:
            problem = parsed.problem or "invalid arguments"
            if turn.finish_reason == "length":
                problem += " (your answer was cut at the token limit: send smaller calls)"
            return self._refuse(events, name, ToolErrorCode.INVALID_ARGS, f"{name}: {problem}")
        key = name + "\0" + json.dumps(parsed.value, sort_keys=True, default=str)
        if key in seen:
            return self._refuse(
                events,
                name,
                ToolErrorCode.DUPLICATE_CALL,
                f"{name} was already called with exactly these arguments and nothing has "
                "changed since; use its earlier result, or do something different",
            )
        result = tools.call(name, parsed.value)
        if result.ok and name in MUTATING_TOOLS:
            seen.clear()
        seen.add(key)
        return self._redact(result.content)

    def _refuse(self, events: EventSink, name: str, code: ToolErrorCode, message: str) -> str:
        result = ToolResult.failure(code, message)
        events.emit(
            EventKind.TOOL_RESULT, name=name, ok=False, error=code.value, summary=message[:200]
        )
        return result.content

    def _redact(self, text: str) -> str:
        # A tool result is text the model may edit and write back: only known secrets go.
        return redact(text, self._secrets, mask=REDACTED, look_alikes=False)

    def _outcome(
        self,
        stop: AgentStop,
        answer: str,
        turns: int,
        error: str | None = None,
        budget: BudgetKind | None = None,
    ) -> AgentOutcome:
        return AgentOutcome(
            stop,
            response=answer,
            turns=turns,
            error=error,
            budget=budget,
            usage=self.budget.summary(),
        )


def _nearer(one: float | None, other: float | None) -> float | None:
    """The earlier of two optional deadlines."""
    return min((d for d in (one, other) if d is not None), default=None)


def _passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def tool_schema(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool as Chat Completions declares it."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": dict(parameters)},
    }


def unique_ids(turn: ModelTurn, tag: Mapping[str, int]) -> ModelTurn:
    """Give every tool call an id, unique in the turn (some servers send none, or repeat one)."""
    seen: set[str] = set()
    calls = []
    for index, call in enumerate(turn.tool_calls):
        ident = call.id or f"call_{tag['round']}_{tag['turn']}_{index}"
        while ident in seen:
            ident = f"{ident}_{index}"
        seen.add(ident)
        calls.append(dataclasses.replace(call, id=ident))
    return dataclasses.replace(turn, tool_calls=tuple(calls))


__all__ = ["MUTATING_TOOLS", "ClientFactory", "ModelLoopAgent", "tool_schema", "unique_ids"]

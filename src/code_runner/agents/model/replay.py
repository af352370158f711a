"""The `replay` backend: a recorded run's model answers, played back with no network.

`replay:PATH` (a run's output dir, or its `TASK.transcript.jsonl`). The same loop as the
live backend runs against a `ReplayClient` that returns, for each model call of each
round, what the recording says that call returned (its answer, or the error it ended
with). The tool calls are therefore the same and run for real in a fresh workspace, so the
same base gives the same patch and the same DoD verdict. Budgets that depend on usage
(turns, tokens, cost) are counted again from the recorded usage; a wall-clock stop cannot
be re-measured, so it is taken from the recording at the same point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from code_runner.agents.base import BudgetKind
from code_runner.agents.model.budget import Budget, Exceeded
from code_runner.agents.model.loop import ModelLoopAgent
from code_runner.agents.model.transcript import (
    FailureKind,
    ModelClient,
    ModelError,
    ModelTurn,
    Recording,
    Transcript,
    read_recording,
)
from code_runner.config import BudgetConfig
from code_runner.errors import UsageError

TRANSCRIPT_SUFFIX = ".transcript.jsonl"


def find_transcript(path: Path) -> Path:
    """The transcript a `replay:PATH` names: the file, or the one in a run's output dir."""
    if path.is_dir():
        found = sorted(path.glob(f"*{TRANSCRIPT_SUFFIX}"))
        if len(found) != 1:
            what = "no transcript" if not found else f"{len(found)} transcripts"
            raise UsageError(
                f"replay: {path} holds {what} (*{TRANSCRIPT_SUFFIX}).",
                fix="give the output dir of one run made by a model backend, or the "
                "transcript file itself.",
            )
        return found[0]
    if not path.is_file():
        raise UsageError(
            f"replay: {path} does not exist.",
            fix="give a run's output dir or its TASK.transcript.jsonl.",
        )
    return path


class ReplayClient:
    """A `ModelClient` that answers from a recording, round by round, call by call."""

    def __init__(self, recording: Recording, transcript: Transcript) -> None:
        self.recording = recording
        self.transcript = transcript
        self._next: dict[int, int] = {}

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        deadline: float | None,
        tag: Mapping[str, int],
    ) -> ModelTurn:
        round_index = tag["round"]
        calls = self.recording.round(round_index).calls
        index = self._next.get(round_index, 0)
        self._next[round_index] = index + 1
        body = {"messages": list(messages), "tools": list(tools), "replayed": True}
        self.transcript.write("request", **tag, attempt=1, body=body)
        if index >= len(calls):
            error = ModelError(
                FailureKind.REPLAY,
                f"the recording has no answer for call {index + 1} of round {round_index}: "
                "the replay diverged from the recorded run",
                fix="replay on the same base commit and the same spec as the recording.",
            )
            self.transcript.write("error", **tag, attempt=1, retry_in_s=None, **error.to_record())
            raise error
        outcome = calls[index]
        if isinstance(outcome, ModelError):
            self.transcript.write("error", **tag, attempt=1, retry_in_s=None, **outcome.to_record())
            raise outcome
        self.transcript.write("response", **tag, attempt=1, **outcome.to_record())
        return outcome


class RecordedBudget(Budget):
    """Counts usage like the live budget; wall-clock stops come from the recording."""

    def __init__(self, recording: Recording, limits: BudgetConfig, **prices: float | None) -> None:
        no_clock = limits.model_copy(update={"round_wall_clock_s": None, "run_wall_clock_s": None})
        super().__init__(
            no_clock,
            price_in_per_mtok=prices.get("price_in_per_mtok"),
            price_out_per_mtok=prices.get("price_out_per_mtok"),
        )
        self.recording = recording
        self.round_index = 0

    def start_round(self) -> None:
        super().start_round()
        self.round_index += 1

    def check(self, turns_this_round: int) -> Exceeded | None:
        stop = self.recording.round(self.round_index).stop or {}
        if (
            stop.get("budget") == BudgetKind.WALL_CLOCK.value
            and stop.get("turns") == turns_this_round
        ):
            return Exceeded(
                BudgetKind.WALL_CLOCK, str(stop.get("error") or "wall clock (recorded)")
            )
        return super().check(turns_this_round)


def from_arg(arg: str | None, *, base_dir: Path, **_context: object) -> ModelLoopAgent:
    """The registry's factory: `replay:PATH`, PATH relative to `base_dir`."""
    if not arg:
        raise UsageError(
            "the replay backend needs a recorded run: `replay:PATH`.",
            fix="use `code-runner replay RUN_DIR`, or set backend to `replay:RUN_DIR`.",
        )
    path = Path(arg).expanduser()
    recording = read_recording(find_transcript(path if path.is_absolute() else base_dir / path))
    session = recording.session
    limits = BudgetConfig.model_validate(session.get("budget") or {})
    settings = session.get("settings") or {}
    budget = RecordedBudget(
        recording,
        limits,
        price_in_per_mtok=settings.get("price_in_per_mtok"),
        price_out_per_mtok=settings.get("price_out_per_mtok"),
    )

    def make_client(transcript: Transcript) -> ModelClient:
        return ReplayClient(recording, transcript)

    replay_session = {
        **session,
        "backend": "replay",
        "replayed_from": str(recording.path),
        "recorded_backend": session.get("backend"),
    }
    return ModelLoopAgent(
        name="replay", make_client=make_client, budget=budget, session=replay_session
    )


__all__ = ["RecordedBudget", "ReplayClient", "find_transcript", "from_arg"]

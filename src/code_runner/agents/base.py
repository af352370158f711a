"""The agent protocol: what the runner asks of anything that edits a workspace.

An agent gets a round context and a tool runner; it calls tools (the runner enforces every
rule) and returns an outcome. It never touches git, never decides the verdict: the runner
audits real git state and runs the DoD after every round."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from code_runner.events import EventSink
from code_runner.tools.base import ToolRunner

if TYPE_CHECKING:
    from code_runner.record import RecordPaths
    from code_runner.task import TaskSpec
    from code_runner.task.skills import Skill
    from code_runner.verify import Verdict


class AgentStop(StrEnum):
    """Why an agent handed control back to the runner for this round."""

    DONE = "done"  # the agent says it is finished with this round
    NO_ACTION = "no_action"  # nothing left to do (e.g. script exhausted)
    TURN_LIMIT = "turn_limit"
    BUDGET = "budget"
    ERROR = "error"
    BLOCKED = "blocked"  # a person must decide (credentials, approval, context); `error` says why
    TIMEOUT = "timeout"  # the agent went silent (idle timeout) or ran out of wall-clock time


class BudgetKind(StrEnum):
    """Which budget ended a run (with `AgentStop.BUDGET`); each has its own reason code."""

    TURNS = "turns"  # model turns in one round
    TOKENS = "tokens"  # tokens in the whole run, as the provider reported them
    COST = "cost"  # money in the whole run, from reported usage and configured prices
    WALL_CLOCK = "wall_clock"  # seconds in one round or in the whole run


@dataclass(frozen=True)
class RoundContext:
    """Everything an agent may know at the start of a round."""

    task: TaskSpec
    round_index: int  # 1-based
    max_rounds: int
    workspace_dir: Path
    previous_verdict: Verdict | None = None
    # for backends that run a program (agent CLIs): where their own artifacts go, the
    # command environment (no secrets; private HOME and TMPDIR), and the run's deadline
    record_paths: RecordPaths | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    deadline: float | None = None  # time.monotonic() at which the run's wall clock ends
    skills: tuple[Skill, ...] = ()  # the spec's named skills, as read at the run's start
    # asked while an agent's own program runs (agent CLIs): True stops the round at once,
    # and the runner ends the run (the run's `limits.disk_mb` is spent)
    over_budget: Callable[[], bool] | None = None


@dataclass(frozen=True)
class AgentOutcome:
    stop: AgentStop
    response: str = ""
    turns: int = 0
    error: str | None = None
    budget: BudgetKind | None = None  # with AgentStop.BUDGET: which one ran out
    usage: Mapping[str, Any] = field(default_factory=dict)  # tokens, cost, calls so far


class Agent(Protocol):
    """Anything that can take one round of a task. Chosen by name from the registry."""

    name: str

    def run_round(
        self, ctx: RoundContext, tools: ToolRunner, events: EventSink
    ) -> AgentOutcome: ...

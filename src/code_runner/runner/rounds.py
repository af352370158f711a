"""The round loop: round 0 (does the DoD already pass?), then agent -> audit -> DoD -> score
-> keep the best or restore it, until a round ends the run. How it ended is one `Ending`,
decided by `ending()` from what the loop saw, and nowhere else.

The agent only edits; everything that decides the outcome (audit, DoD, score) is computed
here from real git state and real exit codes."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code_runner import apply, proc, verify, workspace
from code_runner.agents.base import Agent, AgentOutcome, AgentStop, BudgetKind, RoundContext
from code_runner.errors import CodeRunnerError, DiskBudgetExceeded, Interrupted
from code_runner.events import EventKind
from code_runner.record import Reason, ResultStatus, RunRecord, RunState
from code_runner.runner.leftovers import end_agent_processes, own_descendants, tree_of
from code_runner.runner.preflight import DodCannotStart
from code_runner.sandbox import Session
from code_runner.task import TaskSpec
from code_runner.task.paths import Allowlist
from code_runner.task.skills import Skill
from code_runner.tools import Toolbox

# an agent CLI's round ended without an answer: the run ends with this reason
_CLI_ENDINGS: dict[AgentStop, Reason] = {
    AgentStop.BLOCKED: Reason.BLOCKED_NEEDS_DECISION,
    AgentStop.TIMEOUT: Reason.AGENT_TIMEOUT,
}


_BUDGET_REASONS: dict[BudgetKind | None, Reason] = {
    BudgetKind.TURNS: Reason.BUDGET_TURNS,
    BudgetKind.TOKENS: Reason.BUDGET_TOKENS,
    BudgetKind.COST: Reason.BUDGET_COST,
    BudgetKind.WALL_CLOCK: Reason.BUDGET_WALL_CLOCK,
}


@dataclass(frozen=True)
class Ending:
    """How a run ended: the status and reason result.json carries, and the words."""

    status: ResultStatus
    reason: Reason
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.status in (ResultStatus.PASSED, ResultStatus.ALREADY_SATISFIED)


@dataclass
class Best:
    score: float
    tree: str
    round_index: int
    passed: bool = False
    changes: tuple[workspace.Change, ...] = ()


@dataclass(frozen=True)
class RoundResult:
    """What one agent round returned: the agent's outcome, what the audit found, and (when
    the audit let the DoD run) whether it passed."""

    index: int
    agent: AgentOutcome
    violations: tuple[str, ...] = ()
    verdict: verify.Verdict | None = None
    passed: bool = False
    changed: bool = False


@dataclass(frozen=True)
class Progress:
    """What the loop has seen so far: the inputs of `ending`."""

    base_passed: bool = False
    last: RoundResult | None = None
    out_of_time: bool = False
    rounds_left: bool = True
    best_round: int = 0
    changed: bool = False  # some round left an allowed change
    timeout_s: float = 0.0


def ending(seen: Progress) -> Ending | None:
    """How the run ends, given what the loop saw; None while it goes on."""
    if seen.base_passed:
        return Ending(ResultStatus.ALREADY_SATISFIED, Reason.ALREADY_SATISFIED)
    last = seen.last
    if seen.out_of_time and not (last is not None and (last.violations or last.passed)):
        error = f"the run exceeded its timeout of {seen.timeout_s:g} s"
        return Ending(ResultStatus.FAILED, Reason.RUN_TIMEOUT, error)
    decided = _round_ending(last) if last is not None else None
    if decided is not None:
        return decided
    if seen.rounds_left:
        return None
    if seen.best_round == 0 and not seen.changed:
        return Ending(ResultStatus.FAILED, Reason.NO_ALLOWED_CHANGES)
    return Ending(ResultStatus.FAILED, Reason.DOD_FAILED)


def _round_ending(last: RoundResult) -> Ending | None:
    """The ending the last round decides on its own: a violation, a pass, or an agent stop."""
    if last.violations:
        return Ending(ResultStatus.FAILED, Reason.SAFETY_VIOLATION, "; ".join(last.violations))
    if last.passed:
        return Ending(ResultStatus.PASSED, Reason.DOD_PASSED)
    stop = last.agent.stop
    if stop is AgentStop.BUDGET:
        reason = _BUDGET_REASONS.get(last.agent.budget, Reason.BUDGET_EXHAUSTED)
        return Ending(ResultStatus.FAILED, reason, last.agent.error)
    if stop is AgentStop.ERROR:
        return Ending(ResultStatus.FAILED, Reason.AGENT_ERROR, last.agent.error)
    if stop in _CLI_ENDINGS:
        return Ending(ResultStatus.FAILED, _CLI_ENDINGS[stop], last.agent.error)
    return None


def apply_ending(outcome: apply.ApplyOutcome) -> Ending | None:
    """How the apply step ends a run whose DoD passed; None when it landed."""
    if outcome.ok:
        return None
    reason = (
        Reason.APPLY_REFUSED
        if outcome.refused
        else Reason.SOURCE_DOD_FAILED
        if outcome.dod_passed is False
        else Reason.APPLY_FAILED
    )
    return Ending(ResultStatus.FAILED, reason, outcome.error)


@dataclass
class RoundLoop:
    """Runs the rounds of one task in one workspace; `run()` returns how it ended."""

    spec: TaskSpec
    agent: Agent
    record: RunRecord
    ws: workspace.Workspace
    deadline: float
    check_stop: Callable[[], None]
    sandbox: Session | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    best: Best | None = None
    violations: list[str] = field(default_factory=list)
    dropped: list[dict[str, object]] = field(default_factory=list)
    verdicts: dict[str, verify.Verdict] = field(default_factory=dict)  # by tree
    last_response: str = ""  # the agent's final text of the last round (its RESULT block)
    # plan-item mode: round 0 never ends the run, a passing round needs no change, and the
    # audit and tools use `allowlist` (the plan keeps safe undeclared changes and judges them)
    item_mode: bool = False
    allowlist: Allowlist | None = None
    skills: tuple[Skill, ...] = ()  # named skills, read once at the run's start
    # the host program's own children when the loop began: never taken for the agent's
    host_children: frozenset[tuple[int, float]] = field(default_factory=lambda: own_descendants())

    @property
    def policy(self) -> Allowlist:
        return self.allowlist or self.spec.allowlist_policy

    def run(self) -> Ending:
        toolbox = Toolbox(
            self.ws.work_tree,
            allowlist=self.policy,
            source_dir=self.ws.source_dir,
            env=self.ws.env(),
            events=self.record,
            wrap_argv=self.sandbox.wrap if self.sandbox else None,
            launch=self.sandbox.run if self.sandbox else None,
            deadline=self.deadline,
            after_call=self._check_call_disk,
            during_call=self._call_over_budget,
        )
        try:
            return self._rounds(toolbox)
        except DiskBudgetExceeded as exc:
            self.record.emit(EventKind.ERROR, message=exc.render())
            return Ending(ResultStatus.FAILED, Reason.DISK_BUDGET, exc.render())

    def _rounds(self, toolbox: Toolbox) -> Ending:
        previous = self._baseline()
        base_passed = previous.passed and not self.item_mode
        seen = Progress(base_passed=base_passed, timeout_s=self.spec.timeout_s)
        for index in range(1, self.spec.max_rounds + 1):
            found = ending(seen)
            if found is not None:
                return found
            self.check_stop()
            if time.monotonic() >= self.deadline:
                return self._end(dataclasses.replace(seen, out_of_time=True))
            last = self._round(index, toolbox, previous)
            previous = last.verdict or previous
            seen = self._progress(seen, last)
        return self._end(dataclasses.replace(seen, rounds_left=False))

    @staticmethod
    def _end(seen: Progress) -> Ending:
        found = ending(seen)
        assert found is not None, "a loop that stops has an ending"
        return found

    def _progress(self, seen: Progress, last: RoundResult) -> Progress:
        assert self.best is not None
        return Progress(
            last=last,
            best_round=self.best.round_index,
            changed=seen.changed or last.changed,
            timeout_s=seen.timeout_s,
            out_of_time=time.monotonic() >= self.deadline,
        )

    # --- round 0 ---------------------------------------------------------------------------

    def _baseline(self) -> verify.Verdict:
        self.record.transition(RunState.BASELINE, step="round 0: is the DoD already satisfied?")
        base_tree = self.ws.current_tree
        assert base_tree is not None
        verdict = self._dod("round 0 (base)", base_tree)
        score = verify.score(verdict) if not verdict.passed else 1.0
        self.best = Best(score=score, tree=base_tree, round_index=0, passed=verdict.passed)
        self.rounds.append({"round": 0, "verdict": verdict.to_dict(), "score": score})
        self.record.append_round(self.rounds[-1])
        if not verdict.passed:
            self.best.score = min(self.best.score, 0.0)  # the base itself is never "progress"
            self._must_start(verdict)
        return verdict

    def _must_start(self, verdict: verify.Verdict) -> None:
        """A DoD that cannot even start at base ends the run before any agent round."""
        if verdict.timed_out:
            return
        output = f"{verdict.stdout_tail}\n{verdict.stderr_tail}"
        project = self.ws.project
        names = workspace.project_packages(self.ws.work_tree, project)
        problem = workspace.cannot_start(verdict.exit_code, output, names, project)
        if problem is not None:
            said = (verdict.stderr_tail.strip() or verdict.stdout_tail.strip())[-600:]
            raise DodCannotStart(
                f"{problem}; no agent round was run. The DoD said:\n{said}",
                fix=workspace.START_FIX,
            )

    # --- one round -------------------------------------------------------------------------

    def _round(self, index: int, toolbox: Toolbox, previous: verify.Verdict) -> RoundResult:
        started = time.monotonic()
        outcome = self._agent(index, toolbox, previous)
        self.check_stop()
        killed = self._end_agent_processes()  # nothing of the agent's may run past here
        self._check_disk()  # an agent CLI writes without the toolbox
        self.record.transition(RunState.AUDITING, step=f"round {index}: audit")
        audit = self.ws.audit(self.policy)
        self._hand_over()  # files the audit restored are root's until handed back
        self.record.emit(EventKind.AUDIT, **audit.to_dict())
        if audit.rejected:
            self.dropped.extend(r.to_dict() | {"round": index} for r in audit.rejected)
            self.record.emit(
                EventKind.CHANGES_DROPPED, paths=[r.change.path for r in audit.rejected]
            )
        details: dict[str, Any] = {
            "round": index,
            "agent_stop": outcome.stop.value,
            "agent_turns": outcome.turns,
            "agent_error": outcome.error,
            **({"agent_usage": dict(outcome.usage)} if outcome.usage else {}),
            "audit": audit.to_dict(),
            **({"agent_processes_killed": killed} if killed else {}),
        }
        changed = audit.changed_allowed
        if audit.violations:
            self.violations.extend(audit.violations)
            self._finish_round(details, started)
            return RoundResult(index, outcome, violations=audit.violations, changed=changed)
        verdict, passed = self._judge(index, audit, details)
        self._finish_round(details, started)
        return RoundResult(index, outcome, verdict=verdict, passed=passed, changed=changed)

    def _agent(self, index: int, toolbox: Toolbox, previous: verify.Verdict) -> AgentOutcome:
        self.record.set_round(index)
        self.record.emit(EventKind.ROUND_STARTED, max_rounds=self.spec.max_rounds)
        self.record.transition(RunState.AGENT, step=f"round {index}: agent")
        ctx = RoundContext(
            task=self.spec,
            round_index=index,
            max_rounds=self.spec.max_rounds,
            workspace_dir=self.ws.work_tree,
            previous_verdict=previous,
            record_paths=self.record.paths,
            env=self.ws.env(),
            deadline=self.deadline,
            skills=self.skills,
            over_budget=self._over_budget,
        )
        self.record.emit(EventKind.AGENT_STARTED, backend=self.spec.backend)
        try:
            outcome = self.agent.run_round(ctx, toolbox, self.record)
        except (Interrupted, DiskBudgetExceeded):
            raise
        except CodeRunnerError as exc:
            outcome = AgentOutcome(AgentStop.ERROR, error=exc.render())
        usage = dict(outcome.usage) if outcome.usage else None
        self.record.emit(
            EventKind.AGENT_FINISHED,
            stop=outcome.stop.value,
            turns=outcome.turns,
            error=outcome.error,
            **({"usage": usage} if usage else {}),
        )
        if usage:
            self.record.set_usage(usage)
        self.record.append_response(index, outcome.response)
        self.last_response = outcome.response
        return outcome

    def _judge(
        self, index: int, audit: workspace.Audit, details: dict[str, Any]
    ) -> tuple[verify.Verdict, bool]:
        """The DoD on base + the allowed changes; keep the state if it is the best so far,
        else go back to the best. (the verdict, whether the round passed)"""
        self.record.transition(RunState.VERIFYING, step=f"round {index}: DoD")
        tree = self.ws.keep()  # the audited state, which the DoD is about
        verdict = self._dod(f"round {index}", tree)
        passed = verdict.passed and (audit.changed_allowed or self.item_mode)
        score = 1.0 if passed else min(verify.score(verdict), 0.49)
        details.update(verdict=verdict.to_dict(), score=score, passed=passed)
        best = self.best
        assert best is not None
        if score >= best.score and audit.changed_allowed:
            self.best = Best(score, tree, index, passed, changes=audit.allowed)
            self.record.set_best(score)
            self.record.emit(EventKind.BEST_KEPT, score=score, tree=tree)
            details["kept"] = True
        elif tree != best.tree:
            self.ws.restore(best.tree)
            self._hand_over()
            self.record.emit(
                EventKind.BEST_RESTORED,
                score=score,
                best_score=best.score,
                best_round=best.round_index,
            )
            details["restored_to_round"] = best.round_index
        return verdict, passed

    def _finish_round(self, details: dict[str, Any], started: float) -> None:
        details["duration_s"] = round(time.monotonic() - started, 3)
        self.rounds.append(details)
        self.record.append_round(details)
        self.record.emit(
            EventKind.ROUND_FINISHED, score=details.get("score"), passed=details.get("passed")
        )

    def _dod(self, label: str, tree: str) -> verify.Verdict:
        """The DoD's verdict on `tree`: run once per distinct tree, then reused (a round
        that changed nothing, or went back to a state already judged, costs no DoD run)."""
        seen = self.verdicts.get(tree)
        if seen is not None:
            self._dod_finished(label, seen, reused_for_tree=tree)
            return seen
        verdict = self._run_dod(label)
        self.verdicts[tree] = verdict
        return verdict

    def _dod_finished(self, label: str, verdict: verify.Verdict, **extra: str) -> None:
        self.record.emit(
            EventKind.DOD_FINISHED,
            label=label,
            passed=verdict.passed,
            exit_code=verdict.exit_code,
            reason=verdict.reason,
            **extra,
        )

    def _run_dod(self, label: str) -> verify.Verdict:
        """The DoD in the workspace, its timeout clipped to the time the run has left."""
        dod = self.spec.definition_of_done
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            why = f"not run: the run's timeout of {self.spec.timeout_s:g} s had passed"
            verdict = _not_run(dod.assertion, why)
        else:
            if remaining < dod.timeout_s:
                dod = dod.model_copy(update={"timeout_s": remaining})
            self._end_agent_processes()
            self.record.emit(EventKind.DOD_STARTED, label=label, command=dod.command)
            if self.sandbox is None:
                self.ws.empty_scratch()
            with self._dependencies():
                verdict = verify.run_dod(
                    dod,
                    cwd=self.ws.work_tree,
                    env=self.ws.env(),
                    log_path=self.record.paths.verifier_log,
                    label=label,
                    wrap_argv=self.sandbox.wrap if self.sandbox else None,
                    launch=self.sandbox.run if self.sandbox else None,
                    stop_when=self._over_budget,
                )
            self._check_disk()  # what the DoD wrote counts too
        self._dod_finished(label, verdict)
        return verdict

    def _dependencies(self) -> AbstractContextManager[list[Path]]:
        """Without the sandbox, the source's dependency dirs in the work tree for the DoD
        (`.venv/bin/python` resolves as it does under the sandbox's binds)."""
        if self.sandbox is not None:
            return contextlib.nullcontext([])
        return self.ws.unsandboxed_dependencies()

    def _end_agent_processes(self) -> list[int]:
        keep = self.host_children
        if self.sandbox is not None:
            keep = keep | tree_of(self.sandbox.resident_pid)
        return end_agent_processes(self.ws.run_id, self.ws.root, before=keep)

    def _over_budget(self) -> bool:
        """Asked while a command or the DoD runs: True kills it, and `_check_disk` after
        it ends the run, so one command cannot write far past `limits.disk_mb`."""
        return self.ws.written_bytes() > self._budget_bytes

    def _call_over_budget(self) -> bool:
        """`_over_budget` for a tool's command: under the sandbox it can write only the work
        tree, so only that is counted again (`Workspace.written_bytes(tree_only=True)`)."""
        return self.ws.written_bytes(tree_only=self.sandbox is not None) > self._budget_bytes

    def _check_call_disk(self) -> None:
        """`_check_disk` after a tool call: under the sandbox the call could write only the
        work tree (an overlay's upper layer holds just what changed), so only that is
        counted again; the full count follows every round and every DoD."""
        self._check_disk(tree_only=self.sandbox is not None)

    @property
    def _budget_bytes(self) -> int:
        return self.spec.limits.disk_mb * 1024 * 1024

    def _check_disk(self, *, tree_only: bool = False) -> None:
        """End the run if it has written more to its workspace than `limits.disk_mb`."""
        written = self.ws.written_bytes(tree_only=tree_only)
        if written > self._budget_bytes:
            raise DiskBudgetExceeded(
                f"the run wrote {written / 2**20:.1f} MiB to its workspace, more than its "
                f"budget of limits.disk_mb = {self.spec.limits.disk_mb} MiB",
                fix="raise limits.disk_mb in the task spec if the task needs that much "
                "space, or tell the agent not to write large files",
            )

    def _hand_over(self) -> None:
        if self.sandbox is not None:
            self.sandbox.hand_over()


def _not_run(assertion: str, reason: str) -> verify.Verdict:
    """The verdict of a DoD that was not started: failed, as if killed at once."""
    return verify.Verdict(
        passed=False,
        reason=reason,
        assertion=assertion,
        exit_code=proc.TIMEOUT_EXIT_CODE,
        timed_out=True,
        duration_s=0.0,
        stdout_tail="",
        stderr_tail="",
    )


__all__ = [
    "Best",
    "DodCannotStart",
    "Ending",
    "Progress",
    "RoundLoop",
    "RoundResult",
    "apply_ending",
    "ending",
]

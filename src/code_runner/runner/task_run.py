"""Rounds, scoring, best patch: one task from spec to result.

    preflight -> snapshot source -> workspace -> round 0 (DoD already passes?) ->
    rounds 1..N: agent -> audit -> DoD on base+patch -> score -> keep best / restore ->
    export best patch -> release workspace (always) -> snapshot source again -> result

The agent only edits; everything that decides the outcome (audit, DoD, score, patch) is
computed here from real git state and real exit codes."""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import code_runner.runner.leases as run_leases
from code_runner import apply, clock, proc, verify, workspace
from code_runner.agents.base import AgentOutcome, AgentStop, BudgetKind, RoundContext
from code_runner.errors import CodeRunnerError, DiskFull, Interrupted
from code_runner.events import EventKind
from code_runner.proc import signals_as_interrupt
from code_runner.record import (
    Reason,
    RecordPaths,
    ResultStatus,
    RunRecord,
    RunState,
    hunk_markdown,
    views,
)
from code_runner.repo import snapshot
from code_runner.runner.preflight import Preflight, new_run_id
from code_runner.sandbox import Session, open_session
from code_runner.task import contract, spec_to_request
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


@dataclass
class Best:
    score: float
    tree: str
    round_index: int
    passed: bool = False
    changes: tuple[workspace.Change, ...] = ()


@dataclass(frozen=True)
class RunOutcome:
    status: ResultStatus
    reason: Reason
    result: dict[str, Any]
    record_paths: RecordPaths

    @property
    def passed(self) -> bool:
        return self.status in (ResultStatus.PASSED, ResultStatus.ALREADY_SATISFIED)


class TaskRun:
    """One execution of a task. Construct, then `execute()`; the record says the rest."""

    def __init__(self, pre: Preflight, record: RunRecord, run_id: str) -> None:
        self.pre = pre
        self.spec = pre.spec
        self.record = record
        self.run_id = run_id
        self.deadline = time.monotonic() + self.spec.timeout_s
        self.rounds: list[dict[str, Any]] = []
        self.ws: workspace.Workspace | None = None
        self.best: Best | None = None
        self.tree = ""  # the tree the work tree holds now (after the last audit or restore)
        self.status = ResultStatus.FAILED
        self.reason = Reason.DOD_FAILED
        self.error: str | None = None
        self.patch_info: dict[str, Any] = {}
        self.violations: list[str] = []
        self.dropped: list[dict[str, object]] = []
        self.sandbox: Session | None = None  # the OS sandbox around commands and the DoD
        self.last_response = ""  # the agent's final text of the last round (its RESULT block)
        self.stopping = False  # a stop request is being honoured; further signals wait
        self.applied: apply.ApplyOutcome | None = None  # complete-task mode only

    # --- the loop ----------------------------------------------------------------------

    def _rounds(self, ws: workspace.Workspace) -> None:
        spec = self.spec
        self._open_sandbox(ws)
        toolbox = Toolbox(
            ws.work_tree,
            allowlist=spec.allowlist_policy,
            source_dir=ws.source_dir,
            env=ws.env(),
            events=self.record,
            wrap_argv=self.sandbox.wrap if self.sandbox else None,
        )
        git_before = workspace.git_state(ws)
        self.record.transition(RunState.BASELINE, step="round 0: is the DoD already satisfied?")
        verdict = self._dod(ws, "round 0 (base)")
        base_tree = self.tree = workspace.base_tree(ws)
        self.best = Best(
            score=verify.score(verdict) if not verdict.passed else 1.0,
            tree=base_tree,
            round_index=0,
            passed=verdict.passed,
        )
        self.rounds.append({"round": 0, "verdict": verdict.to_dict(), "score": self.best.score})
        self.record.append_round(self.rounds[-1])
        if verdict.passed:
            self.status, self.reason = ResultStatus.ALREADY_SATISFIED, Reason.ALREADY_SATISFIED
            return
        self.best.score = min(self.best.score, 0.0)  # the base itself is never "progress"
        previous = verdict
        for index in range(1, spec.max_rounds + 1):
            self._check_stop()
            if self._out_of_time():
                return
            self.record.set_round(index)
            self.record.emit(EventKind.ROUND_STARTED, max_rounds=spec.max_rounds)
            started = time.monotonic()
            self.record.transition(RunState.AGENT, step=f"round {index}: agent")
            ctx = RoundContext(
                task=spec,
                round_index=index,
                max_rounds=spec.max_rounds,
                workspace_dir=ws.work_tree,
                previous_verdict=previous,
                record_paths=self.record.paths,
                env=ws.env(),
                deadline=self.deadline,
            )
            self.record.emit(EventKind.AGENT_STARTED, backend=spec.backend)
            try:
                outcome = self.pre.agent.run_round(ctx, toolbox, self.record)
            except Interrupted:
                raise
            except CodeRunnerError as exc:
                outcome = AgentOutcome(AgentStop.ERROR, error=exc.render())
            self.record.emit(
                EventKind.AGENT_FINISHED,
                stop=outcome.stop.value,
                turns=outcome.turns,
                error=outcome.error,
            )
            self.record.append_response(index, outcome.response)
            self.last_response = outcome.response
            self._check_stop()
            self.record.transition(RunState.AUDITING, step=f"round {index}: audit")
            self.tree = ""  # unknown until the audited state is written as a tree
            audit = workspace.audit(ws, spec.allowlist_policy, git_before)
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
            }
            if audit.violations:
                self.violations.extend(audit.violations)
                self.status, self.reason = ResultStatus.FAILED, Reason.SAFETY_VIOLATION
                self.error = "; ".join(audit.violations)
                details["duration_s"] = round(time.monotonic() - started, 3)
                self._finish_round(details)
                return
            self.record.transition(RunState.VERIFYING, step=f"round {index}: DoD")
            verdict = self._dod(ws, f"round {index}")
            passed = verdict.passed and audit.changed_allowed
            score = 1.0 if passed else min(verify.score(verdict), 0.49)
            tree = self.tree = workspace.current_tree(ws)
            details.update(verdict=verdict.to_dict(), score=score, passed=passed)
            assert self.best is not None
            if score >= self.best.score and audit.changed_allowed:
                self.best = Best(score, tree, index, passed, changes=audit.allowed)
                self.record.set_best(score)
                self.record.emit(EventKind.BEST_KEPT, score=score, tree=tree)
                details["kept"] = True
            elif tree != self.best.tree:
                workspace.restore_tree(ws, self.best.tree)
                self._hand_over()
                self.tree = self.best.tree
                self.record.emit(
                    EventKind.BEST_RESTORED,
                    score=score,
                    best_score=self.best.score,
                    best_round=self.best.round_index,
                )
                details["restored_to_round"] = self.best.round_index
            details["duration_s"] = round(time.monotonic() - started, 3)
            self._finish_round(details)
            previous = verdict
            if passed:
                self.status, self.reason = ResultStatus.PASSED, Reason.DOD_PASSED
                return
            if outcome.stop is AgentStop.BUDGET:
                self.reason = _BUDGET_REASONS.get(outcome.budget, Reason.BUDGET_EXHAUSTED)
                self.error = outcome.error
                return
            if outcome.stop is AgentStop.ERROR:
                self.reason, self.error = Reason.AGENT_ERROR, outcome.error
                return
            if outcome.stop in _CLI_ENDINGS:
                self.reason, self.error = _CLI_ENDINGS[outcome.stop], outcome.error
                return
        if self.best is not None and self.best.round_index == 0:
            self.reason = Reason.NO_ALLOWED_CHANGES if self._no_changes() else Reason.DOD_FAILED

    def _check_stop(self) -> None:
        """End the run if `code-runner stop` asked for it (its SIGTERM may be on the way)."""
        if self.record.paths.stop_request.exists() and not self.stopping:
            self.stopping = True
            self.record.emit(EventKind.STOP_REQUESTED, path=str(self.record.paths.stop_request))
            raise Interrupted("stopped by `code-runner stop`")

    def _no_changes(self) -> bool:
        return all(not r.get("audit", {}).get("allowed") for r in self.rounds[1:])

    def _finish_round(self, details: dict[str, Any]) -> None:
        self.rounds.append(details)
        self.record.append_round(details)
        self.record.emit(
            EventKind.ROUND_FINISHED,
            score=details.get("score"),
            passed=details.get("passed"),
        )

    def _out_of_time(self) -> bool:
        if time.monotonic() < self.deadline:
            return False
        self.reason = Reason.RUN_TIMEOUT
        self.error = f"the run exceeded its timeout of {self.spec.timeout_s:g} s"
        return True

    def _dod(self, ws: workspace.Workspace, label: str) -> verify.Verdict:
        dod = self.spec.definition_of_done
        remaining = max(1.0, self.deadline - time.monotonic())
        if remaining < dod.timeout_s:
            dod = dod.model_copy(update={"timeout_s": remaining})
        self.record.emit(EventKind.DOD_STARTED, label=label, command=dod.command)
        if self.sandbox is None:
            ws.empty_scratch()
        verdict = verify.run_dod(
            dod,
            cwd=ws.work_tree,
            env=ws.env(),
            log_path=self.record.paths.verifier_log,
            label=label,
            wrap_argv=self.sandbox.wrap if self.sandbox else None,
        )
        self.record.emit(
            EventKind.DOD_FINISHED,
            label=label,
            passed=verdict.passed,
            exit_code=verdict.exit_code,
            reason=verdict.reason,
        )
        return verdict

    # --- the OS sandbox -----------------------------------------------------------------

    def _open_sandbox(self, ws: workspace.Workspace) -> None:
        """Start the sandbox session preflight decided on: hand over the tree, cgroups."""
        decision = self.pre.sandbox
        if decision is None or not decision.use:
            return
        spec = self.spec
        self.sandbox = open_session(
            ws,
            env=ws.env(),
            network=spec.network,
            limits=spec.limits,
            cpu_s=spec.limits.cpu_s or max(1, round(spec.timeout_s + 0.5)),
            name=self.run_id,
        )
        self.sandbox.open()

    def _hand_over(self) -> None:
        if self.sandbox is not None:
            self.sandbox.hand_over()

    def _close_sandbox(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()

    def _sandbox_posture(self) -> dict[str, Any]:
        """result.json's `sandbox`: bwrap or none, the mode, why, and what it enforced."""
        decision = self.pre.sandbox
        posture: dict[str, Any] = (
            decision.posture()
            if decision is not None
            else {"kind": "none", "mode": "off", "reason": "no sandbox was considered"}
        )
        if self.sandbox is not None:
            posture.update(self.sandbox.posture())
        else:
            posture["network"] = "unrestricted (no sandbox)"
        return posture

    # --- export ------------------------------------------------------------------------

    def _export(self, ws: workspace.Workspace) -> None:
        self.record.transition(RunState.EXPORTING, step="export patch")
        assert self.best is not None
        if self.tree != self.best.tree:
            workspace.restore_tree(ws, self.best.tree)
            self.tree = self.best.tree
        patch = workspace.export_patch(ws)
        review = workspace.review_diff(ws)
        digest = self.record.write_patch(
            patch, hunk_markdown(self.spec.task_id, self.spec.title, review)
        )
        applies, detail = workspace.patch_applies_on_base(ws, patch)
        changed = [c.to_dict() for c in self.best.changes]
        self.patch_info = {
            "patch_artifact": str(self.record.paths.patch),
            "patch_sha256": digest,
            "patch_bytes": len(patch),
            "patch_applies_on_base": applies,
            "changed_files": changed,
            "best_round": self.best.round_index,
        }
        self.record.emit(
            EventKind.PATCH_EXPORTED,
            bytes=len(patch),
            sha256=digest,
            applies=applies,
            files=[c["path"] for c in changed],
        )
        if not applies:
            self.status, self.reason = ResultStatus.ERROR, Reason.PATCH_INVALID
            self.error = f"the exported patch does not apply to base: {detail}"

    # --- complete-task mode: the apply step (apply.py does the work) --------------------

    def _apply(self, ws: workspace.Workspace, before: snapshot.SourceSnapshot) -> None:
        spec = self.spec
        self.record.transition(RunState.APPLYING, step="apply to source")
        outcome = self.applied = apply.apply_patch(
            apply.ApplyRequest(
                source=self.pre.source,
                run_id=self.run_id,
                task_id=spec.task_id,
                title=spec.title,
                base=self.pre.base,
                patch=self.record.paths.patch.read_bytes(),
                allowlist=spec.allowlist_policy,
                dod=spec.definition_of_done,
                env=ws.env(),
                record=self.record.paths,
                commit=spec.commit_on_success,
                rollback=spec.rollback_on_failure,
                unchanged_since=before,
            ),
            self.record,
        )
        if outcome.interrupted:
            raise Interrupted(outcome.error or "interrupted during the apply step")
        if not outcome.ok:
            self.status, self.error = ResultStatus.FAILED, outcome.error
            self.reason = (
                Reason.APPLY_REFUSED
                if outcome.refused
                else Reason.SOURCE_DOD_FAILED
                if outcome.dod_passed is False
                else Reason.APPLY_FAILED
            )

    def _source_differences(
        self, before: snapshot.SourceSnapshot, after: snapshot.SourceSnapshot
    ) -> list[str]:
        """Every source change but the apply step's own (which apply.py judged itself)."""
        done = self.applied
        if done is None or done.pre is None or done.post is None:
            return snapshot.differences(before, after)
        return [
            *snapshot.differences(before, done.pre),
            *done.unexpected,
            *snapshot.differences(done.post, after),
        ]

    def _apply_fields(self) -> dict[str, Any]:
        if self.applied is not None:
            return self.applied.result_fields()
        why = None
        if self.spec.apply_to_source:
            why = (
                "not applied: the DoD already passes on base, so there is nothing to apply"
                if self.status is ResultStatus.ALREADY_SATISFIED
                else "not applied: the DoD did not pass in the workspace"
            )
        return {
            "source_patch_applied": False,
            "source_dod_passed": None,
            "source_commit": None,
            "source_rollback_applied": False,
            "source_apply_error": why,
        }

    # --- the whole run -----------------------------------------------------------------

    def execute(self) -> RunOutcome:
        spec, record = self.spec, self.record
        proc.become_subreaper()
        started_at = datetime.now(UTC)
        t0 = time.monotonic()
        record.write_request(
            {
                "run_id": self.run_id,
                "spec": spec_to_request(spec),
                "base": self.pre.base,
                "code_runner_version": _version(),
                "pid": os.getpid(),
                "requested_at": clock.iso(started_at),
            }
        )
        record.emit(
            EventKind.RUN_STARTED, task_id=spec.task_id, backend=spec.backend, base=self.pre.base
        )
        # Both snapshots only read the source, so they overlap with work that only
        # touches the state dir: the clone at the start, the release at the end.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")
        before_job = pool.submit(snapshot.take, self.pre.source)
        released = False
        with signals_as_interrupt(
            Interrupted,
            on_signal=lambda name: record.emit(EventKind.SIGNAL_RECEIVED, signal=name),
            ignore=lambda: self.stopping,
        ):
            try:
                record.transition(RunState.PREPARING, step="create workspace")
                self.ws = workspace.create(
                    self.pre.source, self.pre.base, run_id=self.run_id, output_dir=spec.output_dir
                )
                record.emit(EventKind.WORKSPACE_CREATED, path=str(self.ws.work_tree))
                self._write_run_info("running")
                before_job.result()  # the agent must not act before the source is fingerprinted
                self._rounds(self.ws)
                if self.ws is not None and self.best is not None:
                    self._export(self.ws)
                if spec.apply_to_source and self.status is ResultStatus.PASSED:
                    self._apply(self.ws, before_job.result())
            except Interrupted as exc:
                stopped = record.paths.stop_request.exists()
                self.stopping = self.stopping or stopped
                self.status, self.reason, self.error = (
                    ResultStatus.INTERRUPTED,
                    Reason.STOPPED if stopped else Reason.INTERRUPTED,
                    "stopped by `code-runner stop`" if stopped else exc.message,
                )
            except CodeRunnerError as exc:
                self.status = ResultStatus.ERROR
                full = isinstance(exc, DiskFull)
                self.reason = Reason.DISK_FULL if full else Reason.WORKSPACE_ERROR
                self.error = exc.render()
                record.emit(EventKind.ERROR, message=exc.render())
            except Exception as exc:
                self.status, self.reason = ResultStatus.ERROR, Reason.INTERNAL_ERROR
                self.error = f"{type(exc).__name__}: {exc}"
                record.emit(EventKind.ERROR, message=self.error)
                raise
            finally:
                if record.state not in (RunState.RELEASING,):
                    with contextlib.suppress(CodeRunnerError):
                        record.transition(RunState.RELEASING, step="release workspace")
                before = before_job.result()
                after_job = pool.submit(snapshot.take, self.pre.source)
                self._close_sandbox()
                if self.ws is not None:
                    released = workspace.release(self.ws)
                    record.emit(EventKind.WORKSPACE_RELEASED, removed=released)
                after = after_job.result()
                pool.shutdown()
                diffs = self._source_differences(before, after)
                record.emit(EventKind.SOURCE_CHECKED, unchanged=not diffs, differences=diffs)
                if diffs:
                    self.status, self.reason = ResultStatus.FAILED, Reason.SOURCE_CHANGED
                    self.error = "the source repo changed during the run: " + "; ".join(diffs)
                result = self._result(before, after, diffs, released, started_at, t0)
                result["result_contract"] = contract.assess(self.last_response, result)
                record.emit(EventKind.RESULT_CONTRACT, **result["result_contract"])
                record.write_result(result)
                self._write_reports(result)
                final = {
                    ResultStatus.PASSED: RunState.PASSED,
                    ResultStatus.ALREADY_SATISFIED: RunState.PASSED,
                    ResultStatus.FAILED: RunState.FAILED,
                    ResultStatus.INTERRUPTED: RunState.INTERRUPTED,
                }.get(self.status, RunState.ERROR)
                record.transition(final, step="done", status=self.status.value)
                record.emit(
                    EventKind.RUN_FINISHED, status=self.status.value, reason=self.reason.value
                )
        return RunOutcome(self.status, self.reason, result, record.paths)

    def _write_run_info(self, status: str, os_sandbox: object = None) -> None:
        info = views.run_info(
            self.spec,
            run_id=self.run_id,
            agent=self.pre.agent,
            workspace_dir=self.ws.work_tree if self.ws else None,
            base=self.pre.base,
            paths=self.record.paths,
            status=status,
            os_sandbox=os_sandbox,
        )
        views.write_run_info(self.record.paths, info)

    def _write_reports(self, result: dict[str, Any]) -> None:
        """run.json, result.md and eval.md beside the record; never fails the run."""
        try:
            self._write_run_info(str(result.get("status")), result.get("sandbox"))
            views.write_reports(self.record.paths, result, self.spec)
        except OSError as exc:
            self.record.emit(EventKind.ERROR, message=f"could not write run reports: {exc}")

    def _result(
        self,
        before: snapshot.SourceSnapshot,
        after: snapshot.SourceSnapshot,
        diffs: list[str],
        released: bool,
        started_at: datetime,
        t0: float,
    ) -> dict[str, Any]:
        spec = self.spec
        dod_passed = self.status in (ResultStatus.PASSED, ResultStatus.ALREADY_SATISFIED)
        dod_passed = dod_passed or self.applied is not None  # applied only after it passed
        return {
            "run_id": self.run_id,
            "task_id": spec.task_id,
            "title": spec.title,
            "status": self.status.value,
            "reason": self.reason.value,
            "dod_passed": dod_passed,
            "error": self.error,
            "backend": spec.backend,
            "base": self.pre.base,
            "rounds": max(0, len(self.rounds) - 1),
            "max_rounds": spec.max_rounds,
            "best_score": self.best.score if self.best else 0.0,
            "best_round": self.best.round_index if self.best else None,
            "patch_artifact": None,
            **self.patch_info,
            "worktree_path": str(self.ws.work_tree) if self.ws else None,
            "worktree_removed": released or self.ws is None,
            "source_head_before": before.head,
            "source_head_after": after.head,
            "source_status_before": list(before.status),
            "source_status_after": list(after.status),
            "source_unchanged": not diffs,
            "source_differences": diffs,
            "safety_violations": self.violations,
            "dropped_changes": self.dropped,
            "sandbox": self._sandbox_posture(),
            "round_details": self.rounds,
            "apply_to_source": spec.apply_to_source,
            **self._apply_fields(),
            "started_at": clock.iso(started_at),
            "finished_at": clock.iso(datetime.now(UTC)),
            "duration_s": round(time.monotonic() - t0, 3),
            "record_files": {
                name: str(getattr(self.record.paths, name))
                for name in (
                    "request",
                    "status",
                    "events",
                    "rounds",
                    "response",
                    "result",
                    "patch",
                    "hunk",
                    "verifier_log",
                )
            }
            | (
                {"transcript": str(self.record.paths.transcript)}
                if self.record.paths.transcript.exists()
                else {}
            ),
        }


def _version() -> str:
    from code_runner import __version__

    return __version__


def run_task(pre: Preflight, *, listeners: list[Any] | None = None) -> RunOutcome:
    """Run a preflighted task to its end. The record is in `pre.spec.output_dir`."""
    run_id = new_run_id(pre.spec.task_id)
    # the run lease lets `gc` finish the record of a run killed at any point
    run_leases.take(run_id, pre.spec.output_dir, pre.spec.task_id)
    record: RunRecord | None = None
    try:
        record = RunRecord.open(
            pre.spec.output_dir, pre.spec.task_id, run_id, max_rounds=pre.spec.max_rounds
        )
        for listener in listeners or []:
            record.subscribe(listener)
        return TaskRun(pre, record, run_id).execute()
    except DiskFull as exc:
        if record is not None and not record.finished:
            record.give_up(exc.message)
        raise
    finally:
        if record is not None and record.finished:
            run_leases.drop(run_id)


__all__ = ["RunOutcome", "TaskRun", "run_task"]

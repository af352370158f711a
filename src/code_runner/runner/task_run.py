"""One task from spec to result: the lifecycle around the round loop.

    preflight -> snapshot source (in a thread, while the workspace is made and the sandbox
    started; no command runs before it) -> the rounds (`rounds.RoundLoop`) -> export best
    patch -> [apply to source] -> release workspace (always) -> snapshot source again -> result

How the run ended is one `Ending`: the loop's, unless the export, the apply step, a signal,
an error or a changed source overrides it. `result.json` is a `RunResult` built from it."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import code_runner.runner.leases as run_leases
import code_runner.runner.skills as run_skills
from code_runner import __version__, apply, clock, files, proc, workspace
from code_runner.errors import ApplyRefused, CodeRunnerError, DiskFull, Interrupted
from code_runner.events import EventKind
from code_runner.proc import signals_as_interrupt
from code_runner.record import (
    Reason,
    ResultStatus,
    RunRecord,
    RunResult,
    RunState,
    run_usage,
    views,
)
from code_runner.repo import snapshot
from code_runner.runner.preflight import DodCannotStart, Preflight, new_run_id, project_env
from code_runner.runner.rounds import Ending, RoundLoop, apply_ending
from code_runner.sandbox import SandboxMode, SandboxUser, Session, new_identity, open_session
from code_runner.task import contract, spec_to_request
from code_runner.task.paths import Allowlist
from code_runner.task.skills import Skill

_FINAL_STATES = {
    ResultStatus.PASSED: RunState.PASSED,
    ResultStatus.ALREADY_SATISFIED: RunState.PASSED,
    ResultStatus.FAILED: RunState.FAILED,
    ResultStatus.INTERRUPTED: RunState.INTERRUPTED,
}


class TaskRun:
    """One execution of a task. Construct, then `execute()`; the record says the rest."""

    def __init__(
        self,
        pre: Preflight,
        record: RunRecord,
        run_id: str,
        *,
        item_mode: bool = False,
        allowlist: Allowlist | None = None,
    ) -> None:
        self.pre = pre
        self.item_mode = item_mode  # a plan item: see `RoundLoop.item_mode`
        self.allowlist = allowlist
        self.spec = pre.spec
        self.record = record
        self.run_id = run_id
        self.deadline = time.monotonic() + self.spec.timeout_s
        self.ws: workspace.Workspace | None = None
        self.loop: RoundLoop | None = None
        self.ending = Ending(ResultStatus.FAILED, Reason.DOD_FAILED)
        self.patch_info: dict[str, Any] = {}
        self.sandbox: Session | None = None  # the OS sandbox around commands and the DoD
        self.identity: SandboxUser | None = None  # a root runner's uid for the sandbox
        self.stopping = False  # a stop request is being honoured; further signals wait
        self.applied: apply.ApplyOutcome | None = None  # complete-task mode only
        self.skills: tuple[Skill, ...] = ()  # the spec's named skills, read in `_work`

    def _rounds(self, ws: workspace.Workspace) -> Ending:
        self.loop = RoundLoop(
            spec=self.spec,
            agent=self.pre.agent,
            record=self.record,
            ws=ws,
            deadline=self.deadline,
            check_stop=self._check_stop,
            sandbox=self.sandbox,
            item_mode=self.item_mode,
            allowlist=self.allowlist,
            skills=self.skills,
        )
        return self.loop.run()

    def _check_stop(self) -> None:
        """End the run if `code-runner stop` asked for it (its SIGTERM may be on the way)."""
        if self.record.paths.stop_request.exists() and not self.stopping:
            self.stopping = True
            self.record.emit(EventKind.STOP_REQUESTED, path=str(self.record.paths.stop_request))
            raise Interrupted("stopped by `code-runner stop`")

    # --- the OS sandbox -----------------------------------------------------------------

    def _open_sandbox(self, ws: workspace.Workspace) -> None:
        """Start the sandbox session preflight decided on: hand over the tree, cgroups, and
        its resident sandbox (which runs nothing until the first command)."""
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
            keep_vars=ws.project.variable_names() if ws.project is not None else (),
            identity=self.identity,
        )
        self.sandbox.open()
        self.sandbox.start(ws.env())

    def _sandbox_posture(self) -> dict[str, Any]:
        """result.json's `sandbox`: bwrap or none, the mode, why, and what it enforced."""
        decision = self.pre.sandbox
        posture: dict[str, Any] = (
            decision.posture()
            if decision is not None
            else {"kind": "none", "mode": "off", "reason": "no sandbox was considered"}
        )
        unsandboxed = {"network": "unrestricted (no sandbox)"}
        return posture | (self.sandbox.posture() if self.sandbox is not None else unsandboxed)

    # --- export ------------------------------------------------------------------------

    def _export(self, ws: workspace.Workspace) -> None:
        self.record.transition(RunState.EXPORTING, step="export patch")
        best = self.loop.best if self.loop else None
        assert best is not None
        exported = ws.export(best.tree)
        digest, size = self.record.copy_patch(
            exported.patch_path, exported.review_path, title=self.spec.title
        )
        changed = [c.to_dict() for c in best.changes]
        self.patch_info = {
            "patch_artifact": str(self.record.paths.patch),
            "patch_sha256": digest,
            "patch_bytes": size,
            "patch_applies_on_base": exported.applies_on_base,
            "changed_files": changed,
            "best_round": best.round_index,
        }
        self.record.emit(
            EventKind.PATCH_EXPORTED,
            bytes=size,
            sha256=digest,
            applies=exported.applies_on_base,
            files=[c["path"] for c in changed],
        )
        if not exported.applies_on_base:
            self.ending = Ending(
                ResultStatus.ERROR,
                Reason.PATCH_INVALID,
                f"the exported patch does not apply to base: {exported.detail}",
            )

    # --- complete-task mode: the apply step (apply.py does the work) --------------------

    def _apply_sandbox(self) -> apply.DodSandbox:
        """The source DoD's walls: the run's sandbox; without one, only if the spec said `off`
        (in `auto` it needs `code-runner apply --unsandboxed`: ApplyRefused)."""
        decision, spec = self.pre.sandbox, self.spec
        mode = decision.mode if decision is not None else SandboxMode.AUTO
        cpu_s = spec.limits.cpu_s or max(1, round(spec.timeout_s + 0.5))
        return apply.decide_dod_sandbox(mode, limits=spec.limits, cpu_s=cpu_s)

    def _apply(self, ws: workspace.Workspace, before: snapshot.SourceSnapshot) -> None:
        spec = self.spec
        left = self.deadline - time.monotonic()
        if left <= 0:
            error = f"not applied: the run's timeout of {spec.timeout_s:g} s had passed"
            self.ending = Ending(ResultStatus.FAILED, Reason.RUN_TIMEOUT, error)
            return
        dod = spec.definition_of_done
        if left < dod.timeout_s:  # the source DoD gets the time the run has left
            dod = dod.model_copy(update={"timeout_s": left})
        self.record.transition(RunState.APPLYING, step="apply to source")
        try:
            walls = self._apply_sandbox()
        except ApplyRefused as exc:
            self.record.emit(EventKind.APPLY_REFUSED, message=exc.message)
            self.applied = apply.ApplyOutcome(refused=True, error=exc.render())
            self.ending = apply_ending(self.applied) or self.ending
            return
        digest = self.patch_info.get("patch_sha256") if self.patch_info else None
        chunks = files.read_chunks(self.record.paths.patch)
        with apply.private_patch(chunks, sha256=digest, name=self.run_id) as patch:
            outcome = self.applied = apply.apply_patch(
                apply.ApplyRequest(
                    source=self.pre.source,
                    run_id=self.run_id,
                    task_id=spec.task_id,
                    title=spec.title,
                    base=self.pre.base,
                    patch=patch,
                    allowlist=spec.allowlist_policy,
                    dod=dod,
                    env=ws.source_env(),
                    record=self.record.paths,
                    commit=spec.commit_on_success,
                    rollback=spec.rollback_on_failure,
                    unchanged_since=before,
                    sandbox=walls,
                ),
                self.record,
            )
        if outcome.interrupted:
            raise Interrupted(outcome.error or "interrupted during the apply step")
        self.ending = apply_ending(outcome) or self.ending

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
                if self.ending.status is ResultStatus.ALREADY_SATISFIED
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

    def execute(self) -> RunResult:
        spec, record = self.spec, self.record
        proc.become_subreaper()
        started_at = datetime.now(UTC)
        t0 = time.monotonic()
        # Both snapshots only read the source, so they overlap with work that only
        # touches the state dir: the clone at the start, the release at the end.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")
        before_job = pool.submit(snapshot.take, self.pre.source)
        with signals_as_interrupt(
            Interrupted,
            on_signal=lambda name: record.emit(EventKind.SIGNAL_RECEIVED, signal=name),
            ignore=lambda: self.stopping,
        ):
            try:
                # inside the handler: a signal from the first record write on ends in a result
                record.write_request(
                    {
                        "run_id": self.run_id,
                        "spec": spec_to_request(spec),
                        "base": self.pre.base,
                        "code_runner_version": __version__,
                        "pid": os.getpid(),
                        "requested_at": clock.iso(started_at),
                    }
                )
                started = {"task_id": spec.task_id, "backend": spec.backend, "base": self.pre.base}
                record.emit(EventKind.RUN_STARTED, **started)
                self._work(before_job.result)
            except Interrupted as exc:
                stopped = record.paths.stop_request.exists()
                self.stopping = self.stopping or stopped
                self.ending = (
                    Ending(
                        ResultStatus.INTERRUPTED, Reason.STOPPED, "stopped by `code-runner stop`"
                    )
                    if stopped
                    else Ending(ResultStatus.INTERRUPTED, Reason.INTERRUPTED, exc.message)
                )
            except CodeRunnerError as exc:
                reason = (
                    Reason.DISK_FULL
                    if isinstance(exc, DiskFull)
                    else Reason.DOD_CANNOT_START
                    if isinstance(exc, DodCannotStart)
                    else Reason.WORKSPACE_ERROR
                )
                self.ending = Ending(ResultStatus.ERROR, reason, exc.render())
                record.emit(EventKind.ERROR, message=exc.render())
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                self.ending = Ending(ResultStatus.ERROR, Reason.INTERNAL_ERROR, error)
                record.emit(EventKind.ERROR, message=error)
                raise
            finally:
                result = self._finish(pool, before_job.result(), started_at, t0)
        return result

    def _project_env(self) -> workspace.ProjectEnv:
        """The env section's environment; a named interpreter that is missing ends the run."""
        assert self.pre.source.work_tree is not None
        return project_env(self.pre.source.work_tree, self.spec.env)

    def _work(self, source_before: Callable[[], snapshot.SourceSnapshot]) -> None:
        """Workspace, rounds, export, apply: the part a signal or an error may cut short."""
        record, spec = self.record, self.spec
        record.transition(RunState.PREPARING, step="create workspace")
        decision = self.pre.sandbox
        if decision is not None and decision.use and os.geteuid() == 0:
            self.identity = new_identity()  # the checkout is the sandbox's from the start
        self.skills = run_skills.read_skills(spec)
        self.ws = workspace.create(
            self.pre.source,
            self.pre.base,
            run_id=self.run_id,
            output_dir=spec.output_dir,
            project=self._project_env(),
            owner=(self.identity.uid, self.identity.gid) if self.identity else None,
            cached=not getattr(self.pre.agent, "edits_as_runner", False),
        )
        record.emit(EventKind.WORKSPACE_CREATED, **self.ws.created_fields())
        self._write_run_info("running")
        self._open_sandbox(self.ws)  # its start overlaps with the source's fingerprint
        source_before()  # no command may run before the source is fingerprinted
        self.ending = self._rounds(self.ws)
        self._export(self.ws)
        if spec.apply_to_source and self.ending.status is ResultStatus.PASSED:
            self._apply(self.ws, source_before())

    def _finish(
        self,
        pool: ThreadPoolExecutor,
        before: snapshot.SourceSnapshot,
        started_at: datetime,
        t0: float,
    ) -> RunResult:
        """Release, check the source, write the result: always, however the run ended."""
        record = self.record
        if record.state not in (RunState.RELEASING,):
            with contextlib.suppress(CodeRunnerError):
                record.transition(RunState.RELEASING, step="release workspace")
        after_job = pool.submit(snapshot.take, self.pre.source, since=before)
        if self.sandbox is not None:
            self.sandbox.close()
        released = False
        if self.ws is not None:
            released = self.ws.release()
            record.emit(EventKind.WORKSPACE_RELEASED, removed=released)
        after = after_job.result()
        pool.shutdown()
        diffs = self._source_differences(before, after)
        record.emit(EventKind.SOURCE_CHECKED, unchanged=not diffs, differences=diffs)
        if diffs:
            self.ending = Ending(
                ResultStatus.FAILED,
                Reason.SOURCE_CHANGED,
                "the source repo changed during the run: " + "; ".join(diffs),
            )
        result = self._result(before, after, diffs, released, started_at, t0)
        response = self.loop.last_response if self.loop else ""
        assessed = contract.assess(response, result.evidence())
        result = result.updated(result_contract=assessed)
        record.emit(EventKind.RESULT_CONTRACT, **assessed)
        result = run_skills.with_review(result, self.skills, record.paths.events)
        record.write_result(result)
        self._write_reports(result)
        status = self.ending.status
        final = _FINAL_STATES.get(status, RunState.ERROR)
        record.transition(final, step="done", status=status.value)
        record.emit(EventKind.RUN_FINISHED, status=status.value, reason=self.ending.reason.value)
        return result

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
            skills=[skill.to_dict() for skill in self.skills],
        )
        views.write_run_info(self.record.paths, info)

    def _write_reports(self, result: RunResult) -> None:
        """run.json, result.md and eval.md beside the record; never fails the run."""
        try:
            self._write_run_info(result.status.value, result.sandbox)
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
    ) -> RunResult:
        spec, ending, loop = self.spec, self.ending, self.loop
        best = loop.best if loop else None
        rounds = loop.rounds if loop else []
        return RunResult.model_validate(
            {
                "run_id": self.run_id,
                "task_id": spec.task_id,
                "title": spec.title,
                "status": ending.status,
                "reason": ending.reason,
                "dod_passed": ending.passed or self.applied is not None,  # applied: it passed
                "error": ending.error,
                "backend": spec.backend,
                "base": self.pre.base,
                "rounds": max(0, len(rounds) - 1),
                "max_rounds": spec.max_rounds,
                "best_score": best.score if best else 0.0,
                "best_round": best.round_index if best else None,
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
                "safety_violations": loop.violations if loop else [],
                "dropped_changes": loop.dropped if loop else [],
                "sandbox": self._sandbox_posture(),
                "round_details": rounds,
                "usage": run_usage(rounds),
                "apply_to_source": spec.apply_to_source,
                **self._apply_fields(),
                "started_at": clock.iso(started_at),
                "finished_at": clock.iso(datetime.now(UTC)),
                "duration_s": round(time.monotonic() - t0, 3),
                "record_files": self.record.paths.record_files(),
            }
        )


def run_task(
    pre: Preflight,
    *,
    listeners: list[Any] | None = None,
    run_id: str | None = None,
    item_mode: bool = False,
    allowlist: Allowlist | None = None,
) -> RunResult:
    """Run a preflighted task to its end. The record is in `pre.spec.output_dir`.

    `item_mode` and `allowlist` run it as a plan item (see `RoundLoop.item_mode`)."""
    run_id = run_id or new_run_id(pre.spec.task_id)
    record: RunRecord | None = None
    # From the lease on, SIGINT/SIGTERM is an `Interrupted` (exit 130), not a death by signal:
    # `execute` makes one an interrupted result; one before it leaves a leased record (which
    # `gc` finishes); one after is moot. An enclosing handler (a plan's) keeps its signals.
    finished = lambda: record is not None and record.finished  # noqa: E731 - read when signalled
    with signals_as_interrupt(Interrupted, signals=proc.unhandled_signals(), ignore=finished):
        run_leases.take(run_id, pre.spec.output_dir, pre.spec.task_id)
        try:
            record = RunRecord.open(
                pre.spec.output_dir, pre.spec.task_id, run_id, max_rounds=pre.spec.max_rounds
            )
            for listener in listeners or []:
                record.subscribe(listener)
            run = TaskRun(pre, record, run_id, item_mode=item_mode, allowlist=allowlist)
            return run.execute()
        except DiskFull as exc:
            if record is not None and not record.finished:
                record.give_up(exc.message)
            raise
        finally:
            proc.release_run_group(run_id)  # the spare cgroup leaf of its commands, and the group
            if record is None or record.finished:
                run_leases.drop(run_id)
            if record is not None:
                record.close()


__all__ = ["TaskRun", "run_task"]

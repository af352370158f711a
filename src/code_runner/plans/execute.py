"""`plan run`: import a plan, recover what a dead run left, run its items in order.

Each item is a normal task run (`runner.run_task` in plan-item mode) in a workspace cloned
from the plan's runner repo at the previous item's commit; its record is the normal task
record under `items/Pn/<attempt>/`. The runner judges the result (`plans.item.judge`),
builds the commit from the verified patch in the runner repo, and hands the store one
`Outcome`: the store alone decides what the attempt and the plan become.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_runner import agents, files
from code_runner.agents.cli_agents.agent import supervise_in_tmux
from code_runner.errors import CodeRunnerError, Interrupted, UsageError
from code_runner.plans.checks import validate_file
from code_runner.plans.commands import Approvals, show_argv
from code_runner.plans.database import default_plan_id
from code_runner.plans.item import (
    commit_message,
    every_path,
    item_argvs,
    item_spec,
    judge,
    later_programs,
)
from code_runner.plans.lock import crash_point, plan_lock
from code_runner.plans.model import Plan
from code_runner.plans.outcome import Outcome
from code_runner.plans.projection import read_base_tree
from code_runner.plans.recovery import RUN_ID_FILE, drop_attempt_refs, recover_plan
from code_runner.plans.report import emit, record_dir, write_views
from code_runner.plans.runner_repo import (
    RunnerRepo,
    attempt_ref,
    ensure_runner_repo,
    item_identity,
)
from code_runner.plans.states import AttemptState, FirstReason, PlanStatus, RunEnd
from code_runner.plans.store import PlanStore
from code_runner.proc import signals_as_interrupt
from code_runner.record import Reason
from code_runner.repo import git, snapshot
from code_runner.runner import Preflight, run_task
from code_runner.sandbox import decide
from code_runner.task import output_dir_problems

NO_BUDGET_S = 1e9  # no --budget: the plan's clock never runs out
MIN_ITEM_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class RunSettings:
    backend: str
    max_rounds: int
    item_timeout_s: float
    base_dir: Path  # relative backend arguments (a script file) are read from here
    output_dir: Path | None
    budget_s: float | None = None  # the whole plan's wall clock, from its first admission
    tmux: bool | None = None  # an agent CLI in a tmux pane (None: the backend's own setting)
    on_scope: str = "warn"  # a write outside the item's declared files: warn, or stop the round

    def to_dict(self, approvals: Approvals) -> dict[str, Any]:
        """What `plan resume` reuses: the run options and the approvals given at import."""
        return {
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "backend": self.backend,
            "max_rounds": self.max_rounds,
            "item_timeout_s": self.item_timeout_s,
            "base_dir": str(self.base_dir),
            "tmux": self.tmux,
            "on_scope": self.on_scope,
            "approved": [list(entry) for entry in approvals.entries],
        }


def load_plan(plan_file: Path, source: Path, base: str, approvals: Approvals) -> tuple[Plan, str]:
    """The checked plan and the base commit; every problem, or each unapproved argv, exit 2."""
    tree = read_base_tree(source, base)
    validation = validate_file(plan_file, base=tree, approvals=approvals)
    if not validation.ok or validation.plan is None:
        raise validation.error()
    if validation.unapproved:
        lines = [f"{c.item}: {show_argv(c.argv or ())}" for c in validation.unapproved]
        raise UsageError(
            "the plan has commands you have not approved, so it did not start:\n  "
            + "\n  ".join(lines),
            fix="approve each exact argv with --allow-cmd '<argv as JSON>' (as shown), or in"
            " [plans] allowed_commands of your config.",
        )
    return validation.plan, tree.commit


def run_plan(
    plan_file: Path,
    source_dir: Path,
    base: str,
    settings: RunSettings,
    approvals: Approvals,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    plan, base_sha = load_plan(plan_file, source_dir, base, approvals)
    source = git.open_source(source_dir)
    if settings.output_dir is not None:
        for problem in output_dir_problems(settings.output_dir, source):
            raise UsageError(
                problem.replace("output_dir: ", "--output-dir ", 1).split("; ")[0] + ".",
                fix="choose a --output-dir outside the source repo (it is only read).",
            )
    if settings.tmux:  # refused before anything is created when the backend is no CLI
        first = settings.backend.replace("{item}", plan.items[0].id)
        agent = agents.make_agent(first, base_dir=settings.base_dir, source_dir=source.work_tree)
        supervise_in_tmux(agent, enabled=True)
    plan_id = default_plan_id(plan_file.stem, plan.content_sha256())
    with plan_lock(plan_id), PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        row, _created = store.import_plan(
            plan,
            source_dir=source.work_tree or source_dir,
            source_git_dir=source.git_dir,
            base=base_sha,
            plan_id=plan_id,
            name=plan_file.stem,
            settings=settings.to_dict(approvals),
        )
        plan_id = row["plan_id"]
        out = record_dir(plan_id, row["settings"])
        run = PlanRun(store, plan_id, source, settings, out, on_event)
        return run.execute(base_sha)


class PlanRun:
    def __init__(
        self,
        store: PlanStore,
        plan_id: str,
        source: git.Repo,
        settings: RunSettings,
        out: Path,
        on_event: Callable[[str, dict[str, Any]], None] | None,
    ) -> None:
        self.store, self.plan_id, self.source = store, plan_id, source
        self.settings, self.out, self.on_event = settings, out, on_event
        self.closing = False  # a signal came: no further item is admitted
        self.settling = False  # a terminal write is under way: a signal waits for it
        self.leftover = ""  # a workspace this run could not remove: no further item

    def _close(self, _name: str) -> None:
        self.closing = True

    def emit(self, kind: str, **data: Any) -> None:
        emit(self.out, kind, plan=self.plan_id, **data)
        if self.on_event is not None:
            self.on_event(kind, data)

    def execute(self, base_sha: str) -> dict[str, Any]:
        self.recover()
        runner = ensure_runner_repo(self.plan_id, self.source, base_sha)
        self.emit("run_started", head=self.store.plan(self.plan_id)["head"])
        try:
            with signals_as_interrupt(
                Interrupted, on_signal=self._close, ignore=lambda: self.settling
            ):
                self._loop(runner)
        finally:
            if self.leftover:
                self.store.end_run(self.plan_id, f"needs recovery: {self.leftover}")
            else:
                self.store.end_run(self.plan_id)
            status = write_views(self.store, self.plan_id, self.out)
            self.emit("run_finished", status=status["status"])
        return status

    def _loop(self, runner: RunnerRepo) -> None:
        while self._admissible():
            item = self.store.next_item(self.plan_id)
            assert item is not None
            ended = self.run_item(runner, item)
            write_views(self.store, self.plan_id, self.out)
            if ended is not AttemptState.COMPLETED or self.leftover:
                break  # a failed item, or a leftover workspace, waits for the next start

    def _admissible(self) -> bool:
        row = self.store.plan(self.plan_id)
        status = PlanStatus(row["status"])
        admitting = status in (PlanStatus.READY, PlanStatus.PAUSED, PlanStatus.RUNNING)
        admitting = admitting and not self.closing
        return admitting and self.store.next_item(self.plan_id) is not None

    # --- recovery -------------------------------------------------------------------------

    def recover(self) -> None:
        """What a dead owner left (`plans.recovery`), before anything is admitted; owed
        work it pays leaves the plan at a gate, so nothing is admitted after it."""
        done = recover_plan(self.store, self.plan_id, self.emit)
        for owed in done.owed:
            self.emit("owed_paid", what=owed)

    # --- one item -------------------------------------------------------------------------

    def run_item(self, runner: RunnerRepo, item_id: str) -> AttemptState:
        row = self.store.plan(self.plan_id)
        plan = self.store.revision(self.plan_id)
        plan.item(item_id)
        number = 1 + sum(1 for a in self.store.attempts(self.plan_id) if a["item"] == item_id)
        where = self.out / "items" / item_id / str(number)
        attempt = self.store.admit(
            self.plan_id,
            item_id,
            expected_state_version=row["state_version"],
            budget_s=self.settings.budget_s or NO_BUDGET_S,
            record_dir=str(where),
        )
        run_id = f"{self.plan_id[:40]}-{item_id}-{number}-{secrets.token_hex(3)}"
        where.mkdir(parents=True, exist_ok=True)
        files.atomic_write_text(where / RUN_ID_FILE, run_id + "\n")
        self.emit("item_admitted", item=item_id, attempt=attempt["id"], parent=attempt["parent"])
        crash_point(item_id, "admitted")
        timeout_s, clipped = item_timeout(
            self.settings.item_timeout_s, self.store.plan(self.plan_id)
        )
        try:
            outcome = self._attempt(runner, plan, item_id, attempt, where, run_id, timeout_s)
        except Interrupted as exc:
            self.store.record_first_reason(attempt["id"], FirstReason.SHUTDOWN)
            outcome = Outcome(end=RunEnd.FAILED, diagnostic=exc.render())
        except CodeRunnerError as exc:
            outcome = Outcome(end=RunEnd.CAPTURE_FAILURE, diagnostic=exc.render())
        if clipped and outcome.end is RunEnd.TIMEOUT:  # the plan's budget ended it
            self.store.record_first_reason(attempt["id"], FirstReason.TIME_LIMIT)
        if outcome.diagnostic.startswith("violation:"):
            self.store.record_finding(attempt["id"], "violation", outcome.diagnostic)
        self.settling = True
        try:
            settled = self.store.settle(attempt["id"], outcome)
            if settled.state is not AttemptState.COMPLETED:
                drop_attempt_refs(self.store, self.plan_id)  # an unpublished commit goes now
        finally:
            self.settling = False
        self.emit(
            "item_settled",
            item=item_id,
            state=settled.state.value,
            plan_status=settled.plan_status.value,
            commit=outcome.commit.sha if outcome.commit else None,
            unchanged=outcome.unchanged,
            reason=settled.reason,
        )
        return settled.state

    def _attempt(
        self,
        runner: RunnerRepo,
        plan: Plan,
        item_id: str,
        attempt: Any,
        where: Path,
        run_id: str,
        timeout_s: float,
    ) -> Outcome:
        item = plan.item(item_id)
        settings = self.settings
        spec = item_spec(
            plan,
            item,
            cwd=runner.clone_source.work_tree or where,
            output_dir=where,
            backend=settings.backend,
            max_rounds=settings.max_rounds,
            timeout_s=timeout_s,
            on_scope=settings.on_scope,
        ).model_copy(update={"base": attempt["parent"]})
        source = runner.clone_source
        agent = agents.make_agent(
            spec.backend, base_dir=settings.base_dir, source_dir=self.source.work_tree
        )
        if settings.tmux is not None:
            agent = supervise_in_tmux(agent, enabled=settings.tmux)
        pre = Preflight(
            spec=spec,
            source=source,
            base=attempt["parent"],
            agent=agent,
            sandbox=decide(spec.sandbox, limits=spec.limits),
        )
        before = snapshot.take(self.source)
        self.store.mark_running(attempt["id"])
        self.emit("item_running", item=item_id, run_id=run_id, record=str(where))
        result = run_task(pre, run_id=run_id, item_mode=True, allowlist=every_path())
        if not result.worktree_removed:  # the next start's recovery removes it
            self.leftover = f"the workspace of {item_id} ({run_id}) could not be removed"
            self.emit("needs_recovery", item=item_id, run_id=run_id, reason=self.leftover)
        if result.reason in (Reason.INTERRUPTED, Reason.STOPPED):
            self.store.record_first_reason(attempt["id"], FirstReason.SHUTDOWN)
        crash_point(item_id, "audited")
        after = snapshot.take(self.source)
        changed = snapshot.differences(before, after)
        if changed:
            return Outcome(
                end=RunEnd.FAILED,
                diagnostic="violation: the source repo changed during the item: "
                + "; ".join(changed),
            )
        judged = judge(result, item, later_programs(plan, item))
        if judged.violations:
            return Outcome(
                end=RunEnd.FAILED, diagnostic="violation: " + "; ".join(judged.violations)
            )
        if not judged.ok:
            end = RunEnd.TIMEOUT if judged.timeout else RunEnd.FAILED
            return Outcome(end=end, diagnostic=judged.diagnostic, stop_reason=result.reason.value)
        if judged.unchanged:
            return Outcome(end=RunEnd.OK, unchanged=True, stop_reason=result.reason.value)
        patch = Path(result.patch_artifact or where / "missing.patch")
        message = commit_message(
            item,
            plan_id=self.plan_id,
            revision=attempt["revision"],
            run_id=run_id,
            dod="passed" if item_argvs(item) else "none",
        )
        commit = runner.build_commit(
            parent=attempt["parent"],
            patch=patch,
            message=message,
            identity=item_identity(self.source),
            ref=attempt_ref(attempt["id"]),
        )
        self.emit("commit_built", item=item_id, sha=commit.sha)
        crash_point(item_id, "committed")
        return Outcome(
            end=RunEnd.OK,
            commit=commit,
            out_of_scope=judged.out_of_scope,
            protected=judged.protected,
            stop_reason=result.reason.value,
        )


def item_timeout(item_timeout_s: float, plan_row: Any) -> tuple[float, bool]:
    """The item's timeout: its own, or what is left of the plan's budget when that is less
    (then True: a timeout of this item is the plan's time limit)."""
    deadline = plan_row["budget_deadline"]
    if deadline is None:
        return item_timeout_s, False
    left = deadline - time.time()
    if left >= item_timeout_s:
        return item_timeout_s, False
    return max(left, MIN_ITEM_TIMEOUT_S), True


def status_json(status: dict[str, Any]) -> str:
    return json.dumps(status, indent=2, sort_keys=True)

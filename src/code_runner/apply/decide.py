"""The decisions on a finished run: apply it (checked first, repaired if an earlier apply
died), check its DoD on the source's HEAD in a disposable checkout, or reject it."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import code_runner.apply.journal as journal
from code_runner import dirs, files, verify, workspace
from code_runner.apply.commit import GitIdentity
from code_runner.apply.dod_sandbox import DodSandbox, checkout_wrapper, decide_dod_sandbox
from code_runner.apply.journal import apply_lock
from code_runner.apply.patch_copy import is_blank, private_patch
from code_runner.apply.plan import ApplyRequest, Plan, prepare
from code_runner.apply.repair import Repair
from code_runner.apply.repair import repair as repair_journal
from code_runner.apply.step import ApplyOutcome, apply_patch
from code_runner.clock import utc_now
from code_runner.errors import ApplyRefused, PreflightError, UsageError
from code_runner.events import EventKind
from code_runner.record import RunRecord
from code_runner.record.finished import FinishedRun
from code_runner.repo import git, snapshot
from code_runner.sandbox import DEFAULT_LIMITS, ResourceLimits, SandboxMode
from code_runner.workspace.env import command_env
from code_runner.workspace.python_env import from_section


def _must_be_appliable(run: FinishedRun) -> None:
    if run.result.decision == "rejected":
        raise UsageError(
            f"run {run.run_id} was rejected; a rejected run is never applied.",
            fix="re-run the task if you want its change after all.",
        )
    if run.result.applied_in_source:
        commit = run.result.source_commit
        raise UsageError(
            f"run {run.run_id} is already applied to the source"
            + (f" (commit {commit})." if commit else " (left in the working tree)."),
            fix="nothing to do; `git revert` or `git restore` it in the source to undo.",
        )
    if is_blank(run.paths.patch):
        raise UsageError(
            f"run {run.run_id} has an empty patch: there is nothing to apply.",
            fix="nothing to do; the run made no allowlisted change.",
        )
    if not run.result.dod_passed:
        raise UsageError(
            f"run {run.run_id} did not pass its DoD (status {run.result.status}); only "
            "a verified patch is applied.",
            fix="re-run the task until it passes.",
        )
    if not run.result.source_unchanged:
        raise UsageError(
            f"run {run.run_id} changed the source while it worked (a safety failure); its "
            "patch is not trusted.",
            fix="inspect the source and the run's events.jsonl, then re-run the task.",
        )


@contextlib.contextmanager
def dod_env(run: FinishedRun) -> Iterator[dict[str, str]]:
    """The same DoD environment a run gives (private HOME and TMPDIR), for the source DoD."""
    root = dirs.state_dir() / "apply-env" / f"{run.run_id}-{secrets.token_hex(3)}"
    home_dir, tmp_dir = root / "home", root / "tmp"
    home_dir.mkdir(parents=True)
    tmp_dir.mkdir()
    try:
        env = command_env(run_id=run.run_id, home_dir=home_dir, tmp_dir=tmp_dir)
        yield from_section(run.cwd, run.env).overlay(env)
    finally:
        files.force_rmtree(root)


@contextlib.contextmanager
def verified_patch(run: FinishedRun) -> Iterator[Path]:
    """The run's patch, copied privately and checked against its sealed digest on the way:
    what git is given, never the record's own file."""
    chunks = files.read_chunks(run.paths.patch)
    with private_patch(chunks, sha256=run.patch_sha256, name=run.run_id) as path:
        yield path


def _source(run: FinishedRun) -> git.Repo:
    """The run's source repo; `ApplyRefused` naming the fix when it is gone or moved (the
    record's `cwd` cannot be edited, so "set cwd in the spec" would not help)."""
    try:
        return git.open_source(run.cwd)
    except PreflightError as exc:
        raise ApplyRefused(
            f"the run's source repo {run.cwd} cannot be used: {exc.message}",
            fix=f"restore the repository at {run.cwd}, or apply the patch by hand in another "
            f"checkout: git apply {run.paths.patch}",
        ) from None


def request(run: FinishedRun, patch: Path, **options: Any) -> ApplyRequest:
    source = _source(run)
    return ApplyRequest(
        source=source,
        run_id=run.run_id,
        task_id=run.task_id,
        title=run.title,
        base=run.base,
        patch=patch,
        allowlist=run.allowlist,
        dod=run.dod,
        env=options.pop("env", {}),
        record=run.paths,
        rollback=run.rollback,
        **options,
    )


def open_journal(run: FinishedRun) -> journal.Journal | None:
    path = run.paths.apply_journal
    if not path.exists():
        return None
    found = journal.Journal.load(path)
    return found if found.is_open else None


def plan(run: FinishedRun, *, commit: bool, author: GitIdentity | None) -> Plan:
    """What `apply` would do, checked against the source now. Changes nothing."""
    _must_be_appliable(run)
    if open_journal(run) is not None:
        raise ApplyRefused(
            f"an earlier apply of run {run.run_id} was interrupted and left a journal "
            f"({run.paths.apply_journal}).",
            fix=f"run `code-runner apply {run.paths.output_dir}` (or `code-runner gc`) to "
            "repair it first.",
        )
    with verified_patch(run) as patch:
        req = request(run, patch, commit=commit, author=author)
        with apply_lock(req.source.git_dir):
            return prepare(req, snapshot.take(req.source))


def dod_sandbox(run: FinishedRun, *, unsandboxed: bool = False) -> DodSandbox:
    """Where the apply DoD of `run` runs: the sandbox mode and limits the run had."""
    posture = run.result.sandbox or {}
    try:
        mode = SandboxMode(str(posture.get("mode", "auto")))
    except ValueError:
        mode = SandboxMode.AUTO
    limits = DEFAULT_LIMITS
    with contextlib.suppress(OSError, ValueError, TypeError, ValidationError, AttributeError):
        request_ = json.loads(run.paths.request.read_text())
        limits = ResourceLimits.model_validate(request_["spec"]["limits"])
    cpu_s = limits.cpu_s or max(1, round(run.dod.timeout_s + 0.5))
    return decide_dod_sandbox(mode, unsandboxed=unsandboxed, limits=limits, cpu_s=cpu_s)


def check_dod(run: FinishedRun, plan_: Plan, *, unsandboxed: bool = False) -> verify.Verdict:
    """Run the DoD on HEAD + patch in a disposable checkout: would it pass? (`--check`).

    Sandboxed like a run's DoD (the checkout is handed to the sandbox's uid)."""
    walls = dod_sandbox(run, unsandboxed=unsandboxed)
    source = _source(run)
    name = f"{run.run_id[:60]}-check-{secrets.token_hex(3)}"
    ws = workspace.create(source, plan_.head, run_id=name, project=from_section(run.cwd, run.env))
    try:
        with verified_patch(run) as patch:
            ws.repo.run("apply", "--binary", "--index", "--", str(patch))
        ws.materialize()
        with checkout_wrapper(walls, ws, ws.env(), name) as wrap:
            if wrap is not None:
                return verify.run_dod(run.dod, cwd=ws.work_tree, env=ws.env(), wrap_argv=wrap)
            ws.empty_scratch()
            with ws.unsandboxed_dependencies():
                return verify.run_dod(run.dod, cwd=ws.work_tree, env=ws.env())
    finally:
        ws.release()


def repair_first(run: FinishedRun, record: RunRecord) -> Repair | None:
    """An earlier apply of this run that died half-way: repair it before anything else."""
    found = open_journal(run)
    if found is None:
        return None
    if found.owner_alive():
        raise ApplyRefused(
            f"another apply of run {run.run_id} is running (pid {found.pid}).",
            fix="wait for it to finish.",
        )
    with apply_lock(Path(found.git_dir)):
        return repair_journal(run.paths.apply_journal, sink=record)


def apply_run(
    run: FinishedRun,
    *,
    commit: bool,
    author: GitIdentity | None,
    run_hooks: bool,
    record: RunRecord,
    unsandboxed: bool = False,
) -> ApplyOutcome:
    """Land a finished run's patch in the source; record the outcome in result.json.

    The source DoD runs in the OS sandbox (`dod_sandbox`); without a working one, only with
    `unsandboxed` (and a run whose mode was `auto`), or when the run's mode was `off`."""
    _must_be_appliable(run)
    walls = dod_sandbox(run, unsandboxed=unsandboxed)
    with dod_env(run) as env, verified_patch(run) as patch:
        options = {"run_hooks": run_hooks, "env": env, "sandbox": walls}
        outcome = apply_patch(request(run, patch, commit=commit, author=author, **options), record)
    decided = {"decision": "applied"} if outcome.ok else {}
    record.write_result(
        run.result.updated(
            **outcome.result_fields(),
            apply_to_source=True,
            applied_by="code-runner apply",
            applied_at=utc_now(),
            **decided,
        )
    )
    return outcome


def reject(run: FinishedRun, reason: str | None, record: RunRecord) -> bool:
    """Mark the run rejected. False when it already was."""
    if run.result.decision == "rejected":
        return False
    if open_journal(run) is not None:
        raise ApplyRefused(
            f"an apply of run {run.run_id} was interrupted and its source may be half-applied.",
            fix="run `code-runner gc` to repair the source first, then reject.",
        )
    if run.result.applied_in_source:
        raise UsageError(
            f"run {run.run_id} is already applied to the source; rejecting it now would not "
            "take it out.",
            fix="undo it in the source (`git revert` the commit or `git restore` the paths).",
        )
    record.write_result(
        run.result.updated(decision="rejected", decided_at=utc_now(), decision_reason=reason)
    )
    record.emit(EventKind.RUN_REJECTED, reason=reason)
    return True


__all__ = [
    "apply_run",
    "check_dod",
    "dod_env",
    "dod_sandbox",
    "open_journal",
    "plan",
    "reject",
    "repair_first",
    "request",
    "verified_patch",
]

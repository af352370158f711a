"""`code-runner apply` and `code-runner reject`: a person's decision on a finished run.

`apply` shows what will change, then lands the patch in the source, runs the DoD there, and
commits (`--commit`) or rolls back; `--check` only says whether it would apply and pass.
Exit codes: 0 applied and passed (or, with --check, would), 1 the DoD failed in the source
(rolled back unless the spec said not to), 2 bad input or a decision already made,
3 the source is not in a state to take the patch (nothing changed), 4 the source changed
in a way the apply step did not make, 5 the record is incomplete or its patch was altered,
130 interrupted (rolled back).
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

import code_runner.cli.render as render
from code_runner import apply, proc, verify
from code_runner.apply import decide
from code_runner.errors import ApplyRefused, Interrupted, SafetyViolation
from code_runner.record import RunRecord, finished

_KIND_MARK = {"added": "A", "deleted": "D", "modified": "M", "mode_changed": "T"}

run_dir_argument = click.argument(
    "run_dir", metavar="RUN_DIR", type=click.Path(path_type=Path, exists=False)
)


def _interrupted(signal_name: str) -> Interrupted:
    """SIGINT/SIGTERM during an apply: the transaction rolls back (a repeat is ignored)."""
    return Interrupted(f"received {signal_name}")


def _show_plan(
    out: Console, run: finished.FinishedRun, plan: apply.Plan, *, commit: bool, hooks: bool
) -> None:
    where = plan.branch.removeprefix("refs/heads/") if plan.branch else "detached HEAD"
    out.print(f"run {run.run_id} ({escape(run.title)}): DoD passed in a disposable checkout")
    out.print(f"source: {run.cwd} ({where} at {plan.head[:12]})")
    if plan.head_moved:
        out.print(
            f"[yellow]HEAD moved since the run[/] (base {plan.base[:12]}); the patch applies "
            "cleanly on the new HEAD and will be verified there"
        )
    out.print(f"will change {len(plan.changes)} file(s):")
    for change in plan.changes:
        out.print(f"  {_KIND_MARK[change.kind]} {escape(change.path)}")
    if plan.stat.strip():
        out.print(escape(plan.stat.rstrip()), highlight=False)
    out.print(f"then: run the DoD in the source: {escape(run.dod.command)!r}")
    if commit:
        title = apply.commit_title(run.title, run.task_id)
        hook_note = "the source's hooks run" if hooks else "no hooks run"
        out.print(f"then: commit as {plan.identity}: {escape(title)!r} ({hook_note})")
    else:
        out.print("then: no commit (the change stays in the working tree)")
    fallback = "roll back the changed paths" if run.rollback else "leave the change in place"
    out.print(f"if the DoD fails there: {fallback}")


@click.command("apply")
@run_dir_argument
@click.option("--commit", is_flag=True, help="Commit the patch's paths when the DoD passes.")
@click.option(
    "--check", is_flag=True, help="Only say whether it would apply and pass; change nothing."
)
@click.option("--author", metavar='"NAME <EMAIL>"', help="Commit identity (default: git config).")
@click.option("--run-hooks", is_flag=True, help="Let the source repo's git hooks run on commit.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option(
    "--unsandboxed",
    is_flag=True,
    help="Run the DoD without the OS sandbox when it does not work here (sandbox: auto).",
)
def apply_command(
    run_dir: Path,
    commit: bool,
    check: bool,
    author: str | None,
    run_hooks: bool,
    as_json: bool,
    unsandboxed: bool,
) -> int:
    """Apply a finished run's verified patch to its source repo.

    Shows what will change, applies the patch (binary-safe, modes included), runs the
    run's DoD in the source, then commits only the patch's paths (--commit) or leaves
    the change in the working tree. If the DoD fails there, exactly those paths are put
    back. Refuses, changing nothing, when uncommitted source changes overlap the
    allowlist, when HEAD moved and the patch does not apply on it, or (with --commit)
    when anything else is staged.

    The DoD runs in the OS sandbox, as in the run (the repo bound read-write at its own
    path, no file changing owner). Without a working sandbox it runs only with
    --unsandboxed, or when the run's spec said `sandbox: off`.
    """
    out = render.console(stderr=as_json)
    if check:  # changes nothing: no lock, so it can run beside a decision
        return _check(out, finished.load(run_dir), commit, author, run_hooks, as_json, unsandboxed)
    # LockHeld (exit 3) while the run goes on, or another apply or reject decides on it
    with finished.locked(run_dir) as run:
        return _apply(out, run, run_dir, commit, author, run_hooks, as_json, unsandboxed)


def _check(
    out: Console,
    run: finished.FinishedRun,
    commit: bool,
    author: str | None,
    run_hooks: bool,
    as_json: bool,
    unsandboxed: bool,
) -> int:
    identity = apply.GitIdentity.parse(author) if author else None
    plan = decide.plan(run, commit=commit, author=identity)
    _show_plan(out, run, plan, commit=commit, hooks=run_hooks)
    out.print("checking the DoD on HEAD + patch in a disposable checkout …")
    verdict = decide.check_dod(run, plan, unsandboxed=unsandboxed)
    report = {"would_apply": True, "would_pass": verdict.passed, "plan": plan.to_dict()}
    if as_json:
        render.print_json(report | {"verdict": verdict.to_dict()})
    else:
        mark = "[green]would pass[/]" if verdict.passed else "[red]would fail[/]"
        out.print(f"applies cleanly; DoD {mark} — {escape(verdict.reason)}")
        _show_dod_output(out, verdict)
        out.print("nothing was changed.")
    return 0 if verdict.passed else 1


def _apply(
    out: Console,
    run: finished.FinishedRun,
    run_dir: Path,
    commit: bool,
    author: str | None,
    run_hooks: bool,
    as_json: bool,
    unsandboxed: bool,
) -> int:
    identity = apply.GitIdentity.parse(author) if author else None
    record = RunRecord.reopen(run.paths)
    repaired = decide.repair_first(run, record)
    if repaired is not None:
        out.print(f"[yellow]repaired an interrupted apply:[/] {repaired.action}")
        if repaired.action == "needs you":
            raise ApplyRefused(
                f"an interrupted apply could not be repaired: {repaired.detail}",
                fix=f"restore those paths by hand, then delete {repaired.journal}.",
            )
        run = finished.load(run_dir)
    plan = decide.plan(run, commit=commit, author=identity)
    _show_plan(out, run, plan, commit=commit, hooks=run_hooks)
    with proc.signals_as_interrupt(_interrupted):
        outcome = decide.apply_run(
            run,
            commit=commit,
            author=identity,
            run_hooks=run_hooks,
            record=record,
            unsandboxed=unsandboxed,
        )
    if as_json:
        render.print_json(outcome.result_fields())
    _report(out, outcome)
    if outcome.unexpected:
        raise SafetyViolation(
            "the source changed in ways the apply step did not make: "
            + "; ".join(outcome.unexpected),
            fix="inspect the source with `git status`; the run's events.jsonl lists each step.",
        )
    if outcome.interrupted:
        return 130
    if outcome.refused:
        raise ApplyRefused(outcome.error or "the apply was refused.")
    return 0 if outcome.ok else 1


_CHECK_TAIL_LINES = 20
_CHECK_TAIL_CHARS = 4000


def _show_dod_output(out: Console, verdict: verify.Verdict) -> None:
    """A failed DoD's own words: the tail of its stderr, else of its stdout."""
    if verdict.passed:
        return
    text = (verdict.stderr_tail.strip() or verdict.stdout_tail.strip())[-_CHECK_TAIL_CHARS:]
    if text:
        out.print("the DoD said:")
        for line in text.splitlines()[-_CHECK_TAIL_LINES:]:
            out.print(f"  {escape(line)}")


def _report(out: Console, outcome: apply.ApplyOutcome) -> None:
    if outcome.ok:
        what = f"committed {outcome.commit}" if outcome.commit else "left in the working tree"
        out.print(f"[green]applied[/]: DoD passed in the source; {what}")
    elif outcome.refused:
        return  # the error boundary prints the refusal with its fix
    else:
        state = "rolled back" if outcome.rolled_back else "left applied"
        out.print(f"[red]not applied[/] ({state}): {escape(outcome.error or '')}")
    if outcome.byproducts:
        out.print(f"moved files the DoD left in the source to the record: {outcome.byproducts}")


@click.command("reject")
@run_dir_argument
@click.option("--reason", help="Why (kept in result.json).")
def reject_command(run_dir: Path, reason: str | None) -> int:
    """Mark a finished run rejected in its record; it will never be applied."""
    with finished.locked(run_dir) as run:  # LockHeld (exit 3) while a run or an apply holds it
        changed = decide.reject(run, reason, RunRecord.reopen(run.paths))
    out = render.console()
    out.print(f"run {run.run_id} rejected" if changed else f"run {run.run_id} was already rejected")
    return 0

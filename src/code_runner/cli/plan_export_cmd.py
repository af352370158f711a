"""`plan export`: the plan's commits as a branch in the source, a patch series, or applied to
the source through the apply transaction; each export a crash-safe user action recorded in
the plan store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

import code_runner.cli.render as render
from code_runner.errors import UsageError
from code_runner.plans.store import PlanStore
from code_runner.plans.user_action import check_action_id


def _form(branch: str | None, patches: Path | None, apply: bool, commit: bool) -> str:
    chosen = [
        name for name, on in (("branch", branch), ("patches", patches), ("apply", apply)) if on
    ]
    if len(chosen) != 1:
        raise UsageError(
            "choose one export: --branch NAME, --patches DIR or --apply [--commit].",
            fix="run `code-runner plan export --help`.",
        )
    if commit and not apply:
        raise UsageError("--commit goes with --apply.", fix="add --apply, or drop --commit.")
    return chosen[0]


@click.command("export")
@click.argument("plan")
@click.option("--branch", default=None, help="Create or move this branch in the source.")
@click.option(
    "--patches",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Write a format-patch series, a `series` file and `combined.diff` into this new dir.",
)
@click.option("--apply", "apply", is_flag=True, help="Apply the commits to the source's work tree.")
@click.option("--commit", is_flag=True, help="With --apply: one commit per item, with trailers.")
@click.option(
    "--author",
    default=None,
    metavar='"NAME <EMAIL>"',
    help="With --apply --commit: who the commits are by (default: the source's identity).",
)
@click.option("--through", default=None, help="Export up to this item (default: all done).")
@click.option(
    "--action-id",
    default=None,
    metavar="UUID",
    help="Name this action (a UUID v4); the same id and command replays its outcome.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was exported as JSON.")
def export_command(
    plan: str,
    branch: str | None,
    patches: Path | None,
    apply: bool,
    commit: bool,
    author: str | None,
    through: str | None,
    action_id: str | None,
    as_json: bool,
) -> int:
    """Give PLAN's commits (base to the last done item, or --through Pn) to the user.

    --branch: a branch in the source by compare-and-swap (HEAD, the index and the work tree
    are untouched; a branch holding a commit the plan did not make is refused). --patches: a
    patch series; the source is not touched. --apply: the apply transaction, with each item's
    commands as the DoD in the source; --commit makes one commit per item and stops at the
    first failure, which is rolled back (the same export again continues after the items
    that landed). The same export against the same plan and target replays its outcome; a
    killed export is recovered by the next one (or `plan run`, `plan resume`, `gc`).
    Exit 0 when exported, 1 when an apply failed, 2 when refused, 3 when another export of
    PLAN (or, for --apply, its run) is under way."""
    kind = _form(branch, patches, apply, commit)
    from code_runner.apply.commit import GitIdentity
    from code_runner.plans.export import ExportRequest
    from code_runner.plans.export_run import run_export

    identity = GitIdentity.parse(author) if author else None
    check_action_id(action_id)
    with PlanStore.open() as store:
        plan_id = store.find_plan(plan)
        source_dir = str(store.plan(plan_id)["source_dir"])
    target = branch or (str(patches.resolve()) if patches else source_dir)
    req = ExportRequest(kind, target, through, commit, author)
    done, replayed = run_export(plan_id, req, action_id=action_id, author=identity)
    _print({**done, "replayed": replayed}, as_json)
    return int(done.get("exit_code", 0))


def _print(done: dict[str, Any], as_json: bool) -> None:
    if as_json:
        render.print_json(done)
        return
    note = " (replayed: this export already ran against this state)" if done["replayed"] else ""
    if done.get("refused") or done.get("error"):
        click.echo(f"refused: {done.get('refused') or done.get('error')}{note}", err=True)
        if done.get("fix"):
            click.echo(f"Fix: {done['fix']}", err=True)
        return
    items = ", ".join(done["items"])
    if done["kind"] == "branch":
        click.echo(f"branch {done['target']} -> {done['commit'][:12]} ({items}){note}")
    elif done["kind"] == "patches":
        click.echo(f"{len(done.get('files', []))} patches in {done['target']} ({items}){note}")
    else:
        for skipped in done.get("skipped", []):
            click.echo(f"{skipped}: already applied by an earlier export")
        for step in done.get("steps", []):
            what = step["commit"][:12] if step["commit"] else "applied, not committed"
            if not step["ok"]:
                what = f"FAILED{' (rolled back)' if step['rolled_back'] else ''}: {step['error']}"
            click.echo(f"{step['step']}: {what}{note}", err=not step["ok"])

"""`plan export`: the plan's commits as a branch in the source, a patch series, or applied to
the source through the apply transaction; each export recorded in the plan store."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import code_runner.cli.render as render
from code_runner.errors import UsageError
from code_runner.plans.database import StoreBase
from code_runner.plans.export import (
    Link,
    begin_export,
    chain,
    check_patch_dir,
    finish_export,
    write_export_record,
    write_patches,
)
from code_runner.plans.lock import plan_lock
from code_runner.plans.report import record_dir
from code_runner.plans.runner_repo import RunnerRepo, runner_repo
from code_runner.plans.store import PlanStore
from code_runner.repo import git

if TYPE_CHECKING:
    from code_runner.apply import GitIdentity


def _find_plan(store: StoreBase, plan: str) -> str:
    ids = [str(row["plan_id"]) for row in store.plans()]
    matches = [i for i in ids if i == plan] or [i for i in ids if i.startswith(plan)]
    if len(matches) == 1:
        return matches[0]
    raise UsageError(
        f"no plan {plan!r} in the store" + (" (ambiguous)" if matches else "") + ".",
        fix="`code-runner plan list` shows the plans and their ids.",
    )


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
@click.option("--json", "as_json", is_flag=True, help="Print what was exported as JSON.")
def export_command(
    plan: str,
    branch: str | None,
    patches: Path | None,
    apply: bool,
    commit: bool,
    author: str | None,
    through: str | None,
    as_json: bool,
) -> int:
    """Give PLAN's commits (base to the last done item, or --through Pn) to the user.

    --branch: a branch in the source by compare-and-swap (HEAD, the index and the work tree
    are untouched; a branch holding a commit the plan did not make is refused). --patches: a
    patch series; the source is not touched. --apply: the apply transaction, with each item's
    commands as the DoD in the source; --commit makes one commit per item and stops at the
    first failure, which is rolled back. Exit 0 when exported, 1 when an apply failed, 2 when
    refused."""
    kind = _form(branch, patches, apply, commit)
    from code_runner.apply.commit import GitIdentity

    identity = GitIdentity.parse(author) if author else None
    with PlanStore.open() as store:
        plan_id = _find_plan(store, plan)
        links = chain(store, plan_id, through)
        row = store.plan(plan_id)
        source = git.open_source(Path(row["source_dir"]))
        runner = runner_repo(plan_id)
        if patches is not None:
            check_patch_dir(patches)
        target = branch or (str(patches.resolve()) if patches else str(source.work_tree))
        export_id = begin_export(
            store, plan_id, kind=kind, target=target, links=links, through=through
        )
        done: dict[str, Any] = {
            "plan_id": plan_id,
            "export": export_id,
            "kind": kind,
            "target": target,
            "commit": links[-1].sha,
            "items": [link.item for link in links],
        }
        ok = False
        try:
            if kind == "branch":
                assert branch is not None
                done["branch"], done["old"] = branch, _branch(runner, source, branch, links, store)
                ok = True
            elif kind == "patches":
                assert patches is not None
                done["files"] = write_patches(runner, links, patches)
                ok = True
            else:
                done["steps"] = _apply(
                    store, plan_id, runner, source, links, (commit, identity), export_id
                )
                ok = all(step["ok"] for step in done["steps"])
        except BaseException as exc:
            done["error"] = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            finish_export(store, export_id, ok=ok, detail=done)
            write_export_record(record_dir(plan_id, row["settings"]), export_id, done)
    _print(done, as_json)
    return 0 if ok else 1


def _branch(
    runner: RunnerRepo, source: git.Repo, branch: str, links: list[Link], store: StoreBase
) -> str | None:
    row = store.plan(runner.plan_id)
    return runner.export_branch(
        source,
        branch=branch,
        sha=links[-1].sha,
        ref=links[-1].ref,
        owned={r["sha"] for r in store.ledger(runner.plan_id)},
        base=row["base"],
    )


def _apply(
    store: StoreBase,
    plan_id: str,
    runner: RunnerRepo,
    source: git.Repo,
    links: list[Link],
    committing: tuple[bool, GitIdentity | None],
    export_id: int,
) -> list[dict[str, Any]]:
    from code_runner.plans.export_apply import apply_steps, steps

    commit, author = committing
    revisions = {link.revision: store.revision(plan_id, link.revision) for link in links}
    out = record_dir(plan_id, store.plan(plan_id)["settings"]) / "exports" / str(export_id)
    with plan_lock(plan_id):  # no run of the plan while its commits land in the source
        results = apply_steps(
            runner,
            source,
            steps(runner, revisions, links, commit),
            record_dir=out,
            run_prefix=f"{plan_id[:60]}-export-{export_id}",
            commit=commit,
            author=author,
        )
    return [r.to_dict() for r in results]


def _print(done: dict[str, Any], as_json: bool) -> None:
    if as_json:
        render.print_json(done)
        return
    items = ", ".join(done["items"])
    if done["kind"] == "branch":
        click.echo(f"branch {done['branch']} -> {done['commit'][:12]} ({items})")
    elif done["kind"] == "patches":
        click.echo(f"{len(done['files'])} patches in {done['target']} ({items})")
    else:
        for step in done["steps"]:
            what = step["commit"][:12] if step["commit"] else "applied, not committed"
            if not step["ok"]:
                what = f"FAILED{' (rolled back)' if step['rolled_back'] else ''}: {step['error']}"
            click.echo(f"{step['step']}: {what}", err=not step["ok"])

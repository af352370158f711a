"""`plan export` from end to end, as one crash-safe user action.

Under the plan's export lock (and, for `--apply`, its run lock: no run while commits land
in the source), recovery settles whatever a dead export left; then the user action begins
(the chain chosen, the row `exporting`; the same command against the same state, the
target's included, replays the saved outcome instead), the work is done (a branch by
compare-and-swap, a patch series renamed into place whole, or the apply transaction item by
item), and one transaction finishes the row and saves the outcome. A `--apply --commit`
that an earlier export left part way (a failure or a crash after some items landed)
continues after the items it landed, while the source's HEAD is still the last of them.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from code_runner.errors import CodeRunnerError, UsageError
from code_runner.plans.export import (
    ExportRequest,
    Link,
    begin_export,
    exports,
    finish_export,
    keep_action_id,
    links_to,
    target_state,
    write_export_record,
    write_patches,
)
from code_runner.plans.lock import crash_point, export_lock, plan_lock
from code_runner.plans.recovery import recover_exports
from code_runner.plans.report import emit, record_dir, write_views
from code_runner.plans.runner_repo import RunnerRepo, runner_repo
from code_runner.plans.store import PlanStore
from code_runner.plans.user_action import UNFINISHED, drop_action, run_action
from code_runner.repo import git
from code_runner.task import output_dir_problems

if TYPE_CHECKING:
    from code_runner.apply import GitIdentity


def run_export(
    plan_id: str,
    req: ExportRequest,
    *,
    action_id: str | None = None,
    author: GitIdentity | None = None,
) -> tuple[dict[str, Any], bool]:
    """(the export's outcome, replayed). Exit 3 when another export (or, for --apply, a
    run) of the plan holds its lock; nothing is written then."""
    running = plan_lock(plan_id) if req.kind == "apply" else contextlib.nullcontext()
    with export_lock(plan_id), running, PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        recover_exports(store, plan_id, locked=True)
        return _export(store, plan_id, req, action_id, author)


def _export(
    store: PlanStore,
    plan_id: str,
    req: ExportRequest,
    action_id: str | None,
    author: GitIdentity | None,
) -> tuple[dict[str, Any], bool]:
    row = store.plan(plan_id)
    source = git.open_source(Path(row["source_dir"]))
    out = record_dir(plan_id, row["settings"])
    if req.kind == "patches":
        for problem in output_dir_problems(Path(req.target), source):
            raise UsageError(
                problem.replace("output_dir: ", "--patches ", 1).split("; ")[0] + ".",
                fix="choose a --patches directory outside the source repo (it is only read).",
            )
    result = run_action(
        store, plan_id, "export", req.to_dict(), begin_export(store, req, []),
        action_id=action_id, target=target_state(req, source), saved_hook=keep_action_id,
    )  # fmt: skip
    if result.replayed or result.refused:
        return result.response, result.replayed
    done = {k: v for k, v in result.response.items() if k != UNFINISHED}
    export_id = int(done["export"])
    emit(out, "export_started", plan=plan_id, export=export_id, form=req.kind, items=done["items"])
    crash_point(done["items"][-1], "export-begun")
    try:
        links = links_to(store, plan_id, done["commit"])
        _work(store, plan_id, req, (links, source, author), export_id, done)
    except CodeRunnerError as exc:
        done.update(error=exc.message, fix=exc.fix, exit_code=exc.exit_code)
    except BaseException as exc:  # a bug or a stop: recorded, and the command may run again
        done.update(error=f"{type(exc).__name__}: {exc}", exit_code=70)
        finish_export(store, export_id, state="failed", detail=done, key=None)
        with store.write() as db:
            drop_action(db, plan_id, result.key)
        raise
    done["target_after"] = target_state(req, source)
    state = "done" if done["exit_code"] == 0 else "failed"
    finish_export(store, export_id, state=state, detail=done, key=result.key)
    write_export_record(out, export_id, done)
    write_views(store, plan_id, out)
    emit(out, "export_finished", plan=plan_id, export=export_id, state=state)
    return done, False


def _work(
    store: PlanStore,
    plan_id: str,
    req: ExportRequest,
    what: tuple[list[Link], git.Repo, GitIdentity | None],
    export_id: int,
    done: dict[str, Any],
) -> None:
    links, source, author = what
    runner = runner_repo(plan_id)
    if req.kind == "branch":
        done["branch"], done["old"] = req.target, _branch(store, runner, source, req, links)
        crash_point(links[-1].item, "export-moved")
    elif req.kind == "patches":
        done["files"] = write_patches(runner, links, Path(req.target), export_id)
    else:
        skip = _landed_before(store, plan_id, req, links, source)
        done["skipped"] = skip
        done["steps"] = _apply(store, plan_id, runner, source, links, skip, req, author, export_id)
        done["landed"] = [
            {"step": s["step"], "commit": s["commit"]} for s in done["steps"] if s["ok"]
        ]
        done["exit_code"] = 0 if all(step["ok"] for step in done["steps"]) else 1


def _branch(
    store: PlanStore, runner: RunnerRepo, source: git.Repo, req: ExportRequest, links: list[Link]
) -> str | None:
    return runner.export_branch(
        source,
        branch=req.target,
        sha=links[-1].sha,
        ref=links[-1].ref,
        owned={r["sha"] for r in store.ledger(runner.plan_id)},
        base=store.plan(runner.plan_id)["base"],
    )


def _landed_before(
    store: PlanStore, plan_id: str, req: ExportRequest, links: list[Link], source: git.Repo
) -> list[str]:
    """The items the last `--apply --commit` export landed before it failed or died, when
    they begin this chain and the source's HEAD is still the last of them."""
    if not req.commit:
        return []
    earlier = [
        r for r in exports(store, plan_id) if r["kind"] == "apply" and r["state"] != "exporting"
    ]
    if earlier and earlier[-1]["state"] == "done":
        return []
    if not earlier:
        return []
    landed = json.loads(earlier[-1]["detail"] or "{}").get("landed") or []
    names = [entry["step"] for entry in landed]
    head = source.run("rev-parse", "--verify", "--quiet", "HEAD", check=False).stdout.decode()
    prefix = [link.item for link in links[: len(names)]]
    if not names or names != prefix or landed[-1].get("commit") != head.strip():
        return []
    return names


def _apply(
    store: PlanStore,
    plan_id: str,
    runner: RunnerRepo,
    source: git.Repo,
    links: list[Link],
    skip: list[str],
    req: ExportRequest,
    author: GitIdentity | None,
    export_id: int,
) -> list[dict[str, Any]]:
    from code_runner.plans.export_apply import apply_steps, steps

    revisions = {link.revision: store.revision(plan_id, link.revision) for link in links}
    out = record_dir(plan_id, store.plan(plan_id)["settings"]) / "exports" / str(export_id)
    results = apply_steps(
        runner,
        source,
        steps(runner, revisions, links, req.commit, skip),
        record_dir=out,
        run_prefix=f"{plan_id[:60]}-export-{export_id}",
        commit=req.commit,
        author=author,
    )
    return [r.to_dict() for r in results]

"""`plan export`: the chain of a plan's commits chosen, each export recorded in the store, and
the patch series (`--patches`).

The chain runs from the plan's base to its head (or to the commit of `--through Pn`), read
from the store's ledger; a chain holding the commit of an item whose checkpoint is still
open is refused, and `--through` can export the clean prefix before it. Every export is a
user action (`code_runner.plans.user_action`) and a row of the `exports` table, begun in
one transaction (`exporting`) and finished in another (`done` or `failed`) that also saves
the action's outcome; a process that dies between them leaves the row `exporting` for
recovery (`code_runner.plans.recovery`). A patch series is written beside its target and
renamed into place whole, so a killed export never leaves half a series.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from code_runner import files
from code_runner.clock import utc_now
from code_runner.errors import UsageError
from code_runner.plans.database import PlanRefused, StoreBase
from code_runner.plans.lock import crash_point
from code_runner.plans.runner_repo import RunnerRepo
from code_runner.plans.user_action import UNFINISHED, Apply, finish_action
from code_runner.repo import git

_ITEM = re.compile(r"^[Pp]([1-9][0-9]{0,2})$")


@dataclass(frozen=True)
class Link:
    """One runner commit on the chain: its item, itself and its parent."""

    item: str
    sha: str
    parent: str
    ref: str
    revision: int


def item_number(text: str) -> int:
    found = _ITEM.match(text)
    if found is None:
        raise UsageError(f"--through {text!r} is not an item id.", fix="name an item: P1, P2, ...")
    return int(found.group(1))


def links_to(store: StoreBase, plan_id: str, head: str) -> list[Link]:
    """The ledger's commits from the plan's base to `head`, oldest first."""
    base = store.plan(plan_id)["base"]
    by_sha = {r["sha"]: r for r in store.ledger(plan_id)}
    links: list[Link] = []
    sha = head
    while sha != base and sha in by_sha:
        found = by_sha[sha]
        links.append(Link(found["item"], sha, found["parent"], found["ref"], found["revision"]))
        sha = found["parent"]
    links.reverse()
    return links


def chain(store: StoreBase, plan_id: str, through: str | None = None) -> list[Link]:
    """The commits to export, oldest first; refused when there is none, when `through` is not
    done yet, or when an open checkpoint's commit is on it."""
    row = store.plan(plan_id)
    links = links_to(store, plan_id, row["head"])
    if through is not None:
        last = item_number(through)
        _must_be_done(store, plan_id, through, last)
        links = [link for link in links if int(link.item[1:]) <= last]
    open_commits = {c["head"]: c for c in store.checkpoints(plan_id, open_only=True)}
    for index, link in enumerate(links):
        if link.sha in open_commits:
            before = f"--through {links[index - 1].item}" if index else "nothing before it"
            raise UsageError(
                f"{link.item}'s commit waits at an open {open_commits[link.sha]['kind']}"
                f" checkpoint (plan status {row['status']}), so it is not exported.",
                fix=f"settle it first (`code-runner plan status {plan_id}` says how), or export"
                f" the clean part: {before}.",
            )
    if not links:
        raise UsageError(
            f"plan {plan_id} has no commits to export"
            + (f" through {through}." if through else " yet."),
            fix="run it first (`code-runner plan run PLAN_FILE`), or name a later item.",
        )
    return links


def _must_be_done(store: StoreBase, plan_id: str, through: str, last: int) -> None:
    plan = store.revision(plan_id)
    if last > len(plan.items) or plan.items[last - 1].id != f"P{last}":
        raise UsageError(f"plan {plan_id} has no item {through}.", fix="see `plan status`.")
    pending = store.next_item(plan_id)
    if pending is not None and int(pending[1:]) <= last:
        raise UsageError(
            f"{pending} is not done yet, so the plan cannot be exported through {through}.",
            fix=f"run the plan further, or export --through an item before {pending}.",
        )


# --- the exports table ----------------------------------------------------------------------


@dataclass(frozen=True)
class ExportRequest:
    """One `plan export` command: its form, its target, and how far."""

    kind: str  # branch, patches or apply
    target: str  # the branch name, the patch directory, or the source's work tree
    through: str | None = None
    commit: bool = False  # --apply --commit
    author: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def target_state(req: ExportRequest, source: git.Repo) -> str:
    """What the export's target holds now: part of "the same state" of its user action."""
    if req.kind == "branch":
        found = source.run("rev-parse", "--verify", "--quiet", f"refs/heads/{req.target}",
                           check=False)  # fmt: skip
        return f"branch:{found.stdout.decode().strip() if found.ok else ''}"
    if req.kind == "patches":
        where = Path(req.target)
        names = sorted(os.listdir(where)) if where.is_dir() else None
        return f"patches:{_digest(json.dumps(names))}"
    head = source.run("rev-parse", "--verify", "--quiet", "HEAD", check=False).stdout.decode()
    status = source.run(
        "status", "--porcelain=v1", "-z", "--untracked-files=all", check=False,
        env={"GIT_OPTIONAL_LOCKS": "0"},
    ).stdout  # fmt: skip
    return f"apply:{head.strip()}:{_digest(status)}"


def _digest(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:32]


def begin_export(store: StoreBase, req: ExportRequest, steps: list[str]) -> Apply:
    """The user action's first transaction: the chain chosen (a refusal is the action's
    outcome) and the export's row, `exporting`, saved with an unfinished outcome."""

    def apply(db: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
        plan_id = row["plan_id"]
        try:
            links = chain(store, plan_id, req.through)
            if req.kind == "patches":
                check_patch_dir(Path(req.target))
        except PlanRefused:
            raise
        except UsageError as exc:
            raise PlanRefused(exc.message, fix=exc.fix) from None
        names = [link.item for link in links]
        detail = {"items": names, "step_names": steps or _step_names(names, req.commit)}
        cursor = db.execute(
            "INSERT INTO exports (plan_id, kind, target, head, through_item, state, detail,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'exporting', ?, ?, ?)",
            (plan_id, req.kind, req.target, links[-1].sha, req.through, files.dumps(detail),
             utc_now(), utc_now()),
        )  # fmt: skip
        return {
            UNFINISHED: True,
            "plan_id": plan_id,
            "export": cursor.lastrowid,
            "kind": req.kind,
            "target": req.target,
            "commit": links[-1].sha,
            "items": names,
        }

    return apply


def _step_names(items: list[str], commit: bool) -> list[str]:
    """The apply steps of an export: one per item with --commit, else one for them all."""
    if commit or len(items) == 1:
        return items
    return [f"{items[0]}-{items[-1]}"]


def keep_action_id(db: sqlite3.Connection, key: str, response: dict[str, Any]) -> None:
    if "export" in response:
        db.execute("UPDATE exports SET action_id = ? WHERE id = ?", (key, response["export"]))


def finish_export(
    store: StoreBase, export_id: int, *, state: str, detail: dict[str, Any], key: str | None
) -> None:
    """The export's row and its action's outcome, in one transaction."""
    with store.write() as db:
        row = db.execute("SELECT * FROM exports WHERE id = ?", (export_id,)).fetchone()
        db.execute(
            "UPDATE exports SET state = ?, detail = ?, updated_at = ? WHERE id = ?",
            (state, files.dumps(detail), utc_now(), export_id),
        )
        if key is not None:
            finish_action(db, row["plan_id"], key, detail)


def exports(store: StoreBase, plan_id: str) -> list[sqlite3.Row]:
    return list(store.db.execute("SELECT * FROM exports WHERE plan_id = ? ORDER BY id", (plan_id,)))


def write_export_record(out: Path, export_id: int, data: dict[str, Any]) -> Path:
    path = out / "exports" / f"{export_id}.json"
    files.atomic_write_json(path, data)
    return path


# --- --patches DIR --------------------------------------------------------------------------


def check_patch_dir(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(
            f"{target} exists and is not an empty directory.",
            fix="name a new directory for --patches (nothing is overwritten).",
        )


def partial_dir(target: Path, export_id: int) -> Path:
    """Where a patch series is written before it is renamed into place."""
    return target.parent / f".{target.name}.export-{export_id}.partial"


def write_patches(runner: RunnerRepo, links: list[Link], target: Path, export_id: int) -> list[str]:
    """One `format-patch` file per commit (trailers included), `series` naming them in order,
    and `combined.diff` (base to the last commit), written beside `target` and renamed into
    place whole. Writes nothing into the source."""
    check_patch_dir(target)
    work = partial_dir(target, export_id)
    files.force_rmtree(work)
    work.mkdir(parents=True)
    span = f"{links[0].parent}..{links[-1].sha}"
    made = runner.repo.out(
        "format-patch", "--no-signature", "--full-index", "--binary", "--no-renames",
        "--output-directory", str(work.resolve()), span,
    ).splitlines()  # fmt: skip
    names = [Path(line).name for line in made if line]
    files.atomic_write_text(work / "series", "".join(f"{name}\n" for name in names))
    with (work / "combined.diff").open("wb") as out:
        runner.repo.run(
            "diff", "--binary", "--full-index", "--no-renames", links[0].parent, links[-1].sha,
            stdout_file=out,
        )  # fmt: skip
    crash_point(links[-1].item, "export-written")
    os.rename(work, target)  # onto nothing, or onto an empty directory: whole or not at all
    return names


def changed_paths(repo: git.Repo, parent: str, sha: str) -> list[str]:
    fields = repo.z("diff", "--name-only", "-z", "--no-renames", parent, sha)
    return [git.decode_path(path) for path in fields]


def patch_between(repo: git.Repo, parent: str, sha: str, out: IO[bytes]) -> None:
    """The binary diff from `parent` to `sha`, written by git into `out` (never held whole)."""
    repo.run(
        "diff", "--binary", "--full-index", "--no-renames", parent, sha, stdout_file=out
    )  # fmt: skip

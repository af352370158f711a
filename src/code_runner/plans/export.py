"""`plan export`: the chain of a plan's commits chosen, each export recorded in the store, and
the patch series (`--patches`).

The chain runs from the plan's base to its head (or to the commit of `--through Pn`), read
from the store's ledger; a chain holding the commit of an item whose checkpoint is still
open is refused, and `--through` can export the clean prefix before it. Every export is a
row of the `exports` table (`exporting`, then `done` or `failed`) and a file
`exports/<id>.json` in the plan's record.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_runner import files
from code_runner.clock import utc_now
from code_runner.errors import UsageError
from code_runner.plans.database import StoreBase
from code_runner.plans.runner_repo import RunnerRepo
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


def chain(store: StoreBase, plan_id: str, through: str | None = None) -> list[Link]:
    """The commits to export, oldest first; refused when there is none, when `through` is not
    done yet, or when an open checkpoint's commit is on it."""
    row = store.plan(plan_id)
    by_sha = {r["sha"]: r for r in store.ledger(plan_id)}
    links: list[Link] = []
    sha = row["head"]
    while sha != row["base"] and sha in by_sha:
        found = by_sha[sha]
        links.append(Link(found["item"], sha, found["parent"], found["ref"], found["revision"]))
        sha = found["parent"]
    links.reverse()
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


def begin_export(
    store: StoreBase,
    plan_id: str,
    *,
    kind: str,
    target: str,
    links: list[Link],
    through: str | None,
) -> int:
    with store.write() as db:
        cursor = db.execute(
            "INSERT INTO exports (plan_id, kind, target, head, through_item, state, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, 'exporting', ?, ?)",
            (plan_id, kind, target, links[-1].sha, through, utc_now(), utc_now()),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid


def finish_export(store: StoreBase, export_id: int, *, ok: bool, detail: dict[str, Any]) -> None:
    with store.write() as db:
        db.execute(
            "UPDATE exports SET state = ?, detail = ?, updated_at = ? WHERE id = ?",
            ("done" if ok else "failed", files.dumps(detail), utc_now(), export_id),
        )


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


def write_patches(runner: RunnerRepo, links: list[Link], target: Path) -> list[str]:
    """One `format-patch` file per commit (trailers included), `series` naming them in order,
    and `combined.diff` (base to the last commit). Writes nothing into the source."""
    check_patch_dir(target)
    target.mkdir(parents=True, exist_ok=True)
    span = f"{links[0].parent}..{links[-1].sha}"
    made = runner.repo.out(
        "format-patch", "--no-signature", "--full-index", "--binary", "--no-renames",
        "--output-directory", str(target.resolve()), span,
    ).splitlines()  # fmt: skip
    names = [Path(line).name for line in made if line]
    files.atomic_write_text(target / "series", "".join(f"{name}\n" for name in names))
    with (target / "combined.diff").open("wb") as out:
        runner.repo.run(
            "diff", "--binary", "--full-index", "--no-renames", links[0].parent, links[-1].sha,
            stdout_file=out,
        )  # fmt: skip
    return names


def changed_paths(repo: git.Repo, parent: str, sha: str) -> list[str]:
    fields = repo.z("diff", "--name-only", "-z", "--no-renames", parent, sha)
    return [git.decode_path(path) for path in fields]


def patch_between(repo: git.Repo, parent: str, sha: str) -> bytes:
    return repo.run("diff", "--binary", "--full-index", "--no-renames", parent, sha).stdout

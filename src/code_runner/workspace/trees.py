"""States of a work tree as git trees: the current one, the base, a restore to a kept one,
and the export of the allowlisted patch (checked to apply on a clean base)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from code_runner import proc
from code_runner.files import force_rmtree
from code_runner.workspace.layout import WorkspacePaths

ATTRIBUTES = b".gitattributes"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def current_tree(ws: WorkspacePaths) -> str:
    """The staged state as a tree object (cheap to keep, cheap to restore)."""
    return ws.repo.out("write-tree")


def base_tree(ws: WorkspacePaths) -> str:
    """The tree of the base commit (what the index holds right after checkout)."""
    return ws.repo.out("rev-parse", f"{ws.base}^{{tree}}")


def restore_tree(ws: WorkspacePaths, tree: str) -> None:
    """Make the work tree and index exactly `tree` (used to go back to the best round)."""
    ws.repo.run("read-tree", "--reset", tree)
    materialize(ws)


def _attribute_entries(ws: WorkspacePaths, treeish: str) -> dict[bytes, bytes]:
    """`.gitattributes` entries of `treeish`: raw path -> `mode SP type SP oid`."""
    found: dict[bytes, bytes] = {}
    for record in ws.repo.z("ls-tree", "-r", "-z", "--full-tree", treeish):
        meta, _, path = record.partition(b"\t")
        if path.rsplit(b"/", 1)[-1] == ATTRIBUTES:
            found[path] = meta
    return found


def materialize(ws: WorkspacePaths) -> str:
    """Write the index's tree out as the work tree, converted with the BASE's attributes.

    What the DoD judges must be what `git clone BASE && git apply PATCH` gives: every file
    is written afresh from its blob, through the base's `.gitattributes` only (a check-in or
    checkout attribute the agent wrote, kept or dropped, converts nothing), nothing
    untracked or ignored is left, and the index is rebuilt from the tree, so no
    assume-unchanged or skip-worktree flag hides a file. Returns the tree.
    """
    tree = ws.repo.out("write-tree")
    ours = _attribute_entries(ws, tree)
    theirs = _attribute_entries(ws, ws.base)
    index = ws.root / "materialize.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        ws.repo.run("read-tree", tree, env=env)
        lines = [
            (theirs[path] if path in theirs else b"0 " + b"0" * 40) + b"\t" + path + b"\0"
            for path in sorted(set(ours) | set(theirs))
        ]
        if lines:
            ws.repo.run("update-index", "-z", "--index-info", input_bytes=b"".join(lines), env=env)
        _empty_work_tree(ws)
        ws.write("checkout-index", "--all", "--force", env=env)
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
    ws.repo.run("read-tree", "--reset", tree)  # no index flag survives
    differ = sorted(p for p in set(ours) | set(theirs) if ours.get(p) != theirs.get(p))
    for path in differ:  # the agent's allowed attributes files themselves
        _remove(ws.work_tree / path.decode("utf-8", "surrogateescape"))
    changed = [p for p in differ if p in ours]
    if changed:
        ws.write(
            "checkout-index", "--force", "-z", "--stdin", input_bytes=b"\0".join(changed) + b"\0"
        )
    ws.repo.run("update-index", "-q", "--refresh", check=False)
    return tree


def _empty_work_tree(ws: WorkspacePaths) -> None:
    """Remove everything in the work tree but the runner's `.git` pointer."""
    for entry in list(ws.work_tree.iterdir()):
        if entry.name != ".git":
            _remove(entry)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        force_rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


_DIFF_OPTIONS = ("--no-ext-diff", "--no-textconv", "--no-renames", "--no-color")


def export_patch(ws: WorkspacePaths, dest: Path) -> None:
    """Write the staged changes against base to `dest`, binary-safe (applies with `git
    apply` on base). git writes the file itself: the patch never passes through memory."""
    with os.fdopen(proc.open_no_follow(dest, os.O_WRONLY | os.O_TRUNC), "wb") as out:
        ws.repo.run(
            "diff",
            "--cached",
            "--binary",
            "--full-index",
            *_DIFF_OPTIONS,
            ws.base,
            "--",
            stdout_file=out,
        )


def review_diff(ws: WorkspacePaths, dest: Path) -> None:
    """Write the same diff as text for a human to `dest` (`--text`: `-diff` attributes
    cannot hide a change), streamed like the patch."""
    with os.fdopen(proc.open_no_follow(dest, os.O_WRONLY | os.O_TRUNC), "wb") as out:
        ws.repo.run(
            "diff",
            "--cached",
            "--text",
            *_DIFF_OPTIONS,
            "--stat",
            "--patch",
            ws.base,
            "--",
            stdout_file=out,
        )


def patch_applies_on_base(ws: WorkspacePaths, patch: Path) -> tuple[bool, str]:
    """Prove the exported patch applies to a clean base, in a scratch index."""
    if patch.stat().st_size == 0:
        return True, ""
    index = ws.root / "check.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        ws.repo.run("read-tree", ws.base, env=env)
        with patch.open("rb") as stdin:
            result = ws.repo.run(
                "apply",
                "--cached",
                "--check",
                "--binary",
                "-",
                stdin_file=stdin,
                env=env,
                check=False,
            )
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
    return result.ok, result.stderr.decode("utf-8", "replace").strip()

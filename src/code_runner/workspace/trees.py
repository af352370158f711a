"""States of a work tree as git trees: the current one, the base, a restore to a kept one,
and the export of the allowlisted patch (checked to apply on a clean base)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import code_runner.workspace.overlay as overlay
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


def materialize(ws: WorkspacePaths, *, unflagged: bool = False) -> str:
    """Write the index's tree out as the work tree, converted with the BASE's attributes.

    What the DoD judges must be what `git clone BASE && git apply PATCH` gives: every file
    is written afresh from its blob, through the base's `.gitattributes` only (a check-in or
    checkout attribute the agent wrote, kept or dropped, converts nothing), nothing
    untracked or ignored is left, and the index is rebuilt from the tree, so no
    assume-unchanged or skip-worktree flag hides a file. Returns the tree.

    An overlay's lower layer is the base exactly as a checkout writes it, so only the paths
    its upper layer holds, and those the tree changes, are written afresh (`_rewrite`).
    `unflagged`: the caller has just read the index and found no entry flagged, and has
    changed it only through git commands that set no flag since (the audit).
    """
    if ws.overlay:
        return _rewrite(ws, unflagged=unflagged)
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


def _diff_from_base(ws: WorkspacePaths, tree: str) -> dict[bytes, bytes]:
    """Paths whose entry differs between base and `tree`: raw path -> the base's entry
    (`mode SP blob SP oid`, or a removal when base has none)."""
    fields = ws.repo.z(
        "diff-tree", "-r", "-z", "--raw", "--no-renames", "--abbrev=40", ws.base, tree
    )
    found: dict[bytes, bytes] = {}
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode().lstrip(":").split()
        old_mode, old_oid = meta[0], meta[2]
        entry = f"{old_mode} blob {old_oid}" if old_mode != "000000" else "0 " + "0" * 40
        found[fields[i + 1]] = entry.encode()
    return found


def _rewrite(ws: WorkspacePaths, *, unflagged: bool = False) -> str:
    """`materialize` for an overlay: the work tree is the base (lower layer) plus what the
    upper layer holds; each of those paths, and each the tree changes, is removed and
    written afresh from the tree through the base's attributes. O(changes), not O(files)."""
    tree = ws.repo.out("write-tree")
    changed = _diff_from_base(ws, tree)
    leaves, replaced = overlay.changed_paths(ws.root)
    todo = {p.encode("utf-8", "surrogateescape") for p in leaves} | set(changed)
    if replaced:  # a directory replaced or removed hides every base path beneath it
        dirs = [p.encode("utf-8", "surrogateescape") for p in replaced]
        todo |= set(ws.repo.z("ls-tree", "-r", "-z", "--name-only", ws.base, "--", *_decoded(dirs)))
    todo.discard(b".git")
    attributes = {p: e for p, e in changed.items() if p.rsplit(b"/", 1)[-1] == ATTRIBUTES}
    index = ws.root / "materialize.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        entries = _entries(ws, tree, sorted(todo))  # a small index: only what is written
        entries.update({p: e for p, e in attributes.items()})
        lines = [e + b"\t" + p + b"\0" for p, e in sorted(entries.items())]
        if lines:
            ws.repo.run("update-index", "-z", "--index-info", input_bytes=b"".join(lines), env=env)
        for path in sorted(todo, reverse=True):
            _remove_beneath(ws.work_tree, path.decode("utf-8", "surrogateescape"))
        if lines:
            ws.write("checkout-index", "-q", "--force", "--all", env=env)
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
    if not unflagged and _flagged(ws):
        ws.repo.run("read-tree", "--reset", tree)  # no index flag survives
    ours = [p for p in attributes if p in _present(ws, tree, list(attributes))]
    for path in attributes:  # the agent's allowed attributes files themselves
        _remove(ws.work_tree / path.decode("utf-8", "surrogateescape"))
    if ours:
        ws.write("checkout-index", "--force", "-z", "--stdin", input_bytes=b"\0".join(ours) + b"\0")
    written = [p for p in sorted(todo) if os.path.lexists(ws.work_tree / os.fsdecode(p))]
    if written:  # their stat data, so git does not read them again
        ws.repo.run(
            "add",
            "--refresh",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
            input_bytes=b"".join(p + b"\0" for p in written),
            env={"GIT_LITERAL_PATHSPECS": "1"},
            check=False,
        )
    return tree


def _flagged(ws: WorkspacePaths) -> bool:
    """Does an index entry carry assume-unchanged or skip-worktree?"""
    fields = ws.repo.z("ls-files", "-v", "-z")
    return any(len(f) > 2 and (f[:1].islower() or f[:1] == b"S") for f in fields)


def _entries(ws: WorkspacePaths, treeish: str, paths: list[bytes]) -> dict[bytes, bytes]:
    """`treeish`'s entries at `paths` (and beneath them): raw path -> `mode SP type SP oid`."""
    found: dict[bytes, bytes] = {}
    for start in range(0, len(paths), 500):
        chunk = _decoded(paths[start : start + 500])
        for record in ws.repo.z(
            "ls-tree",
            "-r",
            "-z",
            "--full-tree",
            treeish,
            "--",
            *chunk,
            env={"GIT_LITERAL_PATHSPECS": "1"},
        ):
            meta, _, path = record.partition(b"\t")
            found[path] = meta
    return found


def _decoded(paths: list[bytes]) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in paths]


def _present(ws: WorkspacePaths, tree: str, paths: list[bytes]) -> set[bytes]:
    """Which of `paths` `tree` holds."""
    if not paths:
        return set()
    return set(
        ws.repo.z("ls-tree", "-z", "--name-only", "--full-tree", tree, "--", *_decoded(paths))
    )


def _remove_beneath(root: Path, rel: str) -> None:
    """Remove `root/rel` without following a link on the way, then its parents that are
    left empty (a clean checkout of the tree has no empty directory)."""
    parts = rel.split("/")
    here = root
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink() or not here.is_dir():
            _remove(here)  # a file or link where the tree has a directory
            return
    _remove(here / parts[-1])
    while here != root:
        try:
            here.rmdir()
        except OSError:
            return
        here = here.parent


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
    """Prove the exported patch applies to a clean base, in a scratch index that holds
    only base's entries at the paths the staged changes touch (O(changes))."""
    if patch.stat().st_size == 0:
        return True, ""
    index = ws.root / "check.index"
    env = {"GIT_INDEX_FILE": str(index)}
    touched = ws.repo.z("diff-index", "--cached", "--name-only", "-z", "--no-renames", ws.base)
    try:
        # base's entries at the paths the patch touches: all `apply --cached` reads
        entries = _entries(ws, ws.base, touched)
        lines = [e + b"\t" + p + b"\0" for p, e in sorted(entries.items())]
        ws.repo.run("update-index", "-z", "--index-info", input_bytes=b"".join(lines), env=env)
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

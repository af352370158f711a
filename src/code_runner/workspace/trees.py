"""States of a work tree as git trees: the current one, the base, a restore to a kept one,
and the export of the allowlisted patch (checked to apply on a clean base)."""

from __future__ import annotations

import contextlib

from code_runner.workspace.audit import clean
from code_runner.workspace.layout import WorkspacePaths

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def current_tree(ws: WorkspacePaths) -> str:
    """The staged state as a tree object (cheap to keep, cheap to restore)."""
    return ws.repo.out("write-tree")


def base_tree(ws: WorkspacePaths) -> str:
    """The tree of the base commit (what the index holds right after checkout)."""
    return ws.repo.out("rev-parse", f"{ws.base}^{{tree}}")


def restore_tree(ws: WorkspacePaths, tree: str) -> None:
    """Make the work tree and index exactly `tree` (used to go back to the best round)."""
    ws.repo.run("read-tree", "--reset", "-u", tree)
    clean(ws)


def export_patch(ws: WorkspacePaths) -> bytes:
    """The staged changes against base, binary-safe; applies with `git apply` on base."""
    return ws.repo.run(
        "diff",
        "--cached",
        "--binary",
        "--full-index",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--no-color",
        ws.base,
        "--",
    ).stdout


def review_diff(ws: WorkspacePaths) -> str:
    """The same diff as text for a human (`--text`: `-diff` attributes cannot hide a change)."""
    out = ws.repo.run(
        "diff",
        "--cached",
        "--text",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--no-color",
        "--stat",
        "--patch",
        ws.base,
        "--",
    ).stdout
    return out.decode("utf-8", "replace")


def patch_applies_on_base(ws: WorkspacePaths, patch: bytes) -> tuple[bool, str]:
    """Prove the exported patch applies to a clean base, in a scratch index."""
    if not patch:
        return True, ""
    index = ws.root / "check.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        ws.repo.run("read-tree", ws.base, env=env)
        result = ws.repo.run(
            "apply",
            "--cached",
            "--check",
            "--binary",
            "-",
            input_bytes=patch,
            env=env,
            check=False,
        )
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
    return result.ok, result.stderr.decode("utf-8", "replace").strip()

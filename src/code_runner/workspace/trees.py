"""States of a work tree as git trees: the current one, the base, a restore to a kept one,
and the export of the allowlisted patch (checked to apply on a clean base)."""

from __future__ import annotations

import contextlib
from pathlib import Path

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


_DIFF_OPTIONS = ("--no-ext-diff", "--no-textconv", "--no-renames", "--no-color")


def export_patch(ws: WorkspacePaths, dest: Path) -> None:
    """Write the staged changes against base to `dest`, binary-safe (applies with `git
    apply` on base). git writes the file itself: the patch never passes through memory."""
    with dest.open("wb") as out:
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
    with dest.open("wb") as out:
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

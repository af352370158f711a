"""The `Workspace`: a disposable checkout made from a `clone --shared` into the state dir.

A linked `git worktree` would share the source's git dir (refs, config, hooks); a clone
shares only read-only objects. A workspace that fails half-way is removed at once, and one
that is released leaves nothing behind.

The `Workspace` owns its state: the tree its work tree holds, the git state an agent must
not change, its command environment and scratch dirs. A round reads as verbs on it:
`audit`, `keep`, `restore`, `export`, `release`.

A root runner whose commands run as a sandbox uid checks the tree out as that uid
(`owner`): every file is the sandbox's from the start, so no walk re-owns the tree and no
inode change time moves under git's index (which would make the audit re-read every file).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import code_runner.workspace.trees as trees
from code_runner import dirs, files
from code_runner.files import force_rmtree
from code_runner.repo import git
from code_runner.task.paths import Allowlist
from code_runner.workspace.audit import Audit, GitState, git_state, object_files
from code_runner.workspace.audit import audit as audit_changes
from code_runner.workspace.layout import WorkspacePaths
from code_runner.workspace.lease import source_lock, write_lease
from code_runner.workspace.owner import as_user_argv, give_back
from code_runner.workspace.python_env import ProjectEnv, discover


@dataclass(frozen=True)
class ExportedPatch:
    """The kept tree's changes against base: the patch and its review text as files in the
    workspace (gone with it; never read whole by the runner), and whether the patch applies
    to a clean base (`detail` says why not)."""

    patch_path: Path
    review_path: Path
    applies_on_base: bool
    detail: str

    @property
    def patch(self) -> bytes:
        return self.patch_path.read_bytes()

    @property
    def review(self) -> str:
        return self.review_path.read_text("utf-8", "replace")


class Workspace:
    """A live disposable checkout. Made by `create`; ends with `release`."""

    def __init__(self, paths: WorkspacePaths, *, tree: str, git_before: GitState):
        self.paths = paths
        self._tree: str | None = tree
        self._git_before = git_before
        self.created_bytes = files.disk_usage(paths.root)  # the checkout itself

    # --- where things are ----------------------------------------------------------------

    @property
    def owner(self) -> tuple[int, int] | None:
        """(uid, gid) that owns every file of the work tree, written as it, if one does."""
        return self.paths.owner

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @property
    def root(self) -> Path:
        return self.paths.root

    @property
    def source_dir(self) -> Path:
        return self.paths.source_dir

    @property
    def base(self) -> str:
        return self.paths.base

    @property
    def work_tree(self) -> Path:
        return self.paths.work_tree

    @property
    def git_dir(self) -> Path:
        return self.paths.git_dir

    @property
    def repo(self) -> git.Repo:
        return self.paths.repo

    def env(self) -> dict[str, str]:
        """The environment for tool commands and the DoD in this workspace."""
        return self.paths.env()

    def source_env(self) -> dict[str, str]:
        """The same environment for a DoD run in the source (the apply step)."""
        return self.paths.source_env()

    @property
    def project(self) -> ProjectEnv | None:
        """The project's environment its commands get."""
        return self.paths.project

    def empty_scratch(self) -> None:
        """Empty the commands' HOME and TMPDIR (before a DoD run without the sandbox)."""
        self.paths.empty_scratch()

    # --- the work tree's state -----------------------------------------------------------

    @property
    def current_tree(self) -> str | None:
        """The tree the work tree holds, as last kept or restored; None after an audit
        until `keep` writes the audited state as a tree."""
        return self._tree

    def audit(self, allowlist: Allowlist) -> Audit:
        """Enforce the rules on what an agent left: the work tree becomes base + allowed."""
        self._tree = None
        found = audit_changes(self.paths, allowlist, self._git_before)
        self._objects_written()
        return found

    def _objects_written(self) -> None:
        """The objects the runner itself wrote join the fingerprint the next audit checks."""
        self._git_before = dataclasses.replace(
            self._git_before, objects=object_files(self.paths.git_dir)
        )

    def keep(self) -> str:
        """The work tree's state as a tree object (cheap to keep, cheap to restore)."""
        self._tree = trees.current_tree(self.paths)
        self._objects_written()
        return self._tree

    def restore(self, tree: str) -> None:
        """Make the work tree and index exactly `tree` (a kept state)."""
        trees.restore_tree(self.paths, tree)
        self._tree = tree

    def materialize(self) -> str:
        """Write the index's tree out as the work tree with the base's attributes only."""
        self._tree = trees.materialize(self.paths)
        return self._tree

    def export(self, tree: str) -> ExportedPatch:
        """The patch of `tree` against base (restored first when the work tree holds
        another), with its review text, checked to apply on a clean base."""
        if self._tree != tree:
            self.restore(tree)
        patch, review = self.paths.root / "export.patch", self.paths.root / "export.review"
        trees.export_patch(self.paths, patch)
        trees.review_diff(self.paths, review)
        applies, detail = trees.patch_applies_on_base(self.paths, patch)
        return ExportedPatch(patch, review, applies, detail)

    def written_bytes(self) -> int:
        """Bytes the run has added to the workspace since it was made (work tree, git dir,
        HOME, TMPDIR): what `limits.disk_mb` bounds."""
        return max(0, files.disk_usage(self.root) - self.created_bytes)

    def release(self) -> bool:
        """Remove the workspace and its git dir. True when nothing is left."""
        if self.root.exists():
            force_rmtree(self.root)
        return not self.root.exists()


def create(
    source: git.Repo,
    base: str,
    *,
    run_id: str,
    output_dir: Path | None = None,
    project: ProjectEnv | None = None,
    owner: tuple[int, int] | None = None,
) -> Workspace:
    """Make a disposable checkout of `source` at `base`. The source is only read.

    Its commands get the project's environment (`project`, or the one `discover` finds).
    `owner` (uid, gid): check the files out as that user where this runner can (root, with
    `setpriv`); `Workspace.owner` says whether it did."""
    assert source.work_tree is not None
    root = dirs.workspaces_dir() / run_id
    root.mkdir(parents=True, exist_ok=False)
    try:
        paths = WorkspacePaths(
            run_id=run_id,
            root=root,
            source_dir=source.work_tree,
            base=base,
            project=project if project is not None else discover(source.work_tree),
        )
        write_lease(root, run_id, source.work_tree, output_dir)
        paths.home_dir.mkdir()
        paths.tmp_dir.mkdir()
        with source_lock(source.git_dir):
            git.clone_shared(source, git_dir=paths.git_dir, work_tree=paths.work_tree)
        owned = _checkout(paths, base, owner)
        paths = dataclasses.replace(paths, owner=owned)
        return Workspace(paths, tree=trees.base_tree(paths), git_before=git_state(paths))
    except BaseException:
        # A half-made workspace must not wait for `gc`: nothing else knows it exists.
        force_rmtree(root)
        raise


_CHECKOUT = ("checkout", "--quiet", "--no-recurse-submodules", "--detach")


def _checkout(
    paths: WorkspacePaths, base: str, owner: tuple[int, int] | None
) -> tuple[int, int] | None:
    """Check `base` out; as `owner` where possible. The owner it was checked out as."""
    prefix = as_user_argv(owner) if owner is not None else None
    if owner is None or prefix is None:
        paths.repo.run(*_CHECKOUT, base)
        return None
    os.chown(paths.work_tree, *owner)
    try:
        paths.repo.run(*_CHECKOUT, base, prefix=prefix)
    finally:
        give_back(paths.git_dir, owner[0])
    return owner

"""The `Workspace`: a disposable checkout made from a `clone --shared` into the state dir.

A linked `git worktree` would share the source's git dir (refs, config, hooks); a clone
shares only read-only objects. A workspace that fails half-way is removed at once, and one
that is released leaves nothing behind.

The `Workspace` owns its state: the tree its work tree holds, the git state an agent must
not change, its command environment and scratch dirs. A round reads as verbs on it:
`audit`, `keep`, `restore`, `export`, `release`.

A root runner makes the work tree an overlay over the checkout cache's copy of the base
(`overlay`, `checkouts`): a mount instead of a checkout, whatever the repo's size, with the
cached index copied in (`core.checkStat=minimal`: the audit re-reads what the upper layer
lists), and a git dir that borrows the source's objects through alternates as the clone
does, made without running git in the source (`git.borrow_objects`). Elsewhere, or when
the mount fails, it is the clone and checkout below, and `Workspace.kind` says which one
ran.

A root runner whose commands run as a sandbox uid writes the tree as that uid (`owner`):
an overlay shows the cached files as that uid's (an idmapped lower layer), a checkout runs
as it. Every file is the sandbox's from the start, so no walk re-owns the tree and no inode
change time moves under git's index (which would make the audit re-read every file).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import code_runner.workspace.checkouts as checkouts
import code_runner.workspace.overlay as overlay
import code_runner.workspace.trees as trees
from code_runner import dirs, files, proc
from code_runner.files import force_rmtree
from code_runner.repo import git
from code_runner.task.paths import Allowlist
from code_runner.workspace.audit import Audit, GitState, git_state, object_files
from code_runner.workspace.audit import audit as audit_changes
from code_runner.workspace.dependency_links import dependency_links, linked
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


class Workspace:
    """A live disposable checkout. Made by `create`; ends with `release`."""

    def __init__(
        self,
        paths: WorkspacePaths,
        *,
        tree: str,
        git_before: GitState,
        checkout: checkouts.Checkout | None = None,
        fallback: str = "",
    ):
        self.paths = paths
        self._tree: str | None = tree
        self._git_before = git_before
        self._audited = ""  # the tree the last audit left, until the index is changed
        self._checkout = checkout
        self.fallback = fallback  # why an overlay was not used ("" when it was, or not tried)
        self._parts: dict[str, int] = {}  # bytes of each part of the root, as last counted
        self.created_bytes = self._usage()  # the checkout itself
        # the source's dependency dirs, as links for a command run without the sandbox
        self._links = dependency_links(paths.source_dir, paths.work_tree)

    @property
    def kind(self) -> str:
        """`overlay` (a mount over the checkout cache) or `clone` (a checkout of its own)."""
        return "overlay" if self.paths.overlay else "clone"

    def created_fields(self) -> dict[str, str | None]:
        """The `workspace_created` event: where, and which kind (and why not an overlay)."""
        return {
            "path": str(self.work_tree),
            "workspace_kind": self.kind,
            "workspace_fallback": self.fallback or None,
        }

    def _usage(self, only: frozenset[str] | None = None) -> int:
        """Bytes on disk, counted part by part of the workspace root (the work tree, or an
        overlay's layers, whose lower files are the cache's and shared; the git dir; HOME;
        TMPDIR). `only`: count those parts again and take the others as last counted."""
        skip = (
            {self.paths.work_tree.name, overlay.lower_mount(self.paths.root).name}
            if self.paths.overlay
            else set()
        )
        root = self.paths.root
        if only is None or not self._parts:
            names = [name for name in os.listdir(root) if name not in skip]
            self._parts = {name: _part_usage(root / name) for name in names}
        else:
            self._parts |= {name: _part_usage(root / name) for name in only}
        return sum(self._parts.values())

    def tree_parts(self) -> frozenset[str]:
        """The parts a command that sees only the work tree can write (a sandboxed one: its
        HOME and TMPDIR are a tmpfs of its own, the git dir is read-only): an overlay's
        upper layer and its scratch dir, which hold only what changed; else the checkout."""
        if self.paths.overlay:
            root = self.paths.root
            return frozenset({overlay.upper_dir(root).name, overlay.work_dir(root).name})
        return frozenset({self.paths.work_tree.name})

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

    @contextlib.contextmanager
    def unsandboxed_dependencies(self) -> Iterator[list[Path]]:
        """While it lasts, the source's `.venv` / `venv` / `node_modules` are in the work
        tree as links, where the sandbox would bind them; gone again before any audit."""
        with linked(self._links) as made:
            yield made

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
        self._audited = found.tree
        return found

    def _objects_written(self) -> None:
        """The objects the runner itself wrote join the fingerprint the next audit checks."""
        self._git_before = dataclasses.replace(
            self._git_before, objects=object_files(self.paths.git_dir)
        )

    def keep(self) -> str:
        """The work tree's state as a tree object (cheap to keep, cheap to restore): right
        after an audit, the tree it wrote the work tree from (the index is still that)."""
        if self._audited:
            self._tree, self._audited = self._audited, ""
            return self._tree
        self._tree = trees.current_tree(self.paths)
        self._objects_written()
        return self._tree

    def restore(self, tree: str) -> None:
        """Make the work tree and index exactly `tree` (a kept state)."""
        self._audited = ""
        trees.restore_tree(self.paths, tree)
        self._tree = tree

    def materialize(self) -> str:
        """Write the index's tree out as the work tree with the base's attributes only."""
        self._audited = ""
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

    def written_bytes(self, *, tree_only: bool = False) -> int:
        """Bytes the run has added to the workspace since it was made (work tree, git dir,
        HOME, TMPDIR): what `limits.disk_mb` bounds. `tree_only`: after a command that could
        write nothing but the work tree (`tree_parts`), only that is counted again, and the
        other parts are taken as the last full count found them: a cost of what changed in
        an overlay, not of the whole workspace."""
        only = self.tree_parts() if tree_only else None
        return max(0, self._usage(only) - self.created_bytes)

    def release(self) -> bool:
        """Remove the workspace and its git dir, and the run's cgroup (`proc`) once no
        command of the run is left in it. True when nothing is left; False when it could
        not be removed (a file system mounted inside it): what is left carries its lease,
        so `gc` or the plan's next start removes it."""
        try:
            with contextlib.suppress(OSError):
                remove_root(self.root)
        finally:
            if self._checkout is not None:
                self._checkout.release()
            proc.release_run_group(self.run_id)  # its commands' spare cgroup leaf
        return not self.root.exists()


def _part_usage(part: Path) -> int:
    """Bytes one entry of the workspace root takes: a directory's files, or the entry's own."""
    if part.is_dir() and not part.is_symlink():
        return files.disk_usage(part)
    try:
        return part.lstat().st_blocks * 512
    except OSError:
        return 0


def remove_root(root: Path) -> None:
    """Take a workspace's mounts down, then remove its files (its own, never the cache's)."""
    overlay.unmount(root)
    if root.exists() or root.is_symlink():
        force_rmtree(root)


def create(
    source: git.Repo,
    base: str,
    *,
    run_id: str,
    output_dir: Path | None = None,
    project: ProjectEnv | None = None,
    owner: tuple[int, int] | None = None,
    cached: bool = True,
) -> Workspace:
    """Make a disposable checkout of `source` at `base`. The source is only read.

    Its commands get the project's environment (`project`, or the one `discover` finds).
    `owner` (uid, gid): check the files out as that user where this runner can (root, with
    `setpriv`); `Workspace.owner` says whether it did.

    The work tree is an overlay over the shared checkout cache only where every command in
    it runs as `owner` (the sandbox's uid, which cannot reach the cache) and `cached`: a
    caller whose agent runs as the runner (an agent CLI) passes False. `Workspace.kind` and
    `Workspace.fallback` say what was made and why."""
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
        fallback = _overlay_unavailable(root, owner, cached)
        if not fallback:
            try:
                return _overlay_workspace(source, paths, base, owner)
            except OSError as exc:
                fallback = f"no overlay ({exc.strerror or exc}); a clone was made"
                _clear(root, keep={"lease.json", paths.home_dir.name, paths.tmp_dir.name})
        with source_lock(source.git_dir):
            git.clone_shared(source, git_dir=paths.git_dir, work_tree=paths.work_tree)
        owned = _checkout(paths, base, owner)
        paths = dataclasses.replace(paths, owner=owned)
        tree = trees.base_tree(paths)
        return Workspace(
            paths, tree=tree, git_before=git_state(paths, fresh=True), fallback=fallback
        )
    except BaseException:
        # A half-made workspace must not wait for `gc`: nothing else knows it exists.
        remove_root(root)
        raise


def planned_kind(*, sandboxed: bool, cached: bool = True) -> dict[str, str]:
    """The kind of workspace a run would get here (for `dry-run` and `doctor`): `sandboxed`,
    its commands run as a sandbox uid of a root runner; `cached`, its agent is not one that
    runs as the runner."""
    owner = (65534, 65534) if sandboxed else None
    why = _overlay_unavailable(dirs.workspaces_dir() / "planned", owner, cached)
    if why:
        return {"kind": "clone", "fallback": why}
    cache = f"{checkouts.cache_dir()}, up to {checkouts.max_entries()} trees"
    return {"kind": "overlay", "cache": cache}


def _overlay_unavailable(root: Path, owner: tuple[int, int] | None, cached: bool) -> str:
    if not cached:
        return "the agent runs as the runner, which could write the shared checkout cache"
    if checkouts.max_entries() == 0:
        return f"{checkouts.ENTRIES_ENV}=0: no checkout cache"
    if owner is None:
        return "commands do not run as a sandbox uid, which keeps them from the shared cache"
    if as_user_argv(owner) is None:
        return "files cannot be written as the sandbox's uid here (no setpriv)"
    return overlay.unavailable(root.parent) or ""


def _clear(root: Path, keep: set[str]) -> None:
    overlay.unmount(root)
    for child in root.iterdir():
        if child.name not in keep:
            force_rmtree(child)


def _overlay_workspace(
    source: git.Repo, paths: WorkspacePaths, base: str, owner: tuple[int, int] | None
) -> Workspace:
    """The work tree mounted over the cached checkout of `base`, with its index copied in.

    The git dir borrows the source's objects (as `clone --shared` does, with no git run in
    the source) and writes its `.git` pointer into the upper layer, where the work tree
    shows it; HEAD is detached at `base` as a checkout leaves it."""
    held = checkouts.acquire(source, base)
    try:
        upper = overlay.upper_dir(paths.root)
        object_format = "sha256" if len(held.commit) == 64 else "sha1"
        git.borrow_objects(
            source, git_dir=paths.git_dir, work_tree=upper, object_format=object_format
        )
        overlay.mount(held.files_dir, paths.root, owner=owner)
        shutil.copyfile(held.index, paths.git_dir / "index")
        # HEAD detached at base, as a checkout leaves it; an index trusting size and mtime
        files.atomic_write_text(paths.git_dir / "HEAD", f"{held.commit}\n")
        with (paths.git_dir / "config").open("a", encoding="utf-8") as config:
            config.write("[core]\n\tcheckStat = minimal\n")
        paths = dataclasses.replace(paths, owner=owner, overlay=True)
        return Workspace(
            paths, tree=held.tree, git_before=git_state(paths, fresh=True), checkout=held
        )
    except BaseException:
        held.release()
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

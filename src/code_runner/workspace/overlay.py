"""An overlay work tree: a read-only cached checkout below, the run's own writes above.

Creating one costs a mount, whatever the repo's size, where a checkout writes every file.
The lower layer is the checkout cache's tree (`checkouts`), never written: every write
lands in the workspace's upper directory, which therefore lists exactly the paths that
differ from base (files, `whiteout` devices for deletions, opaque directories for a
directory removed and made again). The audit reads its candidates from there.

A root runner whose commands run as a sandbox uid sees the lower layer through an idmapped
mount that shows root's files as that uid's: nothing chowns the tree (a chown would copy
every file up). Where overlayfs cannot mount (not root, no overlay, a path the mount
options cannot carry), `unavailable` says why and the workspace is a clone instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import tempfile
from pathlib import Path

import code_runner.sandbox.idmap as idmap
from code_runner import tuning
from code_runner.sandbox.profile import SandboxUser

MODE_ENV = tuning.WORKSPACE_ENV  # "clone": never overlay

_OPTIONS = "redirect_dir=off,index=off,metacopy=off"
_UNSAFE = frozenset(",:\\=\n ")


def upper_dir(root: Path) -> Path:
    return root / "upper"


def lower_mount(root: Path) -> Path:
    return root / "lower"


def work_dir(root: Path) -> Path:
    """overlayfs's own scratch dir, on the upper layer's file system."""
    return root / "ovl-work"


def unavailable(root_parent: Path) -> str | None:
    """Why a workspace under `root_parent` cannot be an overlay here, or None when it can."""
    if tuning.workspace_clone_only():
        return f"{MODE_ENV}=clone"
    if os.geteuid() != 0:
        return "overlayfs needs a root runner here (a clone is used)"
    if _UNSAFE & set(str(root_parent)):
        return f"the state dir's path cannot be given to overlayfs: {root_parent}"
    return _probe()


@functools.cache
def _probe() -> str | None:
    """Mount a tiny overlay over an idmapped lower once per process, then take it down."""
    try:
        with tempfile.TemporaryDirectory(prefix="code-runner-overlay-") as scratch:
            root = Path(scratch)
            (root / "tree").mkdir()
            (root / "tree" / "f").write_text("x")
            mount(root / "tree", root / "ws", owner=(65534, 65534))
            try:
                seen = os.stat(root / "ws" / "wt" / "f").st_uid
            finally:
                unmount(root / "ws")
            if seen != 65534:
                return "overlayfs mounted, but its idmapped lower did not show the sandbox uid"
    except OSError as exc:
        return f"overlayfs cannot mount here ({exc.strerror or exc})"
    return None


def mount(lower: Path, root: Path, *, owner: tuple[int, int] | None) -> Path:
    """Mount `root/wt`: `lower` read-only below, `root/upper` above. Returns the work tree.

    `owner`: show the lower's (root's) files as that uid and gid, and own the upper as it."""
    work_tree = root / "wt"
    for part in (upper_dir(root), work_dir(root), work_tree):
        part.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        os.chown(upper_dir(root), *owner)
        layer = lower_mount(root)
        layer.mkdir(exist_ok=True)
        # the lower's files are root's: shown as the sandbox uid's, so nothing chowns them
        idmap.bind(lower, layer, SandboxUser(0, 0), SandboxUser(*owner), read_only=True)
        lower = layer
    data = f"lowerdir={lower},upperdir={upper_dir(root)},workdir={work_dir(root)},{_OPTIONS}"
    try:
        idmap.mount_overlay(work_tree, data)
    except OSError:
        unmount(root)
        raise
    return work_tree


def unmount(root: Path) -> None:
    """Take down a workspace's mounts (detached: a process still inside cannot keep them).
    A bind of the same file system is not told apart by `stat`: try each, always."""
    for target in (root / "wt", lower_mount(root)):
        if os.path.isdir(target) and not os.path.islink(target):
            idmap.unmount(target)


def changed_paths(root: Path) -> tuple[list[str], list[str]]:
    """What the upper layer holds: (leaf paths, directories that replace the base's).

    Leaves are files, symlinks and whiteouts (a deletion); a directory that replaces the
    base's (opaque, or a whiteout of a directory) hides every base path beneath it. Paths
    are relative, `/`-separated. The upper layer is only read, never changed, while mounted.
    """
    top = upper_dir(root)
    leaves: list[str] = []
    replaced: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(top / rel if rel else top))
        except OSError:
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if _opaque(entry.path):
                    replaced.append(path)
                stack.append(path)
                continue
            leaves.append(path)
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                replaced.append(path)  # a whiteout: a file or a whole directory went
    return sorted(leaves), sorted(replaced)


def _opaque(path: str) -> bool:
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        with contextlib.suppress(OSError):
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
    return False

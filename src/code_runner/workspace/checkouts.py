"""The checkout cache: one read-only checkout per base tree, shared by the runs on it.

An entry is `STATE/checkouts/TREE/` holding `tree/` (the files, checked out by the same
hardened clone and checkout a workspace would make) and `index` (git's index of them, stat
data settled so git trusts it). It is built once, in a private directory renamed into place
when complete, and `ok` records the tree it holds and its index's digest: an entry that
does not match is never used. Readers hold a shared lock on `TREE.lock` for as long as a
workspace mounts the entry; the builder and the evictor take it exclusively, so nothing
removes an entry in use. At most `CODE_RUNNER_CHECKOUT_CACHE` entries (default 4) stay;
the least recently used idle ones go first. Entries are root's, in a 0700 directory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from code_runner import dirs, files, tuning
from code_runner.errors import LockHeld
from code_runner.files import force_rmtree
from code_runner.repo import git
from code_runner.workspace.lease import LOCK_TIMEOUT_S, source_lock

ENTRIES_ENV = tuning.CHECKOUT_CACHE_ENV
_SETTLE_INDEX_BYTES = 256 * 1024  # about 3,000 entries
CHECKOUT = ("checkout", "--quiet", "--no-recurse-submodules", "--detach")


def cache_dir() -> Path:
    return dirs.state_dir() / "checkouts"


def max_entries() -> int:
    """How many trees the cache keeps (`CODE_RUNNER_CHECKOUT_CACHE`; 0: no cache)."""
    return tuning.checkout_cache_entries()


@dataclass
class Checkout:
    """A cache entry held for one workspace: its files and index, and the shared lock."""

    tree: str
    commit: str
    files_dir: Path
    index: Path
    lock_fd: int

    def release(self) -> None:
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


def acquire(source: git.Repo, base: str) -> Checkout:
    """The checkout of `base`'s tree, built now if the cache does not hold it, and held
    (shared) until `Checkout.release`."""
    commit, tree = source.out("rev-parse", f"{base}^{{commit}}", f"{base}^{{tree}}").split()
    top = cache_dir()
    top.mkdir(parents=True, exist_ok=True)
    os.chmod(top, 0o700)
    entry = top / tree
    fd = files.open_lock(top / f"{tree}.lock")
    try:
        for _ in range(3):
            _lock(fd, tree, shared=True)
            if _verified(entry, tree):
                os.utime(entry / "ok")  # recently used: evicted last
                _evict(keep=tree, room=1)
                return Checkout(tree, commit, entry / "tree", entry / "index", fd)
            try:
                _lock(fd, tree, shared=False, waiting=lambda: _meanwhile(fd, entry, tree))
            except _Built:
                continue  # another run built it while this one waited: read it shared
            except _Exclusive:
                pass
            if not _verified(entry, tree):
                _build(source, base, entry, tree)
        raise OSError(errno.EAGAIN, f"the checkout cache entry {entry} kept changing")
    except BaseException:
        os.close(fd)
        raise


class _Built(Exception):
    """The entry was built by another run while this one waited to build it."""


class _Exclusive(Exception):
    """The exclusive lock was taken after all: the readers had gone."""


def _meanwhile(fd: int, entry: Path, tree: str) -> None:
    """While waiting to build an entry: stop waiting once another run has built it (its
    readers hold the lock shared for as long as their workspaces live, so the exclusive
    lock may not come for hours), or when only readers hold an entry that no longer
    matches its record (it cannot be rebuilt under them: the caller makes a clone)."""
    if _verified(entry, tree):
        raise _Built
    if entry.exists() and files.try_flock(fd, shared=True):
        if files.try_flock(fd):
            raise _Exclusive
        raise OSError(
            errno.EBUSY,
            f"the checkout cache entry {entry} is in use and no longer matches its record",
        )


def _lock(fd: int, tree: str, *, shared: bool, waiting: Callable[[], None] | None = None) -> None:
    def held() -> LockHeld:
        return LockHeld(
            f"the checkout cache entry of tree {tree} has been locked for over "
            f"{LOCK_TIMEOUT_S:.0f} s.",
            fix="wait for the run building it, or run `code-runner gc`.",
        )

    files.wait_flock(
        fd, shared=shared, timeout_s=LOCK_TIMEOUT_S, poll_s=0.02, held=held, waiting=waiting
    )


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified(entry: Path, tree: str) -> bool:
    """The entry is complete, root's (ours), and holds `tree` with the index it was made
    with."""
    try:
        st = os.lstat(entry)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077 or not os.path.isdir(entry):
            return False
        marker = json.loads((entry / "ok").read_text())
        return bool(marker.get("tree") == tree and marker.get("index") == _digest(entry / "index"))
    except (OSError, ValueError, AttributeError):
        return False


def _build(source: git.Repo, base: str, entry: Path, tree: str) -> None:
    """Check `base` out into a private directory, settle its index, and move it into place.
    Called with the entry's lock held exclusively."""
    building = entry.parent / f".build-{tree}-{os.getpid()}"
    force_rmtree(building)
    building.mkdir(mode=0o700)
    try:
        files_dir = building / "tree"
        with source_lock(source.git_dir):
            clone = git.clone_shared(source, git_dir=building / "git", work_tree=files_dir)
        clone.run(*CHECKOUT, base)
        # git distrusts an entry written in the same second as its index ("racily clean")
        # and re-reads it wherever it looks: in a large tree, write the index again once
        # that second passed (a small one is read again faster than the wait).
        if (building / "git" / "index").stat().st_size > _SETTLE_INDEX_BYTES:
            time.sleep(max(0.0, int(time.time()) + 1.01 - time.time()))
            clone.run("update-index", "-q", "--refresh", check=False)
        os.replace(building / "git" / "index", building / "index")
        (files_dir / ".git").unlink()
        force_rmtree(building / "git")
        marker = {"tree": tree, "index": _digest(building / "index"), "made_at": time.time()}
        files.atomic_write_json(building / "ok", marker)
        force_rmtree(entry)
        os.rename(building, entry)
    except BaseException:
        force_rmtree(building)
        raise


def _evict(keep: str = "", room: int = 0) -> list[Path]:
    """Remove dead builds, and the least recently used idle entries beyond the bound (less
    `room` for the entry `keep`, which stays). The entries removed."""
    top = cache_dir()
    entries: list[tuple[float, Path]] = []
    for path in top.iterdir():
        if path.name.startswith(".build-"):
            _remove_dead_build(path)
        elif path.is_dir() and path.name != keep:
            try:
                entries.append(((path / "ok").stat().st_mtime, path))
            except OSError:
                entries.append((0.0, path))
    excess = len(entries) + room - max_entries()
    return [path for _, path in sorted(entries)[: max(0, excess)] if remove_idle(path)]


def remove_idle(entry: Path) -> bool:
    """Remove `entry` if no workspace holds it. True when it is gone."""
    fd = files.open_lock(entry.parent / f"{entry.name}.lock")
    try:
        if not files.try_flock(fd):
            return False
        force_rmtree(entry)
        return not entry.exists()
    finally:
        os.close(fd)


def _remove_dead_build(path: Path) -> None:
    pid = path.name.rsplit("-", 1)[-1]
    with contextlib.suppress(ValueError, OSError):
        if int(pid) != os.getpid() and not Path(f"/proc/{int(pid)}").exists():
            force_rmtree(path)


def prune() -> list[Path]:
    """`code-runner gc`: dead builds, and idle entries beyond the bound. The entries removed."""
    return _evict() if cache_dir().is_dir() else []

"""An id-mapped view of the user's repo: a root runner's apply DoD runs as a uid of its own.

A root runner may neither run the user's tests as root (root reads every root-only file on
the machine) nor hand the user's files to a fresh uid (that changes their owner). An
id-mapped mount does both: the repo is mounted again, privately under the state dir, with
its owner's uid and gid shown as the sandbox's. The DoD, as that unprivileged uid, works in
the repo through this mount (bound at the repo's own path inside the sandbox), and what it
creates lands on disk owned by the repo's owner, as before. Files of any other owner show
as the overflow uid and stay out of its reach.

util-linux 2.38's `mount` and bubblewrap 0.8 cannot make one, so this module uses the
syscalls (Linux 5.12+): a user namespace holding the mapping (its fd, taken from a brief
`unshare --user` child whose maps the runner writes), `open_tree(OPEN_TREE_CLONE)`,
`mount_setattr(MOUNT_ATTR_IDMAP)` and `move_mount` onto a directory under the state dir.
`IdMapped.close` detaches it; a runner killed before that leaves the mount behind, and
`code-runner gc` detaches it (`remove_leftovers`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from code_runner import dirs, files, proc
from code_runner.sandbox.profile import SYSTEM_BIN_PATH, SandboxUser

_SYSCALLS = {  # open_tree, move_mount, mount_setattr
    "x86_64": (428, 429, 442),
    "aarch64": (428, 429, 442),
}
_AT_FDCWD = -100
_OPEN_TREE_CLONE = 1
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_IDMAP = 0x00100000
_MOUNT_ATTR_RDONLY = 0x00000001
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MNT_DETACH = 2
_NS_WAIT_S = 10.0  # a loaded machine can take seconds to start a process
DIR_NAME = "idmap"


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def mounts_dir() -> Path:
    """Where the id-mapped views are attached: under the state dir, masked in every sandbox."""
    return dirs.state_dir() / DIR_NAME


@dataclass
class IdMapped:
    """One id-mapped view of a tree, attached at `path` until `close`."""

    path: Path
    tree: Path

    def close(self) -> None:
        """Detach the view (lazily: a process still inside cannot keep it) and remove its dir."""
        _detach(self.path)


def _detach(path: Path) -> None:
    unmount(path)
    with contextlib.suppress(OSError):
        path.rmdir()


def _userns(owner: SandboxUser, shown_as: SandboxUser) -> int:
    """An fd of a fresh user namespace in which `owner` is `shown_as` (uid and gid)."""
    unshare = shutil.which("unshare", path=SYSTEM_BIN_PATH)
    sleep = shutil.which("sleep", path=SYSTEM_BIN_PATH)
    if unshare is None or sleep is None:
        raise OSError(0, "unshare(1) or sleep(1) is not installed")
    mine = os.readlink("/proc/self/ns/user")
    with tempfile.TemporaryDirectory(prefix="code-runner-userns-") as scratch:
        out = Path(scratch) / "out"
        child = proc.spawn(
            [unshare, "--user", "--", sleep, "30"],
            cwd="/",
            env={"PATH": SYSTEM_BIN_PATH},
            stdout_path=out,
            stderr_path=out,
        )
        try:
            ns = f"/proc/{child.pid}/ns/user"
            waited = time.monotonic() + _NS_WAIT_S
            while os.readlink(ns) == mine:
                if child.poll() is not None or time.monotonic() > waited:
                    said = out.read_text(errors="replace").strip()[-300:]
                    raise OSError(0, f"unshare --user did not make a namespace: {said}")
                time.sleep(0.0005)
            for kind, outside, inside in (
                ("uid", shown_as.uid, owner.uid),
                ("gid", shown_as.gid, owner.gid),
            ):
                with open(f"/proc/{child.pid}/{kind}_map", "w") as f:
                    f.write(f"{inside} {outside} 1\n")
            return os.open(ns, os.O_RDONLY | os.O_CLOEXEC)
        finally:
            child.kill_tree(grace_s=0)


def mount(tree: Path, owner: SandboxUser, shown_as: SandboxUser) -> IdMapped:
    """Attach a view of `tree` in which files of `owner` are `shown_as`'s, and what
    `shown_as` creates is `owner`'s on disk. Raises OSError (with the errno) when the kernel,
    the file system or this machine cannot."""
    parent = mounts_dir()
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(parent, 0o700)
    where = parent / f"{os.getpid()}-{secrets.token_hex(6)}"
    where.mkdir(mode=0o700)
    try:
        bind(tree, where, owner, shown_as)
    except BaseException:
        with contextlib.suppress(OSError):
            where.rmdir()
        raise
    return IdMapped(where, tree)


def bind(
    tree: Path, where: Path, owner: SandboxUser, shown_as: SandboxUser, *, read_only: bool = False
) -> None:
    """Mount `tree` (recursively) at the directory `where`, `owner` shown as `shown_as`
    (and read-only when asked): the one place the new mount API's syscalls are made.
    Raises OSError with the errno."""
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(0, f"no id-mapped mounts on {platform.machine()} here")
    open_tree, move_mount, mount_setattr = numbers
    libc = _libc()
    ns_fd = tree_fd = -1
    try:
        ns_fd = _userns(owner, shown_as)
        flags = _OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_RECURSIVE
        tree_fd = _check(libc.syscall(open_tree, _AT_FDCWD, os.fsencode(tree), flags), "open_tree")
        attr = _MountAttr(_MOUNT_ATTR_IDMAP | (_MOUNT_ATTR_RDONLY if read_only else 0), 0, 0, ns_fd)
        _check(
            libc.syscall(
                mount_setattr,
                tree_fd,
                b"",
                _AT_EMPTY_PATH | _AT_RECURSIVE,
                ctypes.byref(attr),
                ctypes.sizeof(attr),
            ),
            "mount_setattr(MOUNT_ATTR_IDMAP)",
        )
        _check(
            libc.syscall(
                move_mount, tree_fd, b"", _AT_FDCWD, os.fsencode(where), _MOVE_MOUNT_F_EMPTY_PATH
            ),
            "move_mount",
        )
    finally:
        for fd in (ns_fd, tree_fd):
            if fd >= 0:
                os.close(fd)


def unmount(path: Path) -> None:
    """Detach whatever is mounted at `path` (lazily); nothing mounted there is no error."""
    with contextlib.suppress(OSError):
        _check(_libc().umount2(os.fsencode(path), _MNT_DETACH), "umount2")


def mount_overlay(work_tree: Path, options: str) -> None:
    """Mount an overlay file system at `work_tree` with `options` (lowerdir=..., ...)."""
    _check(
        _libc().mount(b"overlay", os.fsencode(work_tree), b"overlay", 0, options.encode()),
        "mount overlay",
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers(*, dry_run: bool = False) -> list[Path]:
    """Views whose runner died before detaching them (named `<pid>-<token>`): detached."""
    parent = mounts_dir()
    try:
        names = [p for p in parent.iterdir() if not p.is_symlink()]
    except OSError:
        return []
    mounted = {Path(point) for point in files.mount_points()}
    removed: list[Path] = []
    for path in names:
        pid = path.name.split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        if not dry_run:
            if path in mounted:
                _detach(path)
            else:
                with contextlib.suppress(OSError):
                    path.rmdir()
        removed.append(path)
    return removed

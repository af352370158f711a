"""Opening a file that a record or a child's output goes to, never through a planted link.

A run dir may be writable by something the runner does not trust while the run goes on (a
DoD or an agent without the OS sandbox, another user of a shared output dir), and a path is
resolved again at every open: a symlink planted at a log's name mid-run would send the next
append wherever it points, and a hard link to another file would write into that file. So
every record file is opened here, under a descriptor of its directory: the name is opened
`O_NOFOLLOW` (and `O_NONBLOCK`, so a planted FIFO cannot hang the runner), and a symlink, a hard
link or anything but a regular file at the name is unlinked (by name, in that directory) and
a fresh file made in its place (`O_EXCL`). The planted link's target is never touched.

A device node is never removed: only root can plant one, and the name is far more likely the
machine's own (`/dev/null` given as an output path) than a trap. Opening one is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_TRIES = 8  # a name replaced again between our unlink and our create: try a few times


def real_dir(path: Path) -> Path:
    """`path` as a directory of the runner's: made if missing; a symlink or a file planted
    at its name is removed first (never followed). Its parents are taken as they are."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True)
        return path
    if not stat.S_ISDIR(info.st_mode):
        _refuse_device(path, info)
        path.unlink()
        path.mkdir(parents=True, exist_ok=True)
    return path


OWN_FDS = Path("/proc/self/fd")


def open_no_follow(path: Path, flags: int, mode: int = 0o644) -> int:
    """A descriptor for the regular file `path`, opened with `flags` (`O_WRONLY`, `O_APPEND`,
    `O_TRUNC`; `O_CREAT` is implied) relative to its directory, never through a link.

    The directory is taken as it is (the run's own subdirectories are made by `real_dir`,
    which replaces a link planted at their names). Raises OSError as `os.open` does.

    `/proc/self/fd/N` is this process's own descriptor (`proc.run`'s anonymous output
    files): nobody else can plant anything there, and it is opened through /proc."""
    if path.parent == OWN_FDS:
        return os.open(path, flags | os.O_CLOEXEC)
    try:
        dir_fd = os.open(path.parent, _DIR_FLAGS)
    except FileNotFoundError:  # made on first use only: most calls append to an open log's dir
        path.parent.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(path.parent, _DIR_FLAGS)
    try:
        flags |= os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO never blocks
        fd = _open_in(dir_fd, path.name, flags, mode)
    finally:
        os.close(dir_fd)
    os.set_blocking(fd, True)
    return fd


def _open_in(dir_fd: int, name: str, flags: int, mode: int) -> int:
    for _ in range(_TRIES):
        try:
            fd = os.open(name, flags, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EWOULDBLOCK):
                raise
            _remove(dir_fd, name)
            flags |= os.O_EXCL
            continue
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink <= 1:
            return fd
        os.close(fd)  # a hard link to another file, or a FIFO or device: not ours to write
        _remove(dir_fd, name)
        flags |= os.O_EXCL
    raise OSError(errno.EEXIST, f"{name} keeps being replaced; it was not written")


def _refuse_device(path: Path, info: os.stat_result) -> None:
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        raise OSError(
            errno.EINVAL,
            f"{path} is a device, not a file a record or an output can go to; "
            "give a regular file's path (or no path, to discard the output)",
        )


def _remove(dir_fd: int, name: str) -> None:
    try:
        _refuse_device(Path(name), os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        os.rmdir(name, dir_fd=dir_fd)  # only an empty one; a full one stays an error

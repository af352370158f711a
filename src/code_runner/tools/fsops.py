"""File access beneath the workspace that never follows a symlink.

The host-side tools run with the runner's privileges, so a path the agent names must not
lead anywhere outside the workspace, however the workspace was rigged before the call (a
symlink to `/etc/passwd`, a symlinked directory halfway down, a link swapped in between a
read and an edit). Every directory is opened from its parent's descriptor with
`O_NOFOLLOW | O_DIRECTORY`, the final file with `O_NOFOLLOW`, and what was opened is checked
with `fstat`, so there is no window between checking a path and using it. Writes go to a
temp file in the same directory and are renamed over the target: a hard link to a host file
is replaced, never written through. No fsync: the workspace is disposable, and the rename
alone is what keeps a reader from seeing half a file. A replaced file keeps its owner, and
a new file or directory takes its parent's, so a work tree handed to the sandbox's uid
stays writable by it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from code_runner.tools.base import ToolErrorCode

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755
SYMLINK_MESSAGE = "symlinks are not followed"


class FsError(Exception):
    """A refusal with the tool error code the agent should see."""

    def __init__(self, code: ToolErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class WriteOutcome:
    created: bool
    created_dirs: tuple[str, ...]


@contextlib.contextmanager
def workspace_root(workspace_dir: Path) -> Iterator[int]:
    """A descriptor for the workspace itself; refused if the workspace became a symlink."""
    try:
        fd = os.open(workspace_dir, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            message = f"the workspace is not a plain directory; {SYMLINK_MESSAGE}"
            raise FsError(ToolErrorCode.PERMISSION, message) from exc
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _classify(dir_fd: int, name: str, shown: str, exc: OSError) -> FsError:
    """Turn an open/stat failure on `name` into the error the agent sees."""
    if exc.errno == errno.ENOENT:
        return FsError(ToolErrorCode.NOT_FOUND, f"{shown} does not exist")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FsError(ToolErrorCode.PERMISSION, f"{shown}: permission denied")
    if exc.errno == errno.ENAMETOOLONG:
        return FsError(ToolErrorCode.PERMISSION, f"{shown}: name too long")
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR):
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return FsError(ToolErrorCode.NOT_FOUND, f"{shown} does not exist")
        if stat.S_ISLNK(st.st_mode):
            return FsError(ToolErrorCode.PERMISSION, f"{shown} is a symlink; {SYMLINK_MESSAGE}")
        if exc.errno == errno.EISDIR or stat.S_ISDIR(st.st_mode):
            return FsError(ToolErrorCode.NOT_A_FILE, f"{shown} is a directory, not a file")
        return FsError(ToolErrorCode.NOT_FOUND, f"{shown} is not a directory")
    raise exc


def _open_dir(root_fd: int, parts: list[str], *, create: bool) -> tuple[int, list[str]]:
    """Open the directory `parts` beneath `root_fd`; return (owned fd, dirs created)."""
    fd = os.dup(root_fd)
    created: list[str] = []
    try:
        for index, name in enumerate(parts):
            shown = "/".join(parts[: index + 1])
            try:
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise FsError(ToolErrorCode.NOT_FOUND, f"{shown} does not exist") from None
                # on a race, the O_NOFOLLOW open below decides what it is
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, NEW_DIR_MODE, dir_fd=fd)
                created.append(shown)
                try:
                    next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _classify(fd, name, shown, exc) from exc
                _inherit_owner(next_fd, os.fstat(fd))
            except OSError as exc:
                raise _classify(fd, name, shown, exc) from exc
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def _split(rel_path: str) -> tuple[list[str], str]:
    parts = rel_path.strip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):  # callers check first; never rely on it
        raise FsError(ToolErrorCode.PERMISSION, f"{rel_path}: only plain names, no . or ..")
    return parts[:-1], parts[-1]


def _check_regular(st: os.stat_result, rel_path: str) -> None:
    """FsError unless `st` (an lstat) is a regular file: a symlink, directory or other."""
    if stat.S_ISLNK(st.st_mode):
        raise FsError(ToolErrorCode.PERMISSION, f"{rel_path} is a symlink; {SYMLINK_MESSAGE}")
    if stat.S_ISDIR(st.st_mode):
        raise FsError(ToolErrorCode.NOT_A_FILE, f"{rel_path} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise FsError(ToolErrorCode.NOT_A_FILE, f"{rel_path} is not a regular file")


def read_regular(root_fd: int, rel_path: str, *, max_bytes: int) -> bytes:
    """The bytes of the regular file `rel_path`; TOO_LARGE beyond `max_bytes`."""
    dirs, name = _split(rel_path)
    dir_fd, _ = _open_dir(root_fd, dirs, create=False)
    try:
        try:
            # lstat first so that a FIFO or device is never even opened.
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            _check_regular(st, rel_path)
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise _classify(dir_fd, name, rel_path, exc) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise FsError(ToolErrorCode.NOT_A_FILE, f"{rel_path} is not a regular file")
            if st.st_size > max_bytes:
                raise FsError(
                    ToolErrorCode.TOO_LARGE,
                    f"{rel_path} is {st.st_size} bytes; the limit is {max_bytes} bytes",
                )
            chunks: list[bytes] = []
            total = 0
            while True:
                chunk = os.read(fd, 1024 * 1024)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise FsError(
                        ToolErrorCode.TOO_LARGE,
                        f"{rel_path} grew past the limit of {max_bytes} bytes while being read",
                    )
            return b"".join(chunks)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def write_regular(root_fd: int, rel_path: str, data: bytes) -> WriteOutcome:
    """Replace (or create) the regular file `rel_path` with `data`, atomically.

    Parent directories are created as needed, each without following a symlink. An
    existing file keeps its permission bits; a new one gets 0644.
    """
    dirs, name = _split(rel_path)
    dir_fd, created_dirs = _open_dir(root_fd, dirs, create=True)
    try:
        mode = NEW_FILE_MODE
        created = True
        owner = os.fstat(dir_fd)  # a new file takes its directory's owner
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _classify(dir_fd, name, rel_path, exc) from exc
        else:
            _check_regular(st, rel_path)
            mode = stat.S_IMODE(st.st_mode)
            owner = st
            created = False
        _replace(dir_fd, name, rel_path, data, mode, owner)
        return WriteOutcome(created=created, created_dirs=tuple(created_dirs))
    finally:
        os.close(dir_fd)


def _inherit_owner(fd: int, like: os.stat_result) -> None:
    """Give `fd` the owner of `like` when it differs (only root can, and only root needs to)."""
    if os.geteuid() != 0:
        return
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) != (like.st_uid, like.st_gid):
        os.fchown(fd, like.st_uid, like.st_gid)


def _replace(
    dir_fd: int, name: str, rel_path: str, data: bytes, mode: int, owner: os.stat_result
) -> None:
    temp = f".code-runner-{uuid.uuid4().hex[:16]}.tmp"
    fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            _inherit_owner(fd, owner)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        try:
            # rename never follows a symlink at the destination: it replaces the entry.
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except IsADirectoryError as exc:
            raise FsError(
                ToolErrorCode.NOT_A_FILE, f"{rel_path} is a directory, not a file"
            ) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise

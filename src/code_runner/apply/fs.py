"""Touching the user's work tree safely: the only code that writes into a source repo.

Every path is reached through directory file descriptors opened with `O_NOFOLLOW`, so a
symlink anywhere on the way (planted, or the user's own) stops the write instead of
redirecting it outside the repo. A file is replaced atomically (temp file in the same
directory, fchmod, fsync, rename), so each path is always in its prior state or its target
state, never torn. Directories are only ever created, or removed when empty.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner.errors import CodeRunnerError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK_BYTES = 1 << 20  # content is hashed, copied and compared in pieces, never whole


class UnsafePath(CodeRunnerError):
    """A path in the source cannot be touched safely (a symlink or a file on the way)."""

    exit_code = 3


class Kind(StrEnum):
    MISSING = "missing"
    FILE = "file"
    DIR = "dir"
    OTHER = "other"  # symlink, fifo, socket, device: never written, never replaced


@dataclass(frozen=True)
class FileState:
    """What one path holds: its kind, permission bits and content digest."""

    kind: Kind
    mode: int = 0
    sha256: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind.value, "mode": f"{self.mode:o}", "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileState:
        return cls(Kind(data["kind"]), int(str(data.get("mode") or "0"), 8), data["sha256"])

    @classmethod
    def of_bytes(cls, data: bytes, mode: int) -> FileState:
        return cls(Kind.FILE, mode, hashlib.sha256(data).hexdigest())


MISSING = FileState(Kind.MISSING)


def _split(rel: str) -> list[str]:
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        raise UnsafePath(f"{rel!r} is not a plain repo-relative path.")
    return parts


@contextlib.contextmanager
def _parent(root: Path, rel: str, *, create: bool) -> Iterator[int | None]:
    """A descriptor of `rel`'s directory, reached without following any symlink.

    Yields None when a directory on the way is missing and `create` is false.
    """
    parts = _split(rel)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                os.mkdir(part, 0o777, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise UnsafePath(
                        f"{rel}: {part!r} on the way is a symlink or a file, not a directory."
                    ) from exc
                raise
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def blob_digest(object_format: str, size: int) -> Any:
    """A running git blob id for `size` bytes of content (feed it the content in pieces)."""
    digest = hashlib.new(object_format)
    digest.update(b"blob %d\0" % size)
    return digest


def hashed(chunks: Iterable[bytes], *digests: Any) -> Iterator[bytes]:
    """`chunks`, unchanged, each also fed to every digest on its way through."""
    for chunk in chunks:
        for digest in digests:
            digest.update(chunk)
        yield chunk


def digest_file(path: Path, object_format: str | None = None) -> tuple[str, str | None]:
    """The sha256 of a private file (and its git blob id), read in pieces."""
    sha = hashlib.sha256()
    blob = blob_digest(object_format, path.stat().st_size) if object_format else None
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            sha.update(chunk)
            if blob is not None:
                blob.update(chunk)
    return sha.hexdigest(), blob.hexdigest() if blob is not None else None


def read_state(
    root: Path, rel: str, object_format: str | None = None
) -> tuple[FileState, str | None]:
    """The state of `root/rel` and, for a regular file when `object_format` is given, its git
    blob id. The content is hashed in pieces, never held whole."""
    with _parent(root, rel, create=False) as pfd:
        if pfd is None:
            return MISSING, None
        name = _split(rel)[-1]
        st = _lstat(name, pfd)
        if st is None:
            return MISSING, None
        if stat.S_ISDIR(st.st_mode):
            return FileState(Kind.DIR, stat.S_IMODE(st.st_mode)), None
        if not stat.S_ISREG(st.st_mode):
            return FileState(Kind.OTHER, stat.S_IMODE(st.st_mode)), None
        fd = os.open(name, _FILE_FLAGS, dir_fd=pfd)
        with os.fdopen(fd, "rb") as f:
            fst = os.fstat(f.fileno())
            mode = stat.S_IMODE(fst.st_mode)
            sha = hashlib.sha256()
            blob = blob_digest(object_format, fst.st_size) if object_format else None
            size = 0
            while chunk := f.read(CHUNK_BYTES):
                size += len(chunk)
                sha.update(chunk)
                if blob is not None:
                    blob.update(chunk)
    blob_id = None
    if blob is not None:  # a file that changed size while read matches no blob id
        blob_id = blob.hexdigest() if size == fst.st_size else "changed while read"
    return FileState(Kind.FILE, mode, sha.hexdigest()), blob_id


def file_chunks(root: Path, rel: str) -> Iterator[bytes]:
    """The bytes of the regular file `root/rel`, in pieces, reached without any symlink."""
    with _parent(root, rel, create=False) as pfd:
        if pfd is None:
            raise FileNotFoundError(rel)
        fd = os.open(_split(rel)[-1], _FILE_FLAGS, dir_fd=pfd)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UnsafePath(f"{rel} is not a regular file.")
            while chunk := f.read(CHUNK_BYTES):
                yield chunk


def put_file(root: Path, rel: str, data: bytes | Path, mode: int, *, tmp_name: str) -> None:
    """Make `root/rel` a regular file holding `data` (or the content of the private file
    `data`, copied in pieces) with `mode`, atomically."""
    with _parent(root, rel, create=True) as pfd:
        assert pfd is not None
        name = _split(rel)[-1]
        existing = _lstat(name, pfd)
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise UnsafePath(f"{rel} is a directory; refusing to replace it with a file.")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name, dir_fd=pfd)
        fd = os.open(
            tmp_name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=pfd,
        )
        try:
            with os.fdopen(fd, "wb") as f:
                if isinstance(data, Path):
                    with data.open("rb") as content:
                        shutil.copyfileobj(content, f, CHUNK_BYTES)
                else:
                    f.write(data)
                f.flush()
                os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
            os.replace(tmp_name, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name, dir_fd=pfd)
            raise
        os.fsync(pfd)


def remove_file(root: Path, rel: str) -> None:
    """Remove `root/rel` if it is there; never a directory, never through a symlink."""
    with _parent(root, rel, create=False) as pfd:
        if pfd is None:
            return
        name = _split(rel)[-1]
        st = _lstat(name, pfd)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{rel} is a directory; refusing to remove it.")
        os.unlink(name, dir_fd=pfd)
        os.fsync(pfd)


def remove_stray(root: Path, rel: str, tmp_name: str) -> None:
    """Remove a temp file a killed write may have left beside `rel`."""
    with contextlib.suppress(UnsafePath, OSError), _parent(root, rel, create=False) as pfd:
        if pfd is not None:
            os.unlink(tmp_name, dir_fd=pfd)


def remove_dir_if_empty(root: Path, rel: str) -> bool:
    with _parent(root, rel, create=False) as pfd:
        if pfd is None:
            return True
        name = _split(rel)[-1]
        try:
            os.rmdir(name, dir_fd=pfd)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                return False
            raise
        return True


def ensure_dir(root: Path, rel: str, mode: int) -> None:
    with _parent(root, rel, create=True) as pfd:
        assert pfd is not None
        name = _split(rel)[-1]
        st = _lstat(name, pfd)
        if st is None:
            os.mkdir(name, 0o700, dir_fd=pfd)
            os.chmod(name, mode, dir_fd=pfd)
        elif not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{rel} should be a directory but is not.")


def ancestors(paths: list[str]) -> list[str]:
    """Every directory above the given paths, shallowest first."""
    found: set[str] = set()
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            found.add("/".join(parts[:i]))
    return sorted(found, key=lambda p: (p.count("/"), p))

"""The place where files that must never be half-written are written.

A reader sees the old file or the new one, never a mix: write to a temp file in the same
directory, fsync, `os.replace`. Appends to JSONL logs are single `write` calls of whole lines.
Nothing here writes through a symlink: temp files are created `O_EXCL`, `os.replace` swaps
the name itself, and appends and reserves open with `O_NOFOLLOW`.

Lock files live here too: `flocked` (for a block), `wait_flock` and `try_flock`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from code_runner import proc
from code_runner.errors import DiskFull, RecordError

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextlib.contextmanager
def _disk_full_is_typed(path: Path) -> Iterator[None]:
    """ENOSPC / EDQUOT become `DiskFull` (an expected failure with a fix, not a bug)."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _FULL:
            raise DiskFull(path, os.strerror(exc.errno).lower()) from None
        raise


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace `path` with `data` atomically. `durable=False` skips the fsync: the file
    is still never torn for a reader or after a process crash, only after power loss."""
    atomic_write_chunks(path, (data,), mode=mode, durable=durable)


def atomic_write_chunks(
    path: Path, chunks: Iterable[bytes], *, mode: int = 0o644, durable: bool = True
) -> None:
    """`atomic_write_bytes` for content that comes in pieces (a large file, streamed)."""

    def fill(f: IO[bytes]) -> None:
        for chunk in chunks:
            f.write(chunk)

    atomic_write_from(path, fill, mode=mode, durable=durable)


def atomic_write_from(
    path: Path,
    fill: Callable[[IO[bytes]], object],
    *,
    max_bytes: int | None = None,
    mode: int = 0o644,
    durable: bool = True,
) -> int:
    """`atomic_write_bytes` for content a writer puts into the file itself (a process's
    stdout), so it never passes through memory; `max_bytes` cuts it there. Returns the
    size `fill` wrote, before any cut."""
    with _disk_full_is_typed(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                fill(f)
                f.flush()
                size = os.fstat(f.fileno()).st_size
                if max_bytes is not None and size > max_bytes:
                    f.truncate(max_bytes)
                if durable:
                    os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    return size


def read_chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of `path` in pieces of at most `size`, never all at once."""
    with path.open("rb") as f:
        while chunk := f.read(size):
            yield chunk


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8", "surrogateescape"), durable=durable)


# A file name that is not UTF-8 is a str with lone surrogates (`os.fsdecode`). Written raw
# they would make the file invalid UTF-8, and as JSON escapes no strict JSON reader (pydantic's
# included) accepts them; so each is written as the text git and Python show such a byte as:
# `\xff` for the byte 0xff (any other lone surrogate as `\udXXX`). Every JSON file written
# here is valid UTF-8 and reads back as the same text, whatever names it holds.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\\\u{code:04x}"


def _escape_surrogates(text: str) -> str:
    return _SURROGATE.sub(_shown, text)


def shown_name(name: str) -> str:
    """`name` as a record holds it: a byte that is not UTF-8 shown as `\\xff`."""
    if not _SURROGATE.search(name):
        return name
    shown = json.loads(_escape_surrogates(json.dumps(name, ensure_ascii=False)))
    assert isinstance(shown, str)
    return shown


# What a terminal or a text viewer would act on instead of showing: C0 controls but tab and
# newline (ESC starts every terminal escape), DEL, C1 controls (0x9b is a one-byte CSI), the
# bidirectional overrides, and the lone surrogates of names that are not UTF-8.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` safe to write into a file a person reads or `cat`s: every control character
    but tab and newline, and every lone surrogate, written as its escape (ESC as `\\x1b`)."""
    return _UNPRINTABLE.sub(_visible, text.replace("\r\n", "\n"))


def dumps(data: Any) -> str:
    """Stable JSON: sorted keys, so equal records are equal bytes; always valid UTF-8."""
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return _escape_surrogates(text) + "\n"


def atomic_write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    atomic_write_text(path, dumps(data), durable=durable)


_JSONL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)  # built once


def jsonl_line(data: Any) -> bytes:
    """`data` as one JSON line, valid UTF-8 (lone surrogates escaped, when there are any)."""
    line = _JSONL.encode(data) + "\n"
    try:
        return line.encode("utf-8")  # the common case: no lone surrogate, nothing to scan for
    except UnicodeEncodeError:
        return _escape_surrogates(line).encode("utf-8")


class JsonlLog:
    """A JSON-lines log held open, each line one `write`; a name replaced meanwhile (a link
    planted mid-run) is opened again as `append_jsonl` would (one `lstat` per line)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._held = (0, 0)  # (st_dev, st_ino) of the file held open
        self._close: Callable[[], None] = lambda: None

    def append(self, data: Any) -> bytes:
        raw = jsonl_line(data)
        with _disk_full_is_typed(self.path):
            if self._fd is not None and not self._still_named():
                self.close()
            if self._fd is None:
                self._fd = fd = proc.open_no_follow(self.path, os.O_WRONLY | os.O_APPEND)
                held = os.fstat(fd)
                self._held = (held.st_dev, held.st_ino)
                self._close = weakref.finalize(self, os.close, fd)
            os.write(self._fd, raw)
        return raw

    def _still_named(self) -> bool:
        with contextlib.suppress(OSError):
            named = os.lstat(self.path)
            return (named.st_dev, named.st_ino) == self._held
        return False

    def close(self) -> None:
        self._close()
        self._fd = None


def append_jsonl(path: Path, data: Any) -> bytes:
    """Append `data` as one JSON line; the bytes appended (a sealed log feeds its MAC)."""
    raw = jsonl_line(data)
    with _disk_full_is_typed(path):
        # never through a link planted where a log will be (a shared output dir, mid-run)
        fd = proc.open_no_follow(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, raw)
        finally:
            os.close(fd)
    return raw


def append_text(path: Path, text: str) -> None:
    """Append `text` to a log a person reads (verifier.log), never through a planted link."""
    with (
        _disk_full_is_typed(path),
        os.fdopen(proc.open_no_follow(path, os.O_WRONLY | os.O_APPEND), "ab") as f,
    ):
        f.write(text.encode("utf-8", "replace"))


def touch(path: Path) -> None:
    """Make `path` exist (empty if new), never through a planted link."""
    os.close(proc.open_no_follow(path, os.O_WRONLY))


def reserve(path: Path, size: int) -> None:
    """Hold `size` bytes of the disk in `path`, to be given back by `release_reserve` when
    the disk is full and a last write (a final status) must still succeed."""
    with _disk_full_is_typed(path):
        fd = proc.open_no_follow(path, os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            block = memoryview(b"\0" * size)  # real blocks: a sparse file reserves nothing
            while block:
                block = block[os.write(fd, block) :]  # a short write, then ENOSPC
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)


def release_reserve(path: Path) -> bool:
    """Give the reserved space back; True if there was any."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


class NotRegularFile(RecordError, OSError):
    """A FIFO, socket, device or directory where a record file belongs: an unreadable file to a
    reader that tolerates one (`except OSError`), a bad record (exit 5) to any other."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        RecordError.__init__(self, message, fix=fix)

    def __str__(self) -> str:
        return self.message


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file `path`, for reading a record back. Never blocks: a FIFO,
    socket, device or directory where a record file belongs is `NotRegularFile`, not a
    reader that waits forever for a writer. FileNotFoundError passes through."""
    with open_regular(path) as f:
        return f.read()


def open_regular(path: Path) -> IO[bytes]:
    """`path` opened for reading if it is a regular file (read it in pieces); as
    `read_regular`, anything else is `NotRegularFile` and FileNotFoundError passes through."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(
                f"{path} is not a regular file (a {_file_kind(mode)}); a run record holds only"
                " files the runner wrote.",
                fix="remove what was put there, or re-run the task for a new record.",
            )
        return os.fdopen(os.dup(fd), "rb")
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"


def read_jsonl(path: Path) -> list[Any]:
    """Every complete line of a JSONL file; a torn last line (crash mid-append) is skipped.
    Read line by line: a long transcript's bytes are never held beside what they parse to."""
    items: list[Any] = []
    try:
        f = open_regular(path)
    except FileNotFoundError:
        return items
    with f:
        for line in f:
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return items


def walk(top: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk` (top-down, prunable, symlinks not followed) without recursion.

    Python 3.11's `os.walk` recurses once per level, so an agent's 2,000-deep directory
    chain would crash the audit; this keeps an explicit stack instead.
    """
    stack = [str(top)]
    while stack:
        here = stack.pop()
        dirnames: list[str] = []
        filenames: list[str] = []
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    (dirnames if is_dir else filenames).append(entry.name)
        except OSError:
            continue
        yield here, dirnames, filenames
        stack.extend(os.path.join(here, name) for name in reversed(dirnames))


RECORD_SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".tools", "workspaces"})


def walk_records(top: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """`walk` in name order through the folders where run records may live, past version
    control, dependencies and workspaces; the caller may prune `dirnames` further."""
    for here, dirnames, filenames in walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in RECORD_SKIP_DIRS)
        filenames.sort()
        yield here, dirnames, filenames


def disk_usage(top: Path) -> int:
    """Bytes the files under `top` take on disk (allocated blocks; each inode once, symlinks
    not followed): what a run has written there, sparse files and hard links included."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(top)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def mount_points() -> list[str]:
    """Mount points of this mount namespace, octal escapes undone (none where /proc is
    absent)."""
    found: list[str] = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split(b" ")
            if len(fields) > 4:
                raw = fields[4].decode("unicode_escape").encode("latin-1")
                found.append(os.fsdecode(raw))
    return found


def mounts_below(path: Path) -> list[str]:
    """Mount points at or under `path` in this mount namespace (none where /proc is absent)."""
    real = os.path.realpath(path)
    prefix = real.rstrip("/") + "/"
    return [point for point in mount_points() if point == real or point.startswith(prefix)]


def force_rmtree(path: Path) -> None:
    """rmtree that also removes what an agent made unwritable. Never follows symlinks, and
    never deletes through a mount: a tree with a file system mounted in it is refused
    (OSError EBUSY), so a workspace's overlay or an id-mapped view of a repo is never
    emptied through its mount point."""

    def onerror(func: object, failed: str, exc: object) -> None:
        parent = os.path.dirname(failed)
        with contextlib.suppress(OSError):
            os.chmod(parent, 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    if path.is_symlink():
        path.unlink()
        return
    mounted = mounts_below(path)
    if mounted:
        raise OSError(
            errno.EBUSY,
            f"{path} was not removed: a file system is mounted at {mounted[0]}, and nothing is "
            "deleted through a mount (take it down first)",
        )
    try:
        shutil.rmtree(path, onerror=onerror)
    except RecursionError:  # a directory chain deeper than Python's stack: rm has no limit
        for argv in (
            ["chmod", "-R", "u+rwx", "--", str(path)],
            ["rm", "-rf", "--one-file-system", "--", str(path)],
        ):
            proc.capture(argv, cwd=None, env={"PATH": "/usr/bin:/bin"}, timeout_s=300)


def try_flock(fd: int, *, shared: bool = False) -> bool:
    """Take an flock on `fd` if no one holds one in the way; False if someone does."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def wait_flock(
    fd: int,
    *,
    shared: bool = False,
    timeout_s: float | None = None,
    poll_s: float = 0.05,
    held: Callable[[], BaseException] | None = None,
    waiting: Callable[[], None] | None = None,
) -> None:
    """Take an flock on `fd` (a shared lock on an fd that holds an exclusive one, or the
    reverse, converts it). With neither `timeout_s` nor `waiting` it blocks until the lock
    is free; otherwise it tries every `poll_s`, raises `held()` past `timeout_s` (None: no
    limit), and calls `waiting` between tries, which may raise to give up sooner."""
    if timeout_s is None and waiting is None:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)  # blocks until it is free
        return
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not try_flock(fd, shared=shared):
        if deadline is not None and time.monotonic() > deadline:
            raise held() if held else TimeoutError(f"lock held for over {timeout_s:.0f} s")
        if waiting is not None:
            waiting()
        time.sleep(poll_s)


def open_lock(path: Path, mode: int = 0o600) -> int:
    """The fd of the lock file at `path`, created if missing, never through a symlink."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


@contextlib.contextmanager
def flocked(
    path: Path,
    *,
    mode: int = 0o600,
    shared: bool = False,
    timeout_s: float | None = None,
    poll_s: float = 0.05,
    held: Callable[[], BaseException] | None = None,
    waiting: Callable[[], None] | None = None,
) -> Iterator[int]:
    """Hold an flock on the lock file at `path` for the block (see `wait_flock`); the lock
    goes when its fd is closed, at the end of the block or by a crash."""
    fd = open_lock(path, mode)
    try:
        wait_flock(
            fd, shared=shared, timeout_s=timeout_s, poll_s=poll_s, held=held, waiting=waiting
        )
        yield fd
    finally:
        os.close(fd)

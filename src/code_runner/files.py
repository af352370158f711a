"""The place where files that must never be half-written are written.

A reader sees the old file or the new one, never a mix: write to a temp file in the same
directory, fsync, `os.replace`. Appends to JSONL logs are single `write` calls of whole lines.
Nothing here writes through a symlink: temp files are created `O_EXCL`, `os.replace` swaps
the name itself, and appends and reserves open with `O_NOFOLLOW`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from code_runner import proc
from code_runner.errors import DiskFull

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
    with _disk_full_is_typed(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


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


def append_jsonl(path: Path, data: Any) -> bytes:
    """Append `data` as one JSON line; the bytes appended (a sealed log feeds its MAC)."""
    line = _escape_surrogates(json.dumps(data, sort_keys=True, ensure_ascii=False, default=str))
    raw = (line + "\n").encode("utf-8", "surrogateescape")
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


def read_jsonl(path: Path) -> list[Any]:
    """Every complete line of a JSONL file; a torn last line (crash mid-append) is skipped."""
    items: list[Any] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return items
    for line in raw.splitlines():
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


def force_rmtree(path: Path) -> None:
    """rmtree that also removes what an agent made unwritable. Never follows symlinks."""

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
    try:
        shutil.rmtree(path, onerror=onerror)
    except RecursionError:  # a directory chain deeper than Python's stack: rm has no limit
        for argv in (["chmod", "-R", "u+rwx", "--", str(path)], ["rm", "-rf", "--", str(path)]):
            proc.capture(argv, cwd=None, env={"PATH": "/usr/bin:/bin"}, timeout_s=300)

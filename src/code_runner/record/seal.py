"""The record's seal: an HMAC of each file that `result`, `apply` and `replay` trust.

The output dir may be shared or writable by others, so a record's bytes prove nothing by
themselves: a failed run's result.json and patch can be rewritten with a matching
`patch_sha256`, and a status or an event can be edited to tell another story. The runner
keys an HMAC-SHA256 with a 0600 file in its state dir that only its user can read, and
stores the MAC of result.json, request.json, the patch, the transcript, status.json and
events.jsonl in `{task_id}.seal.json` beside them, with one MAC over all of them, refreshed
by `RunRecord` at every write (events.jsonl's MAC is fed line by line as events are
appended, so sealing it never rereads the file). The writer keeps its seal in a `Sealer`:
the seal after an event or a status is written by a thread of its own, so a turn never waits
on the rename (and a burst of events, a turn's, is one write); a durable file (the request,
the patch, the result, the last status) waits for it and is sealed and synced before the
write returns.
A reader checks the files it relies on (`verify`); a missing seal, or a file whose bytes
no longer match its MAC, is a `RecordError` (exit 5) that names the file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from code_runner import dirs, files
from code_runner.errors import RecordError
from code_runner.record.paths import RecordPaths

KEY_NAME = "record.key"
KEY_BYTES = 32
SEAL_VERSION = 2  # 2: status and events sealed, and one MAC over all the MACs
# A live run's seal is written at most this long after the change it covers: the changes of
# a burst (a turn's events) become one write, so a turn does not rewrite the seal per event
LIVE_SEAL_DELAY_S = 0.05
SEALED = (
    "result.json",
    "request.json",
    "patch",
    "transcript.jsonl",
    "status.json",
    "events.jsonl",
)
_FIX = (
    "re-run the task to get a record the runner wrote; never trust an edited one (records are "
    "sealed with the key in the state dir of the user who ran them)."
)


def key_path() -> Path:
    return dirs.state_dir() / KEY_NAME


def _key() -> bytes:
    """The runner user's record key: created once, 0600, never through a symlink."""
    path = key_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not os.path.lexists(path):
        _make_key(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or len(key) != KEY_BYTES:
        raise RecordError(
            f"the record key {path} is not a {KEY_BYTES}-byte file readable only by you.",
            fix=f"remove {path} (a new one is made; records sealed with the old one are then "
            "refused) and re-run.",
        )
    return key


def _make_key(path: Path) -> None:
    """Write a new key beside `path` and link it into place: the key appears whole or not at
    all, so a run starting at the same moment never reads a half-written one; when several
    make one at once, the first link wins and every process uses that key."""
    draft = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
    finally:
        os.unlink(draft)


def _prefix(task_id: str, name: str) -> bytes:
    return b"\0".join([b"code-runner-record", task_id.encode(), name.encode(), b""])


def _mac(key: bytes, task_id: str, name: str, data: bytes) -> str:
    return hmac.new(key, _prefix(task_id, name) + data, hashlib.sha256).hexdigest()


def mac(task_id: str, name: str, data: bytes) -> str:
    """The MAC of one record file's bytes, as the writer seals them."""
    return _mac(_key(), task_id, name, data)


def stream(task_id: str, name: str) -> hmac.HMAC:
    """The MAC of a file that grows by appends (events.jsonl), fed as it is written:
    `update` it with each appended line; its `hexdigest` is the file's MAC."""
    return hmac.new(_key(), _prefix(task_id, name), hashlib.sha256)


def _read(path: Path) -> bytes | None:
    """The bytes of the regular file `path`; None when it is missing, a link or not a file
    (a FIFO planted there never blocks the reader)."""
    chunks = _chunks(path)
    return None if chunks is None else b"".join(chunks)


def _file_mac(key: bytes, task_id: str, name: str, path: Path) -> str | None:
    """The MAC of the regular file `path`, read in pieces (a patch may be large); None as
    for `_read`."""
    chunks = _chunks(path)
    if chunks is None:
        return None
    digest = hmac.new(key, _prefix(task_id, name), hashlib.sha256)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def _chunks(path: Path) -> Iterator[bytes] | None:
    """The pieces of the regular file `path`; None as for `_read`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a directory
        os.close(fd)
        return None
    return _pieces(os.fdopen(fd, "rb"))


def _pieces(f: BinaryIO) -> Iterator[bytes]:
    with f:
        while chunk := f.read(1 << 20):
            yield chunk


def _top(key: bytes, task_id: str, macs: Mapping[str, str]) -> str:
    """One MAC over every file's: entries from different seals cannot be mixed."""
    listed = json.dumps(dict(sorted(macs.items())), sort_keys=True).encode()
    return _mac(key, task_id, "seal.json", listed)


def write(
    paths: RecordPaths, macs: Mapping[str, str], *, durable: bool = True, key: bytes | None = None
) -> None:
    """Write the seal holding `macs` (kept by the record's writer, never read back)."""
    data = {
        "seal_version": SEAL_VERSION,
        "macs": dict(sorted(macs.items())),
        "mac": _top(_key() if key is None else key, paths.task_id, macs),
    }
    files.atomic_write_json(paths.seal, data, durable=durable)


def refresh(
    paths: RecordPaths, macs: dict[str, str], names: Iterable[str], *, key: bytes | None = None
) -> None:
    """Recompute into `macs` the MACs of `names` from their files (a missing one drops)."""
    key = _key() if key is None else key
    for name in names:
        found = _file_mac(key, paths.task_id, name, paths.file(name))
        if found is None:
            macs.pop(name, None)
        else:
            macs[name] = found


class Sealer:
    """One record's seal as its writer keeps it: the MACs in memory (never read back), the
    key read once, and `seal.json` rewritten after every change.

    A change made with `queued=True` (a live run's event or status) is written by one thread
    of the sealer's own, at most `LIVE_SEAL_DELAY_S` after it, so the run goes on while the
    rename happens: the changes made meanwhile (a turn's events) join the write already
    waiting, one write for the burst. Any other change (a finished record's, the request,
    the patch, the result, a terminal status) hurries the waiting write, waits for it, then
    is written, and synced when durable, before the call returns: the seal on disk then
    covers every byte the writer wrote. A background write that failed (a full disk) raises
    from the next call, as it would have from its own; a process killed with a write waiting
    leaves the seal behind its events, as a kill between an append and its seal always
    could, and `gc` reseals the record as it finishes it."""

    def __init__(self, paths: RecordPaths, macs: Mapping[str, str] | None = None) -> None:
        self.paths = paths
        self.key = _key()
        self.macs = dict(macs or {})
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # `macs` and `_waiting`, between the run and the writer
        self._waiting = False  # a background write is asked for and has not read `macs` yet
        self._hurry = threading.Event()  # set while a caller waits for the background write
        self._pending: Future[None] | None = None
        self._failed: BaseException | None = None

    def mac(self, name: str, data: bytes) -> str:
        return _mac(self.key, self.paths.task_id, name, data)

    def stream(self, name: str) -> hmac.HMAC:
        """As `stream`, with the key already read."""
        return hmac.new(self.key, _prefix(self.paths.task_id, name), hashlib.sha256)

    def refresh(self, names: Iterable[str]) -> None:
        """The MACs of `names` recomputed from their files (not written yet)."""
        refresh(self.paths, self.macs, names, key=self.key)

    def update(
        self, name: str, file_mac: str, *, durable: bool = True, queued: bool = False
    ) -> None:
        """`name`'s MAC is now `file_mac`: the seal is rewritten (see the class)."""
        self._raise_failure()
        if not queued or durable:
            self.flush()
            self.macs[name] = file_mac
            write(self.paths, self.macs, durable=durable, key=self.key)
            return
        with self._lock:
            self.macs[name] = file_mac
            if self._waiting:
                return  # the write waiting will read this change too
            self._waiting = True
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seal")
        self._pending = self._pool.submit(self._write_queued)

    def _write_queued(self) -> None:
        self._hurry.wait(LIVE_SEAL_DELAY_S)
        with self._lock:
            self._waiting = False
            macs = dict(self.macs)
        try:
            write(self.paths, macs, durable=False, key=self.key)
        except BaseException as exc:  # raised in the writer's thread, by its next call
            self._failed = exc

    def flush(self) -> None:
        """Wait until the seal on disk holds every change made so far."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._hurry.set()
            try:
                pending.result()
            finally:
                self._hurry.clear()
        self._raise_failure()

    def close(self) -> None:
        """Flush, and end the sealer's thread (a later change starts another)."""
        try:
            self.flush()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def _raise_failure(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed


def seal(paths: RecordPaths, names: Iterable[str] = SEALED) -> None:
    """Refresh the MACs of `names` in the seal on disk (a missing file drops its MAC)."""
    macs = load(paths) or {}
    refresh(paths, macs, names)
    write(paths, macs)


def load(paths: RecordPaths) -> dict[str, str] | None:
    """The MACs of a seal the runner wrote; None when there is none, or it was edited."""
    raw = _read(paths.seal)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        macs, top = data["macs"], data["mac"]
    except (ValueError, KeyError, TypeError):
        return None
    if data.get("seal_version") != SEAL_VERSION or not isinstance(macs, dict):
        return None
    found = {str(k): str(v) for k, v in macs.items()}
    if not hmac.compare_digest(str(top), _top(_key(), paths.task_id, found)):
        return None
    return found


def verify(paths: RecordPaths, names: Iterable[str]) -> None:
    """RecordError naming the first of `names` that is not as the runner wrote it.

    A name whose file is absent passes when the seal has no MAC for it either."""
    macs = load(paths)
    if macs is None:
        raise RecordError(
            f"the run record in {paths.output_dir} has no valid seal ({paths.seal.name}), so "
            f"its {paths.task_id}.* files cannot be shown to be the runner's.",
            fix=_FIX,
        )
    key = _key()
    for name in names:
        path = paths.file(name)
        found = _file_mac(key, paths.task_id, name, path)
        expected = macs.get(name)
        if found is None and expected is None:
            continue
        if found is None or expected is None:
            what = "was not written by the run"
            if found is None:
                what = "is missing" if not os.path.lexists(path) else "is not a regular file"
            raise RecordError(f"the record file {path} {what}.", fix=_FIX)
        if not hmac.compare_digest(expected, found):
            raise RecordError(
                f"the record file {path} was changed after the run (its seal does not match).",
                fix=_FIX,
            )


def verify_record_of(result_path: Path, names: Iterable[str] = SEALED) -> None:
    """`verify` for the record a `TASK.result.json` belongs to."""
    task_id = result_path.name.removesuffix(".result.json")
    verify(RecordPaths(result_path.parent, task_id), names)


__all__ = [
    "SEALED",
    "Sealer",
    "key_path",
    "load",
    "mac",
    "refresh",
    "seal",
    "stream",
    "verify",
    "verify_record_of",
    "write",
]

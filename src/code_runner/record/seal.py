"""The record's seal: an HMAC of each file that `result`, `apply` and `replay` trust.

The output dir may be shared or writable by others, so a record's bytes prove nothing by
themselves: a failed run's result.json and patch can be rewritten with a matching
`patch_sha256`. The runner keys an HMAC-SHA256 with a 0600 file in its state dir that only
its user can read, and stores the MAC of result.json, request.json, the patch and the
transcript in `{task_id}.seal.json` beside them, refreshed by `RunRecord` at every write.
A reader checks the files it relies on (`verify`); a missing seal, or a file whose bytes
no longer match its MAC, is a `RecordError` (exit 5) that names the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Iterable
from pathlib import Path

from code_runner import dirs, files
from code_runner.errors import RecordError
from code_runner.record.paths import RecordPaths

KEY_NAME = "record.key"
KEY_BYTES = 32
SEAL_VERSION = 1
SEALED = ("result.json", "request.json", "patch", "transcript.jsonl")
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
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
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


def _mac(key: bytes, task_id: str, name: str, data: bytes) -> str:
    message = b"\0".join([b"code-runner-record", task_id.encode(), name.encode(), data])
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def seal(paths: RecordPaths, names: Iterable[str] = SEALED) -> None:
    """Refresh the MACs of `names` (a missing file drops its MAC)."""
    key = _key()
    macs = _load(paths) or {}
    for name in names:
        data = _read(paths.file(name))
        if data is None:
            macs.pop(name, None)
        else:
            macs[name] = _mac(key, paths.task_id, name, data)
    files.atomic_write_json(paths.seal, {"seal_version": SEAL_VERSION, "macs": macs})


def _load(paths: RecordPaths) -> dict[str, str] | None:
    raw = _read(paths.seal)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        macs = data["macs"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(macs, dict):
        return None
    return {str(k): str(v) for k, v in macs.items()}


def verify(paths: RecordPaths, names: Iterable[str]) -> None:
    """RecordError naming the first of `names` that is not as the runner wrote it.

    A name whose file is absent passes when the seal has no MAC for it either."""
    macs = _load(paths)
    if macs is None:
        raise RecordError(
            f"the run record in {paths.output_dir} has no valid seal ({paths.seal.name}), so "
            f"its {paths.task_id}.* files cannot be shown to be the runner's.",
            fix=_FIX,
        )
    key = _key()
    for name in names:
        path = paths.file(name)
        data = _read(path)
        expected = macs.get(name)
        if data is None and expected is None:
            continue
        if data is None or expected is None:
            what = "is missing" if data is None else "was not written by the run"
            raise RecordError(f"the record file {path} {what}.", fix=_FIX)
        if not hmac.compare_digest(expected, _mac(key, paths.task_id, name, data)):
            raise RecordError(
                f"the record file {path} was changed after the run (its seal does not match).",
                fix=_FIX,
            )


def verify_record_of(result_path: Path, names: Iterable[str] = SEALED) -> None:
    """`verify` for the record a `TASK.result.json` belongs to."""
    task_id = result_path.name.removesuffix(".result.json")
    verify(RecordPaths(result_path.parent, task_id), names)


__all__ = ["SEALED", "key_path", "seal", "verify", "verify_record_of"]

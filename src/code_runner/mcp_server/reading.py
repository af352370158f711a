"""Everything the server reads from a run's record, in one place.

A task run's record is read only here (status.json while it runs, result.json and the
patch once it ended, the checked `FinishedRun` for apply and reject), and so is an
experiment's. What goes back to a client is a plain JSON-able dict, built from the record,
never from what a process printed.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from code_runner import files
from code_runner.record.finished import FinishedRun
from code_runner.record.finished import load as load_finished
from code_runner.record.finished import locked as locked_finished
from code_runner.record.paths import RecordPaths
from code_runner.record.result import load_result
from code_runner.record.writer import RunRecord

MAX_PATCH_HEAD_BYTES = 256 * 1024  # what an answer holds of a patch
PATCH_PIECE_BYTES = 1 << 20

_STATUS_KEYS = ("state", "terminal", "step", "round", "max_rounds", "best_score", "updated_at")
_RESULT_KEYS = (
    "status",
    "reason",
    "dod_passed",
    "error",
    "rounds",
    "max_rounds",
    "best_score",
    "best_round",
    "base",
    "changed_files",
    "source_unchanged",
    "source_differences",
    "patch_bytes",
    "patch_applies_on_base",
    "decision",
    "source_patch_applied",
    "source_dod_passed",
    "source_commit",
    "duration_s",
)


def _json_object(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def task_status(output_dir: Path, task_id: str) -> dict[str, Any] | None:
    """The run's state from status.json; None before the run wrote one."""
    status = _json_object(RecordPaths(output_dir, task_id).status)
    if status is None:
        return None
    return {key: status.get(key) for key in _STATUS_KEYS}


def has_result(output_dir: Path, task_id: str) -> bool:
    return RecordPaths(output_dir, task_id).result.is_file()


def task_result(output_dir: Path, task_id: str) -> dict[str, Any] | None:
    """The verdict, the patch and every mismatch of an ended run; None without result.json."""
    paths = RecordPaths(output_dir, task_id)
    if not paths.result.is_file():
        return None
    result = load_result(paths.result).to_json()  # RecordError names a damaged file
    view = {key: result.get(key) for key in _RESULT_KEYS}
    view["verdict"] = _verdict(result)
    view["mismatches"] = _mismatches(result)
    view.update(_patch(paths))
    view["record_files"] = result.get("record_files") or {}
    return view


def _verdict(result: dict[str, Any]) -> dict[str, Any] | None:
    """The DoD verdict of the round whose patch was kept (else the last round's)."""
    rounds = [r for r in result.get("round_details") or [] if isinstance(r, dict)]
    best = result.get("best_round")
    chosen = [r for r in rounds if r.get("round") == best] or rounds[-1:]
    if not chosen:
        return None
    verdict = chosen[0].get("verdict")
    return verdict if isinstance(verdict, dict) else None


def _mismatches(result: dict[str, Any]) -> dict[str, Any]:
    """Where the worker's word, the allowlist or the source disagree with the evidence."""
    contract = result.get("result_contract")
    claims = contract.get("mismatches", []) if isinstance(contract, dict) else []
    return {
        "claim_vs_evidence": claims,
        "claimed_status": contract.get("claimed_status") if isinstance(contract, dict) else None,
        "dropped_changes": result.get("dropped_changes") or [],
        "safety_violations": result.get("safety_violations") or [],
        "source_differences": result.get("source_differences") or [],
    }


def _patch(paths: RecordPaths) -> dict[str, Any]:
    """The patch's head (at most MAX_PATCH_HEAD_BYTES, cut at a whole character), and the
    whole file's size and sha256, read in pieces: a large patch is never held whole, and
    the answer stays small; a client reads the rest from `patch_path`."""
    digest, size, head = hashlib.sha256(), 0, b""
    try:
        for piece in files.read_chunks(paths.patch, PATCH_PIECE_BYTES):
            if len(head) < MAX_PATCH_HEAD_BYTES:
                head += piece[: MAX_PATCH_HEAD_BYTES - len(head)]
            digest.update(piece)
            size += len(piece)
    except OSError:
        return {"patch": "", "patch_truncated": False, "patch_path": None}
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    truncated = size > len(head)
    return {
        "patch": decoder.decode(head, final=not truncated),
        "patch_truncated": truncated,
        "patch_path": str(paths.patch),
        "patch_bytes": size,
        "patch_sha256": digest.hexdigest(),
    }


def finished_run(output_dir: Path) -> FinishedRun:
    """The checked record apply and reject act on (`RecordError` when it is not whole)."""
    return load_finished(output_dir)


def locked_run(output_dir: Path) -> contextlib.AbstractContextManager[FinishedRun]:
    """`finished_run` under the record's lock, as `code-runner apply` takes it."""
    return locked_finished(output_dir)


def reopened(run: FinishedRun) -> RunRecord:
    """The run's record, reopened for the events an apply or a rejection appends."""
    return RunRecord.reopen(run.paths)


def experiment_status(record_dir: Path) -> dict[str, Any] | None:
    return _json_object(record_dir / "status.json")


def experiment_result(record_dir: Path) -> dict[str, Any] | None:
    return _json_object(record_dir / "result.json")


def tail(path: Path, chars: int = 2000) -> str:
    """The end of a log: only its last `chars` bytes are read, however long it grew."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - chars))
            data = f.read(chars)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


__all__ = [
    "experiment_result",
    "experiment_status",
    "finished_run",
    "has_result",
    "reopened",
    "tail",
    "task_result",
    "task_status",
]

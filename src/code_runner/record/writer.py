"""The run record: the files in `output_dir` that say what happened, written as it happens.

`RunRecord` is the only writer of a record's events, status and result. Every state change
is one event in `{task_id}.events.jsonl` and a fresh `{task_id}.status.json`; every whole
file is written atomically. The state machine lives in `state`: states are an Enum and the
allowed transitions are one table. A finished record is reopened (`reopen`) to append what
happened to it later (an apply, a reject, a repair) with its sequence numbers continued, and
`gc` finishes a dead run's record through `mark_abandoned`."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import code_runner.record.seal as seal
from code_runner import clock, files
from code_runner.errors import CodeRunnerError, IllegalTransition, LockHeld, RecordError
from code_runner.events import EventKind
from code_runner.record.paths import RecordPaths, hunk_chunks
from code_runner.record.result import RunResult
from code_runner.record.state import TERMINAL_STATES, TRANSITIONS, Reason, ResultStatus, RunState

SCHEMA_VERSION = 1  # of status.json (result.json has its own, in `result`)
RESERVE_BYTES = 64 * 1024  # a terminal status, a result and a few events, on any disk


Listener = Callable[[EventKind, dict[str, Any]], None]


class RunRecord:
    """Writes one run's record. Also the run's `EventSink`: tools and agents report here."""

    def __init__(self, paths: RecordPaths, run_id: str, *, max_rounds: int) -> None:
        self.paths = paths
        self.run_id = run_id
        self.max_rounds = max_rounds
        self.state = RunState.PENDING
        self.round = 0
        self.best_score = 0.0
        self.step = ""
        self.usage: dict[str, Any] | None = None  # the run's model usage so far, when reported
        self.pid = os.getpid()  # the run's process (a reopened record keeps the run's)
        self._seq = 0
        self._listeners: list[Listener] = []
        self._started = time.monotonic()
        self.finished = False  # a terminal status is on disk
        self._lock_fd: int | None = None  # held by the run that writes this record
        self._seal = seal.Sealer(paths)  # the seal as this writer made it, never read back
        self._events_mac = self._seal.stream("events.jsonl")
        self._events = files.JsonlLog(paths.events)  # opened at the first event, held open

    @classmethod
    def open(cls, output_dir: Path, task_id: str, run_id: str, *, max_rounds: int) -> RunRecord:
        """A new record for one run. LockHeld (exit 3) while another run writes one for the
        same task id in `output_dir`. What an earlier run left is removed first, names only:
        a symlink planted in a shared output dir is unlinked, never followed."""
        output_dir.mkdir(parents=True, exist_ok=True)
        paths = RecordPaths(output_dir, task_id)
        record = cls(paths, run_id, max_rounds=max_rounds)
        record._lock_fd = take_lock(paths)
        try:
            for suffix in _RUN_FILES:
                paths.file(suffix).unlink(missing_ok=True)
            if paths.agent_dir.is_symlink():
                paths.agent_dir.unlink()
            shutil.rmtree(paths.agent_dir, ignore_errors=True)
            files.reserve(paths.reserve, RESERVE_BYTES)  # DiskFull: no room for a run
        except BaseException:
            record.close()
            raise
        try:
            record.write_status()
        except CodeRunnerError as exc:  # DiskFull: the reserve filled the disk
            record.give_up(exc.message)
            raise
        return record

    def close(self) -> None:
        """Let another run write a record for this task id here (the lock goes), once the
        seal on disk holds every change."""
        try:
            # a seal the disk refused leaves the record as a kill would: `gc` reseals it
            with contextlib.suppress(CodeRunnerError):
                self._seal.close()
        finally:
            self._events.close()
            self._close_lock()

    def _close_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @classmethod
    def reopen(cls, paths: RecordPaths) -> RunRecord:
        """An existing record, to append to: `seq` continues, elapsed time and round are kept.

        Raises `RecordError` when its status.json cannot be read."""
        try:
            status = json.loads(files.read_regular(paths.status))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise RecordError(
                f"the run record's {paths.status} cannot be read ({exc}).",
                fix="pass the output_dir of a run; re-run the task if its record was damaged.",
            ) from None
        try:
            record = cls(paths, str(status["run_id"]), max_rounds=int(status["max_rounds"]))
            record.state = RunState(status["state"])
            record.round = int(status.get("round") or 0)
            record.best_score = float(status.get("best_score") or 0.0)
            record.step = str(status.get("step") or "")
            usage = status.get("usage")
            record.usage = dict(usage) if isinstance(usage, dict) else None
            pid = status.get("pid")
            record.pid = pid if isinstance(pid, int) else record.pid
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(
                f"the run record's {paths.status} is not a run status ({exc!r} is wrong).",
                fix="pass the output_dir of a run; re-run the task if its record was damaged.",
            ) from None
        record._seal.macs = seal.load(paths) or {}
        with contextlib.suppress(FileNotFoundError):
            for chunk in files.read_chunks(paths.events):
                record._events_mac.update(chunk)
        events = [e for e in files.read_jsonl(paths.events) if isinstance(e, dict)]
        record._seq = max((e["seq"] for e in events if isinstance(e.get("seq"), int)), default=0)
        elapsed = [e["elapsed_s"] for e in events if isinstance(e.get("elapsed_s"), int | float)]
        record._started -= max(elapsed, default=0.0)
        return record

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def mark_abandoned(self, why: str) -> bool:
        """Finish a record whose process died: state `abandoned`, and a result saying so when
        the run wrote none. False (and nothing written) when the record is already final."""
        if self.terminal:
            return False
        # the space the run held for its last words: on a full disk they are ours now
        files.release_reserve(self.paths.reserve)
        self.transition(RunState.ABANDONED, step=f"gc: {why}")
        if not self.paths.result.exists():
            self.write_result(
                RunResult(
                    run_id=self.run_id,
                    task_id=self.paths.task_id,
                    status=ResultStatus.ABANDONED,
                    reason=Reason.ABANDONED,
                    dod_passed=False,
                    error=f"the run's process died ({why}); gc removed its workspace",
                    worktree_removed=True,
                )
            )
        return True

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # --- EventSink ---------------------------------------------------------------------

    def emit(self, kind: EventKind, /, **data: object) -> None:
        self._seq += 1
        event: dict[str, Any] = {
            "seq": self._seq,
            "ts": clock.utc_now(),
            "elapsed_s": round(time.monotonic() - self._started, 3),
            "run_id": self.run_id,
            "kind": kind.value,
            "round": self.round,
            **data,
        }
        self._events_mac.update(self._events.append(event))
        self._seal.update(
            "events.jsonl",
            self._events_mac.copy().hexdigest(),
            durable=False,
            queued=not self.terminal,  # a live run's turn never waits on the seal's rename
        )
        for listener in self._listeners:
            listener(kind, event)

    # --- state -------------------------------------------------------------------------

    def transition(self, new: RunState, *, step: str = "", **data: object) -> None:
        if new is not self.state and new not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"illegal run state change {self.state} -> {new}")
        old = self.state
        self.state = new
        self.step = step
        self.emit(
            EventKind.STATE_CHANGED, from_state=old.value, to_state=new.value, step=step, **data
        )
        self.write_status()

    def set_round(self, index: int) -> None:
        self.round = index
        self.write_status()

    def set_best(self, score: float) -> None:
        self.best_score = score
        self.write_status()

    def _write_sealed(
        self, name: str, data: Any, *, durable: bool = True, queued: bool = False
    ) -> None:
        """A JSON file of the record, and its MAC from the very bytes written."""
        raw = files.dumps(data).encode("utf-8", "surrogateescape")
        files.atomic_write_bytes(self.paths.file(name), raw, durable=durable)
        self._seal.update(name, self._seal.mac(name, raw), durable=durable, queued=queued)

    def set_usage(self, usage: dict[str, Any]) -> None:
        """The run's model usage and cost so far, shown by `status` and `watch`."""
        self.usage = dict(usage)
        self.write_status()

    def write_status(self) -> None:
        self._write_sealed(
            "status.json",
            {
                "schema_version": SCHEMA_VERSION,
                "run_id": self.run_id,
                "task_id": self.paths.task_id,
                "state": self.state.value,
                "terminal": self.state in TERMINAL_STATES,
                "step": self.step,
                "round": self.round,
                "max_rounds": self.max_rounds,
                "best_score": self.best_score,
                "updated_at": clock.utc_now(),
                "pid": self.pid,
                **({"usage": self.usage} if self.usage is not None else {}),
            },
            durable=self.state in TERMINAL_STATES,  # rewritten often; the last one is synced
            queued=True,  # a terminal status is durable, so never queued
        )
        if self.state in TERMINAL_STATES:
            self.finished = True
            files.release_reserve(self.paths.reserve)

    def give_up(self, error: str) -> None:
        """The run cannot finish its record (the disk is full): give back the reserved
        space and write what must be there, a terminal `error` status and, if none was
        written, a result saying why. Anything that still fails is left to `gc`."""
        files.release_reserve(self.paths.reserve)
        old, self.state, self.step = self.state, RunState.ERROR, f"record: {error}"
        with contextlib.suppress(CodeRunnerError):
            self.emit(EventKind.STATE_CHANGED, from_state=old.value, to_state="error", step=error)
        with contextlib.suppress(CodeRunnerError):
            self.write_status()
            if not self.paths.result.exists():
                self.write_result(
                    RunResult(
                        run_id=self.run_id,
                        task_id=self.paths.task_id,
                        status=ResultStatus.ERROR,
                        reason=Reason.DISK_FULL,
                        dod_passed=False,
                        error=error,
                    )
                )

    # --- artifacts ---------------------------------------------------------------------

    def write_request(self, request: dict[str, Any]) -> None:
        self._write_sealed("request.json", request)

    def append_round(self, details: dict[str, Any]) -> None:
        files.append_jsonl(self.paths.rounds, details)

    def append_response(self, round_index: int, text: str) -> None:
        previous = ""
        if self.paths.response.exists():
            previous = self.paths.response.read_text(errors="replace")
        shown = files.printable(text.rstrip())  # the agent's text, without terminal escapes
        block = f"## round {round_index}\n{shown}\n\n" if text.strip() else ""
        files.atomic_write_text(self.paths.response, previous + block, durable=False)

    def copy_patch(self, patch: Path, review: Path, *, title: str) -> tuple[str, int]:
        """The patch and its review page from files, streamed: (sha256, size) of the patch."""
        digest, size = hashlib.sha256(), 0
        mac = self._seal.stream("patch")

        def counted() -> Iterator[bytes]:
            nonlocal size
            for chunk in files.read_chunks(patch):
                digest.update(chunk)
                mac.update(chunk)
                size += len(chunk)
                yield chunk

        files.atomic_write_chunks(self.paths.patch, counted())
        files.atomic_write_chunks(self.paths.hunk, hunk_chunks(self.paths.task_id, title, review))
        self._seal.update("patch", mac.hexdigest())
        return digest.hexdigest(), size

    def write_result(self, result: RunResult) -> None:
        """result.json, sealed with the transcript as it stands (the run's last words)."""
        self._seal.refresh(["transcript.jsonl"])  # the agent's, as it stands
        self._write_sealed("result.json", result.to_json())


# what a run writes in its output dir; a new run of the task id removes them first
_RUN_FILES = (
    "status.json",
    "events.jsonl",
    "rounds.jsonl",
    "response.txt",
    "result.json",
    "patch",
    "hunk.md",
    "verifier.log",
    "run.json",
    "result.md",
    "eval.md",
    "skill-review.md",
    "terminal.log",
    "tmux.json",
    "stop",
    "transcript.jsonl",
    "reserve",
    "seal.json",
    "request.json",
)


def being_written(paths: RecordPaths) -> bool:
    """Whether a live process (a run, an apply, a reject) holds the record's lock. Read-only:
    the lock file is never created. A run killed by SIGKILL holds nothing, so its record,
    not terminal, is being written by no one until `code-runner gc` marks it abandoned."""
    try:
        fd = os.open(paths.lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return not files.try_flock(fd, shared=True)
    finally:
        os.close(fd)  # closing releases a shared lock taken here


def take_lock(paths: RecordPaths) -> int:
    """An exclusive flock on `{task_id}.lock`, never through a symlink; LockHeld if taken.

    A run holds it while it writes its record, and an apply or a reject while it decides
    on it: neither starts while the other goes on."""
    try:
        fd = files.open_lock(paths.lock, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise LockHeld(
            f"{paths.lock} is a symlink, not a run lock; it was not followed.",
            fix=f"remove {paths.lock} (someone planted it) or use an output_dir only you write.",
        ) from None
    if not files.try_flock(fd):
        os.close(fd)
        raise LockHeld(
            f"another run, apply or reject of task {paths.task_id!r} is writing its record in "
            f"{paths.output_dir} ({paths.lock} is held).",
            fix="wait for it to finish (`code-runner watch` follows a run), then try again; a "
            "new run can take another output_dir or task_id.",
        ) from None
    return fd

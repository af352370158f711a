"""The run record: the files in `output_dir` that say what happened, written as it happens.

Every state change is one event in `{task_id}.events.jsonl` and a fresh
`{task_id}.status.json`; every whole file is written atomically. The state machine lives
here: states are an Enum and the allowed transitions are one table.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner import fsx
from code_runner.errors import CodeRunnerError
from code_runner.events import EventKind

SCHEMA_VERSION = 1
RESERVE_BYTES = 64 * 1024  # a terminal status, a result and a few events, on any disk


class RunState(StrEnum):
    PENDING = "pending"
    PREPARING = "preparing"
    BASELINE = "baseline"  # round 0: is the DoD already satisfied?
    AGENT = "agent"
    AUDITING = "auditing"
    VERIFYING = "verifying"
    EXPORTING = "exporting"
    APPLYING = "applying"  # complete-task mode: landing the patch in the source
    RELEASING = "releasing"
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"  # the process died; set by `gc`


TERMINAL_STATES = frozenset(
    {RunState.PASSED, RunState.FAILED, RunState.ERROR, RunState.INTERRUPTED, RunState.ABANDONED}
)

_WORKING = {
    RunState.PREPARING,
    RunState.BASELINE,
    RunState.AGENT,
    RunState.AUDITING,
    RunState.VERIFYING,
    RunState.EXPORTING,
    RunState.APPLYING,
    RunState.RELEASING,
}
_ENDINGS = {RunState.FAILED, RunState.ERROR, RunState.INTERRUPTED}

TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset({RunState.PREPARING, *_ENDINGS}),
    RunState.PREPARING: frozenset({RunState.BASELINE, RunState.RELEASING, *_ENDINGS}),
    RunState.BASELINE: frozenset({RunState.AGENT, RunState.EXPORTING, RunState.RELEASING}),
    RunState.AGENT: frozenset({RunState.AUDITING, RunState.EXPORTING, RunState.RELEASING}),
    RunState.AUDITING: frozenset({RunState.VERIFYING, RunState.EXPORTING, RunState.RELEASING}),
    RunState.VERIFYING: frozenset({RunState.AGENT, RunState.EXPORTING, RunState.RELEASING}),
    RunState.EXPORTING: frozenset({RunState.APPLYING, RunState.RELEASING}),
    RunState.APPLYING: frozenset({RunState.RELEASING}),
    RunState.RELEASING: frozenset({RunState.PASSED, *_ENDINGS}),
    **{state: frozenset() for state in TERMINAL_STATES},
}
# A crash or signal can end a run from any working state.
for _state in _WORKING:
    TRANSITIONS[_state] = TRANSITIONS[_state] | {RunState.ERROR, RunState.INTERRUPTED}
for _state in _WORKING | {RunState.PENDING}:
    TRANSITIONS[_state] = TRANSITIONS[_state] | {RunState.ABANDONED}


class ResultStatus(StrEnum):
    PASSED = "passed"
    ALREADY_SATISFIED = "already_satisfied"
    FAILED = "failed"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"


class Reason(StrEnum):
    """Why a run ended. Stable codes for machines; the `error` field carries the words."""

    DOD_PASSED = "dod_passed"
    ALREADY_SATISFIED = "already_satisfied"
    DOD_FAILED = "dod_failed"
    NO_ALLOWED_CHANGES = "no_allowed_changes"
    RUN_TIMEOUT = "run_timeout"
    AGENT_ERROR = "agent_error"
    AGENT_TIMEOUT = "agent_timeout"  # an agent CLI went silent or overran its time; killed
    BLOCKED_NEEDS_DECISION = "blocked_needs_decision"  # credentials, approval, context...
    STOPPED = "stopped"  # `code-runner stop` ended the run
    BUDGET_EXHAUSTED = "budget_exhausted"
    # a model backend's budgets, one code each (the run keeps its best patch so far)
    BUDGET_TURNS = "budget_turns"
    BUDGET_TOKENS = "budget_tokens"
    BUDGET_COST = "budget_cost"
    BUDGET_WALL_CLOCK = "budget_wall_clock"
    SAFETY_VIOLATION = "safety_violation"
    SOURCE_CHANGED = "source_changed"
    PATCH_INVALID = "patch_invalid"
    INTERRUPTED = "interrupted"
    WORKSPACE_ERROR = "workspace_error"
    INTERNAL_ERROR = "internal_error"
    DISK_FULL = "disk_full"  # the record could not be written
    ABANDONED = "abandoned"
    # complete-task mode: the isolated DoD passed, landing the patch in the source did not
    APPLY_REFUSED = "apply_refused"  # the source was not in a state to take it; untouched
    SOURCE_DOD_FAILED = "source_dod_failed"  # applied, but the DoD failed in the source
    APPLY_FAILED = "apply_failed"  # writing, committing or rolling back went wrong


class IllegalTransition(CodeRunnerError):
    exit_code = 70


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class RecordPaths:
    output_dir: Path
    task_id: str

    def file(self, suffix: str) -> Path:
        return self.output_dir / f"{self.task_id}.{suffix}"

    @property
    def reserve(self) -> Path:
        """Disk space held while the run works, so its last status fits on a full disk."""
        return self.file("reserve")

    @property
    def request(self) -> Path:
        return self.file("request.json")

    @property
    def status(self) -> Path:
        return self.file("status.json")

    @property
    def events(self) -> Path:
        return self.file("events.jsonl")

    @property
    def rounds(self) -> Path:
        return self.file("rounds.jsonl")

    @property
    def response(self) -> Path:
        return self.file("response.txt")

    @property
    def result(self) -> Path:
        return self.file("result.json")

    @property
    def patch(self) -> Path:
        return self.file("patch")

    @property
    def hunk(self) -> Path:
        return self.file("hunk.md")

    @property
    def verifier_log(self) -> Path:
        return self.file("verifier.log")

    @property
    def run_info(self) -> Path:
        """Who ran what where: backend, command line (secrets redacted), sandbox posture."""
        return self.file("run.json")

    @property
    def result_md(self) -> Path:
        """The normalized result (SUCCESS / PARTIAL / BLOCKED_NEEDS_DECISION / FAILED)."""
        return self.file("result.md")

    @property
    def eval_md(self) -> Path:
        """Scope, diff, proof and ownership review of the run."""
        return self.file("eval.md")

    @property
    def terminal_log(self) -> Path:
        """What an agent CLI's tmux pane showed (`--tmux` runs)."""
        return self.file("terminal.log")

    @property
    def tmux_info(self) -> Path:
        """Socket and session of the live tmux pane, for `code-runner attach`."""
        return self.file("tmux.json")

    @property
    def stop_request(self) -> Path:
        """Written by `code-runner stop`; the runner polls for it."""
        return self.file("stop")

    @property
    def agent_dir(self) -> Path:
        """An agent CLI's prompts and raw output, one set of files per round."""
        return self.file("agent")

    @property
    def apply_journal(self) -> Path:
        """The apply step's journal: prior state of every source path it touches."""
        return self.file("apply.json")

    @property
    def apply_dir(self) -> Path:
        """Saved prior bytes (`prior/N`) and moved DoD byproducts of the apply step."""
        return self.file("apply")

    @property
    def transcript(self) -> Path:
        """Every model request and response of the run (model backends only)."""
        return self.file("transcript.jsonl")


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
        self._seq = 0
        self._listeners: list[Listener] = []
        self._started = time.monotonic()
        self.finished = False  # a terminal status is on disk

    @classmethod
    def open(cls, output_dir: Path, task_id: str, run_id: str, *, max_rounds: int) -> RunRecord:
        output_dir.mkdir(parents=True, exist_ok=True)
        paths = RecordPaths(output_dir, task_id)
        # a record is one run: clear what a previous run with this task id left here
        for suffix in (
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
            "terminal.log",
            "tmux.json",
            "stop",
            "transcript.jsonl",
            "reserve",
        ):
            path = paths.file(suffix)
            if path.exists():
                path.unlink()
        shutil.rmtree(paths.agent_dir, ignore_errors=True)
        record = cls(paths, run_id, max_rounds=max_rounds)
        fsx.reserve(paths.reserve, RESERVE_BYTES)  # DiskFull: no room for a run; none made
        try:
            record.write_status()
        except CodeRunnerError as exc:  # DiskFull: the reserve filled the disk
            record.give_up(exc.message)
            raise
        return record

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # --- EventSink ---------------------------------------------------------------------

    def emit(self, kind: EventKind, /, **data: object) -> None:
        self._seq += 1
        event: dict[str, Any] = {
            "seq": self._seq,
            "ts": utc_now(),
            "elapsed_s": round(time.monotonic() - self._started, 3),
            "run_id": self.run_id,
            "kind": kind.value,
            "round": self.round,
            **data,
        }
        fsx.append_jsonl(self.paths.events, event)
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

    def write_status(self) -> None:
        fsx.atomic_write_json(
            self.paths.status,
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
                "updated_at": utc_now(),
                "pid": os.getpid(),
            },
            durable=self.state in TERMINAL_STATES,  # rewritten often; the last one is synced
        )
        if self.state in TERMINAL_STATES:
            self.finished = True
            fsx.release_reserve(self.paths.reserve)

    def give_up(self, error: str) -> None:
        """The run cannot finish its record (the disk is full): give back the reserved
        space and write what must be there, a terminal `error` status and, if none was
        written, a result saying why. Anything that still fails is left to `gc`."""
        fsx.release_reserve(self.paths.reserve)
        old, self.state, self.step = self.state, RunState.ERROR, f"record: {error}"
        with contextlib.suppress(CodeRunnerError):
            self.emit(EventKind.STATE_CHANGED, from_state=old.value, to_state="error", step=error)
        with contextlib.suppress(CodeRunnerError):
            self.write_status()
            if not self.paths.result.exists():
                fsx.atomic_write_json(
                    self.paths.result,
                    {
                        "schema_version": SCHEMA_VERSION,
                        "run_id": self.run_id,
                        "task_id": self.paths.task_id,
                        "status": ResultStatus.ERROR.value,
                        "reason": Reason.DISK_FULL.value,
                        "dod_passed": False,
                        "error": error,
                    },
                )

    # --- artifacts ---------------------------------------------------------------------

    def write_request(self, request: dict[str, Any]) -> None:
        fsx.atomic_write_json(self.paths.request, request)

    def append_round(self, details: dict[str, Any]) -> None:
        fsx.append_jsonl(self.paths.rounds, details)

    def append_response(self, round_index: int, text: str) -> None:
        previous = ""
        if self.paths.response.exists():
            previous = self.paths.response.read_text(errors="replace")
        block = f"## round {round_index}\n{text.rstrip()}\n\n" if text.strip() else ""
        fsx.atomic_write_text(self.paths.response, previous + block, durable=False)

    def write_patch(self, patch: bytes, review: str) -> str:
        fsx.atomic_write_bytes(self.paths.patch, patch)
        fsx.atomic_write_text(self.paths.hunk, review)
        return hashlib.sha256(patch).hexdigest()

    def write_result(self, result: dict[str, Any]) -> None:
        fsx.atomic_write_json(self.paths.result, {"schema_version": SCHEMA_VERSION, **result})


def hunk_markdown(task_id: str, title: str, review: str) -> str:
    """The human review page for a patch: stat and full diff, rendered with `--text`."""
    body = review if review.strip() else "(no changes)\n"
    return f"# {task_id}: {title}\n\n```diff\n{body.rstrip()}\n```\n"

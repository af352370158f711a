"""Answers to an experiment's alerts from outside its terminal: `code-runner answer RUN_DIR
OPTION` and the dashboard's buttons.

A request is a file in the run dir's `answers/` folder, named after what it answers (the
alert's kind and check number, or `now-ID` for a kill or an adjustment given while no alert
waits) and created exclusively: a second request for the same alert (a double click, a
retried POST, a second terminal) finds the first and changes nothing. The running monitor
looks for new requests every half second, hands each once to the same dialogue a typed
answer goes to, and writes what it did beside it (`NAME.done.json`). The record keeps every
answer with how it came (`cli`, `web`) and who sent it.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_runner import files
from code_runner.clock import utc_now
from code_runner.errors import EnvironmentProblem, UsageError
from code_runner.monitor.alerts import Action, AlertKind, choose, options_for
from code_runner.monitor.dialogue import Dialogue, Reply, Situation, Voice
from code_runner.monitor.record import ExperimentRecord
from code_runner.monitor.stop import is_monitor

ANSWERS_DIR = "answers"
POLL_S = 0.5  # the monitor looks for new requests at least this often
DONE_SUFFIX = ".done.json"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")


@dataclass(frozen=True)
class AnswerTicket:
    """One request: its name, whether this call made it, and what the monitor did (once done)."""

    name: str
    option: str
    alert: str | None
    fresh: bool
    outcome: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.outcome is not None


def answers_dir(run_dir: Path) -> Path:
    return run_dir / ANSWERS_DIR


def who() -> str:
    """The user and process that sent an answer, as the record names them."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user} (pid {os.getpid()})"


def _pending(status: dict[str, Any]) -> tuple[AlertKind, int] | None:
    kind, check_no = status.get("pending_alert"), status.get("pending_check_no")
    if kind not in AlertKind.__members__ or not isinstance(check_no, int):
        return None
    return AlertKind(str(kind)), check_no


def request_answer(
    run_dir: Path,
    option: str,
    *,
    via: str,
    settings: str = "",
    alert: str | None = None,
    by: str | None = None,
) -> AnswerTicket:
    """Ask the monitor of `run_dir` to act on `option` (A-D, or an action's name).

    `alert` names the alert the person saw (`KIND-CHECK`, as the dashboard shows it); without
    it the answer goes to the alert waiting now. The same answer to the same alert, asked
    again, returns the first request's ticket: nothing is asked twice."""
    if not (run_dir / "status.json").is_file() or not (run_dir / "spec.json").is_file():
        raise UsageError(
            f"{run_dir} holds no experiment record (no status.json and spec.json).",
            fix="give the --run-dir of a running `code-runner exec`.",
        )
    record = ExperimentRecord.reopen(run_dir)
    status = record.read_status()
    pending = _pending(status)
    pending_name = f"{pending[0].value}-{pending[1]}" if pending else None
    target = alert or pending_name
    action = _action(option, _kind_of(target) if target else None)
    if target is not None and (earlier := read_ticket(run_dir, f"{target}-{action.value}")):
        return earlier
    state = str(status.get("state", "?"))
    if record.result_path.exists() or status.get("finished"):
        raise UsageError(f"the experiment in {run_dir} has already finished ({state}).")
    if not is_monitor(status.get("monitor_pid")):
        raise EnvironmentProblem(
            f"the experiment in {run_dir} is not finished ({state}), but its monitor is gone: "
            "nobody would read the answer.",
            fix="run `code-runner stop RUN_DIR` (its watchdog ends it) or `code-runner gc`.",
        )
    if alert is not None and (pending is None or _kind_of(alert) is not pending[0]):
        raise UsageError(f"{alert} is no longer waiting for an answer; nothing was done.")
    if action is Action.ADJUST and not settings.strip():
        raise UsageError(
            "option C (adjust) needs the new settings, e.g. --set 'timeout=2h stall_checks=6'."
        )
    name = f"{target}-{action.value}" if target else f"now-{uuid.uuid4().hex[:12]}"
    body = {
        "option": option,
        "settings": settings,
        "alert": target,
        "via": via,
        "by": by or who(),
        "requested_at": utc_now(),
    }
    return _create(run_dir, name, body, option)


def _kind_of(alert: str) -> AlertKind:
    kind, _, check_no = alert.rpartition("-")
    if kind not in AlertKind.__members__ or not check_no.isdigit():
        raise UsageError(f"not an alert: {alert!r} (expected KIND-CHECK_NO, e.g. DIVERGED-4)")
    return AlertKind(kind)


def _action(option: str, kind: AlertKind | None) -> Action:
    if kind is not None:
        action = choose(kind, option)
        if action is None:
            keys = ", ".join(f"{o.key} ({o.label})" for o in options_for(kind))
            raise UsageError(f"{option!r} is not an answer to {kind.value}: choose {keys}.")
        return action
    any_time = {"b": Action.KILL, "kill": Action.KILL, "c": Action.ADJUST, "adjust": Action.ADJUST}
    found = any_time.get(option.strip().lower())
    if found is None:
        raise UsageError(
            f"no alert is waiting for an answer, so {option!r} means nothing now; "
            "B (kill) and C (adjust, with --set) work at any time."
        )
    return found


def _create(run_dir: Path, name: str, body: dict[str, Any], option: str) -> AnswerTicket:
    folder = answers_dir(run_dir)
    folder.mkdir(exist_ok=True)
    temporary = folder / f".{name}.{uuid.uuid4().hex}.tmp"
    files.atomic_write_json(temporary, body)
    try:
        os.link(temporary, folder / f"{name}.json")  # exclusive: the first request wins
    except FileExistsError:
        earlier = read_ticket(run_dir, name)
        assert earlier is not None
        return earlier
    finally:
        temporary.unlink(missing_ok=True)
    return AnswerTicket(name, option, body["alert"], fresh=True)


def read_ticket(run_dir: Path, name: str) -> AnswerTicket | None:
    """The request `name` as made earlier, with its outcome once the monitor acted."""
    if not _NAME.match(name):
        return None
    body = _read(answers_dir(run_dir) / f"{name}.json")
    if body is None:
        return None
    outcome = _read(answers_dir(run_dir) / f"{name}{DONE_SUFFIX}")
    alert = body.get("alert")
    return AnswerTicket(
        name, str(body.get("option", "")), alert if isinstance(alert, str) else None, False, outcome
    )


def wait_for_outcome(run_dir: Path, ticket: AnswerTicket, wait_s: float) -> AnswerTicket:
    """The ticket once the monitor has acted on it, or as it is after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        current = read_ticket(run_dir, ticket.name)
        if current is not None and current.done:
            return AnswerTicket(
                ticket.name, ticket.option, ticket.alert, ticket.fresh, current.outcome
            )
        if time.monotonic() >= deadline:
            return ticket
        time.sleep(0.05)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(files.read_regular(path))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Inbox:
    """The monitor's side: each request in `answers/` handed to the dialogue exactly once."""

    def __init__(self, run_dir: Path) -> None:
        self.folder = answers_dir(run_dir)
        self.seen: set[str] = set()

    def take(self, dialogue: Dialogue, now: Situation) -> list[Reply]:
        """Answer every new request; what each asks of the command, for the loop to do."""
        try:
            names = sorted(
                p.name[: -len(".json")]
                for p in self.folder.iterdir()
                if p.name.endswith(".json") and not p.name.endswith(DONE_SUFFIX)
            )
        except OSError:
            return []
        replies = []
        for name in names:
            if name in self.seen or not _NAME.match(name):
                continue
            self.seen.add(name)
            if (self.folder / f"{name}{DONE_SUFFIX}").exists():
                continue  # answered by an earlier monitor of this run
            replies.append(self._answer(name, dialogue, now))
        return replies

    def _answer(self, name: str, dialogue: Dialogue, now: Situation) -> Reply:
        body = _read(self.folder / f"{name}.json") or {}
        voice = Voice(str(body.get("via", "run dir"))[:20], str(body.get("by", ""))[:120])
        option, alert = str(body.get("option", ""))[:40], body.get("alert")
        pending = dialogue.pending
        waiting = pending is not None and str(alert).startswith(f"{pending.kind.value}-")
        if alert is not None and not waiting:
            said = [f"{alert} is no longer waiting for an answer; nothing was done."]
            self._done(name, option, acted=False, said=said, answers=0)
            return None
        before = len(dialogue.answers)
        reply = dialogue.hear(option, now, voice)
        said = list(dialogue.said)
        if dialogue.awaiting_adjust:  # option C: the settings follow at once
            reply = dialogue.hear(str(body.get("settings", "")), now, voice)
            said += dialogue.said
        self._done(name, option, acted=True, said=said, answers=len(dialogue.answers) - before)
        return reply

    def _done(self, name: str, option: str, *, acted: bool, said: list[str], answers: int) -> None:
        files.atomic_write_json(
            self.folder / f"{name}{DONE_SUFFIX}",
            {
                "option": option,
                "acted": acted and answers > 0,
                "said": said,
                "answered_at": utc_now(),
            },
        )


__all__ = [
    "ANSWERS_DIR",
    "POLL_S",
    "AnswerTicket",
    "Inbox",
    "read_ticket",
    "request_answer",
    "wait_for_outcome",
    "who",
]

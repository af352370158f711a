"""The buttons: each runs the same `code-runner` command a person would type, in a process
of its own, and shows its output.

A decision on a task run is `code-runner apply [--check | --commit]` or `code-runner reject`
on the run's result file; a stop is `code-runner stop`. Going through the CLI means the same
checks, the same record writes and the same idempotence: a second `apply` of an applied run
is refused by the command, not by the page. One action per run runs at a time, so a double
click waits for the first and then gets the command's own answer.

An exec run is stopped as `code-runner stop RUN_DIR` stops it: the request is written in the
run dir, and its monitor (SIGTERM, as for Ctrl-C) or watchdog ends the command's tree and
finishes the record, naming the dashboard as the one who asked.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from code_runner import proc
from code_runner.errors import CodeRunnerError
from code_runner.monitor.answers import request_answer, wait_for_outcome, who
from code_runner.monitor.stop import request_stop
from code_runner.record import RecordPaths
from code_runner.web.text import clean

ACTION_TIMEOUT_S = 3600.0
TASK_ACTIONS: dict[str, tuple[str, ...]] = {
    "check": ("apply", "--check"),
    "apply": ("apply",),
    "commit": ("apply", "--commit"),
    "reject": ("reject", "--reason", "rejected in the dashboard"),
    "stop": ("stop", "--wait", "30"),
}
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


_VERDICTS = {  # (action, exit code) -> what the page says first
    ("check", 0): "applies cleanly and the DoD would pass; nothing was changed",
    ("check", 1): "the DoD would fail on the source's HEAD; nothing was changed",
    ("apply", 0): "applied; the DoD passed in the source",
    ("commit", 0): "applied and committed; the DoD passed in the source",
    ("apply", 1): "not applied: the DoD failed in the source",
    ("commit", 1): "not applied: the DoD failed in the source",
    ("reject", 0): "rejected",
    ("stop", 0): "stopped",
    ("answer", 0): "answered: the monitor acted on it",
    ("answer", 124): "sent, but the monitor has not acted yet",
    ("answer again", 0): "already answered: nothing changed",
    ("continue", 0): "approved: the paused commit is adopted; resume to go on",
    ("redo", 0): "approved: the item will run again; resume to go on",
    ("changes", 0): "approved: the protected change is accepted; resume to go on",
    ("amend", 0): "amended: a new revision of the plan",
    ("cancel", 0): "cancelled",
    ("resume", 0): "resumed",
    ("export", 0): "exported",
}
ANSWER_WAIT_S = 5.0


@dataclass(frozen=True)
class ActionOutput:
    command: str
    exit_code: int
    output: str
    action: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def verdict(self) -> str:
        """One line for a person; the command's own output follows it."""
        default = "done" if self.ok else "refused: see the output below"
        return _VERDICTS.get((self.action, self.exit_code), default)


def lock(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="100")
    env.pop("FORCE_COLOR", None)
    return env


def task_action(name: str, paths: RecordPaths) -> ActionOutput:
    """Run the command behind button `name` on a task run (KeyError for an unknown one)."""
    words = TASK_ACTIONS[name]
    target = paths.result if words[0] != "stop" else paths.status  # this task, not a neighbour
    argv = [sys.executable, "-m", "code_runner", words[0], str(target), *words[1:]]
    with lock(str(paths.file(""))):
        done = proc.capture(argv, cwd=None, env=environment(), timeout_s=ACTION_TIMEOUT_S)
    text = (done.stdout + done.stderr).decode("utf-8", errors="replace")
    shown = " ".join(["code-runner", words[0], *words[1:], paths.output_dir.name])
    return ActionOutput(shown, done.exit_code, clean(text), name)


def stop_exec(run_dir: Path, by: str) -> ActionOutput:
    """`code-runner stop RUN_DIR`: the request is recorded, then the monitor gets SIGTERM (or,
    with the monitor gone, the watchdog ends the run); the record says it came from here."""
    shown = f"stop {run_dir.name}"
    try:
        asked = request_stop(run_dir, via="web", by=by)
    except CodeRunnerError as exc:
        fix = f"\n{exc.fix}" if exc.fix else ""
        return ActionOutput(clean(shown), exc.exit_code, clean(exc.message + fix))
    if asked.already_finished:
        return ActionOutput(clean(shown), 0, f"already finished ({clean(asked.state)})")
    how = "SIGTERM to its monitor" if asked.by == "monitor" else "its watchdog ends it"
    return ActionOutput(clean(shown), 0, f"stop requested ({how}, pid {asked.pid})")


def answer_exec(run_dir: Path, option: str, alert: str, settings: str, by: str) -> ActionOutput:
    """An alert's answer, through the run dir as `code-runner answer` sends it."""
    shown = f"answer {run_dir.name} {option}" + (f" --alert {alert}" if alert else "")
    try:
        ticket = request_answer(
            run_dir, option, via="web", settings=settings, alert=alert or None, by=by
        )
    except CodeRunnerError as exc:
        fix = f"\n{exc.fix}" if exc.fix else ""
        return ActionOutput(clean(shown), exc.exit_code, clean(exc.message + fix), "answer")
    first = "" if ticket.fresh else f"{ticket.name} was already answered; nothing changed.\n"
    ticket = wait_for_outcome(run_dir, ticket, ANSWER_WAIT_S)
    said = "\n".join(str(line) for line in (ticket.outcome or {}).get("said") or [])
    code = 0 if ticket.done else 124
    name = "answer" if ticket.fresh else "answer again"
    return ActionOutput(clean(shown), code, clean(first + said), name)


__all__ = [
    "TASK_ACTIONS",
    "ActionOutput",
    "answer_exec",
    "environment",
    "lock",
    "stop_exec",
    "task_action",
    "who",
]

"""The buttons: each runs the same `code-runner` command a person would type, in a process
of its own, and shows its output.

A decision on a task run is `code-runner apply [--check | --commit]` or `code-runner reject`
on the run's result file; a stop is `code-runner stop`. Going through the CLI means the same
checks, the same record writes and the same idempotence: a second `apply` of an applied run
is refused by the command, not by the page. One action per run runs at a time, so a double
click waits for the first and then gets the command's own answer.

An exec run is stopped as Ctrl-C stops it: SIGTERM to its monitor, which ends the command's
tree and finishes the record.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil

from code_runner import proc
from code_runner.record import RecordPaths
from code_runner.web.catalog import read_json
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
}


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


def _lock(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="100")
    env.pop("FORCE_COLOR", None)
    return env


def task_action(name: str, paths: RecordPaths) -> ActionOutput:
    """Run the command behind button `name` on a task run (KeyError for an unknown one)."""
    words = TASK_ACTIONS[name]
    target = paths.result if words[0] != "stop" else paths.status  # this task, not a neighbour
    argv = [sys.executable, "-m", "code_runner", words[0], str(target), *words[1:]]
    with _lock(str(paths.file(""))):
        done = proc.capture(argv, cwd=None, env=_env(), timeout_s=ACTION_TIMEOUT_S)
    text = (done.stdout + done.stderr).decode("utf-8", errors="replace")
    shown = " ".join(["code-runner", words[0], *words[1:], paths.output_dir.name])
    return ActionOutput(shown, done.exit_code, clean(text), name)


def _is_monitor(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        process = psutil.Process(pid)
        command = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return process.status() != psutil.STATUS_ZOMBIE and (
        "code_runner" in command or "code-runner" in command
    )


def stop_exec(run_dir: Path) -> ActionOutput:
    """SIGTERM to the run's monitor (as Ctrl-C), which stops the command and writes the record."""
    status = read_json(run_dir / "status.json")
    pid = status.get("monitor_pid")
    shown = f"stop {run_dir.name}"
    if status.get("finished"):
        return ActionOutput(shown, 0, f"already finished ({clean(str(status.get('state')))})")
    if not _is_monitor(pid):
        return ActionOutput(shown, 3, "its monitor is gone; `code-runner gc` finishes the record")
    assert isinstance(pid, int)
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError) as exc:
        return ActionOutput(shown, 3, f"could not signal the monitor: {exc}")
    return ActionOutput(shown, 0, f"stop requested (SIGTERM to the monitor, pid {pid})")


__all__ = ["TASK_ACTIONS", "ActionOutput", "stop_exec", "task_action"]

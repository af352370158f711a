"""The plan page's buttons: each runs the `code-runner plan` command a person would type.

The gate actions (approve `--continue`, `--redo`, `--changes`; `amend` from an uploaded
plan file; `cancel`) are user actions in the plan store: the page gives each button an
action id when it is rendered, and the same id against the same state replays the saved
outcome, so a double click or a retried POST changes nothing twice. `resume` starts the plan's
run in a session of its own (it outlives the request, and the dashboard) and answers once
the plan has left its stopped state; the page then follows it live. `export --branch`
(up to a chosen item) moves a branch by compare-and-swap, and is a user action too: a second
export to the same commit leaves it as it is.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

from code_runner import dirs, proc
from code_runner.plans.user_action import ACTION_ID
from code_runner.web.actions import ACTION_TIMEOUT_S, ActionOutput, environment, lock
from code_runner.web.catalog import read_json
from code_runner.web.text import clean

GATE_ACTIONS: dict[str, tuple[str, ...]] = {
    "continue": ("approve", "--continue"),
    "redo": ("approve", "--redo"),
    "changes": ("approve", "--changes"),
    "cancel": ("cancel", "--reason", "cancelled in the dashboard", "--wait", "30"),
}
PLAN_ACTIONS = (*GATE_ACTIONS, "amend", "resume", "export")
MAX_PLAN_FILE_BYTES = 1024 * 1024
RESUME_WAIT_S = 30.0
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,120}$")
_ITEM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")
_SUFFIXES = (".json", ".yaml", ".yml")


def _plan_id(record_dir: Path) -> str:
    plan_id = str(read_json(record_dir / "plan.status.json").get("plan_id") or "")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,120}", plan_id):
        raise ValueError("this plan's record names no plan id")
    return plan_id


def _run(record_dir: Path, name: str, words: list[str], shown: list[str]) -> ActionOutput:
    argv = [sys.executable, "-m", "code_runner", "plan", *words]
    with lock(str(record_dir)):
        done = proc.capture(argv, cwd=None, env=environment(), timeout_s=ACTION_TIMEOUT_S)
    text = (done.stdout + done.stderr).decode("utf-8", errors="replace")
    return ActionOutput(" ".join(["code-runner plan", *shown]), done.exit_code, clean(text), name)


def _action_id(raw: str) -> list[str]:
    return ["--action-id", raw] if ACTION_ID.fullmatch(raw) else []


def gate_action(record_dir: Path, name: str, action_id: str) -> ActionOutput:
    """approve --continue/--redo/--changes or cancel, as a user action."""
    plan_id = _plan_id(record_dir)
    words = [GATE_ACTIONS[name][0], plan_id, *GATE_ACTIONS[name][1:]]
    return _run(record_dir, name, [*words, *_action_id(action_id)], words)


def amend(record_dir: Path, filename: str, data: bytes, action_id: str) -> ActionOutput:
    """`plan amend` with the uploaded plan file (kept only while the command runs)."""
    plan_id = _plan_id(record_dir)
    if len(data) > MAX_PLAN_FILE_BYTES:
        return ActionOutput("code-runner plan amend", 2, "the plan file is over 1 MiB", "amend")
    suffix = Path(filename).suffix.lower()
    suffix = suffix if suffix in _SUFFIXES else ".json"
    with tempfile.TemporaryDirectory(prefix="code-runner-amend-") as folder:
        path = Path(folder) / f"plan{suffix}"
        path.write_bytes(data)
        words = ["amend", plan_id, str(path), *_action_id(action_id)]
        return _run(record_dir, "amend", words, ["amend", plan_id, clean(filename)[:80]])


def export_branch(record_dir: Path, branch: str, through: str, action_id: str) -> ActionOutput:
    """`plan export --branch` (up to item `through`, or every done item), as a user action."""
    plan_id = _plan_id(record_dir)
    if not _BRANCH.match(branch) or ".." in branch or branch.endswith((".lock", "/")):
        return ActionOutput(
            "code-runner plan export", 2, f"not a branch name: {clean(branch)!r}", "export"
        )
    words = ["export", plan_id, "--branch", branch]
    if through:
        if not _ITEM.match(through):
            said = f"not an item id: {clean(through)!r}"
            return ActionOutput("code-runner plan export", 2, said, "export")
        words.append(f"--through={through}")
    return _run(record_dir, "export", [*words, *_action_id(action_id)], words)


def resume(record_dir: Path) -> ActionOutput:
    """Start `plan resume` on its own; answer once the plan is running (or has stopped)."""
    plan_id = _plan_id(record_dir)
    before = read_json(record_dir / "plan.status.json").get("status")
    argv = [sys.executable, "-m", "code_runner", "plan", "resume", plan_id]
    ended = threading.Event()
    logs = dirs.state_dir() / "web"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"resume-{plan_id}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    with lock(str(record_dir)):
        started = proc.spawn(
            argv, cwd=os.getcwd(), env=environment(), stdout_path=log, stderr_path=log
        )

        def reap() -> None:  # the one owner of the process handle
            started.wait()
            ended.set()

        threading.Thread(target=reap, daemon=True).start()
        deadline = time.monotonic() + RESUME_WAIT_S
        while time.monotonic() < deadline and not ended.is_set():
            if read_json(record_dir / "plan.status.json").get("status") != before:
                break
            time.sleep(0.1)
    status = read_json(record_dir / "plan.status.json").get("status")
    shown = f"code-runner plan resume {plan_id}"
    if ended.is_set() and status not in ("done",):
        said = f"the run ended at once: the plan is {status} (its output: {log})"
        return ActionOutput(shown, 1, clean(said), "resume")
    return ActionOutput(shown, 0, f"resumed (pid {started.pid}): the plan is {status}", "resume")


__all__ = [
    "GATE_ACTIONS",
    "PLAN_ACTIONS",
    "amend",
    "export_branch",
    "gate_action",
    "resume",
]

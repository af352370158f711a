"""The runs and experiments this server started: each a child process in its own session,
with a directory under `<state dir>/mcp/runs/ID/` holding what it was started with
(`server.json`, the spec), its stdout and stderr, and (for a task) its run record in `out/`.

A child runs `python -m code_runner run SPEC` (or `exec`), so it is the same code path as
the CLI and it outlives a server that exits: the client closing the server does not end a
run half-way. The server logs which children were still running when it stopped; each one
finishes its own record, a later server on the same state dir serves its status and result
(the directory is the registry), and `code-runner stop ID/out` ends a task run by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from code_runner import files, proc
from code_runner.clock import utc_now
from code_runner.mcp_server.limits import Refused, run_id
from code_runner.mcp_server.log import mcp_dir

TASK = "task"
EXPERIMENT = "experiment"


def runs_dir() -> Path:
    return mcp_dir() / "runs"


def new_id(prefix: str) -> str:
    return f"{prefix[:120]}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Entry:
    """One started child, as written to its `server.json`."""

    run_id: str
    kind: str
    dir: Path
    meta: dict[str, Any]

    @property
    def output_dir(self) -> Path:
        return self.dir / "out"

    @property
    def task_id(self) -> str:
        return str(self.meta.get("task_id", ""))

    @property
    def stderr_path(self) -> Path:
        return self.dir / "child.stderr"


class Registry:
    """The children of this server (in memory, so they are reaped) and of earlier ones (on
    disk, so their ids still resolve)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or runs_dir()
        self._children: dict[str, proc.Process] = {}

    def dir_for(self, ident: str) -> Path:
        return self.root / ident

    def start(self, ident: str, kind: str, argv: list[str], meta: dict[str, Any]) -> Entry:
        """Start `argv` for run `ident` (its dir must exist) and record it."""
        directory = self.dir_for(ident)
        child = proc.spawn(
            argv,
            cwd=directory,
            env=dict(os.environ),
            stdout_path=directory / "child.stdout",
            stderr_path=directory / "child.stderr",
        )
        self._children[ident] = child
        created = _create_time(child.pid)
        meta = {
            **meta,
            "run_id": ident,
            "kind": kind,
            "pid": child.pid,
            "pid_create_time": created,
            "argv": argv,
            "started_at": utc_now(),
            "server_pid": os.getpid(),
        }
        files.atomic_write_json(directory / "server.json", meta)
        return Entry(ident, kind, directory, meta)

    def get(self, value: object, kind: str) -> Entry:
        ident = run_id(value)
        meta_path = self.dir_for(ident) / "server.json"
        meta = _read_meta(meta_path)
        if meta is None or meta.get("kind") != kind:
            what = "run" if kind == TASK else "experiment"
            starter = "run_task" if kind == TASK else "exec_start"
            raise Refused(
                f"no {what} {ident!r} was started by this server.",
                fix=f"pass an id that {starter} returned.",
            )
        return Entry(ident, kind, self.dir_for(ident), meta)

    def exit_code(self, entry: Entry) -> int | None:
        """The child's exit code once it ended; None while it runs (or, for a child of an
        earlier server, once it is gone: that code was never ours to see)."""
        child = self._children.get(entry.run_id)
        if child is not None:
            return child.poll()
        return None

    def alive(self, entry: Entry) -> bool:
        child = self._children.get(entry.run_id)
        if child is not None:
            return child.poll() is None
        pid, created = entry.meta.get("pid"), entry.meta.get("pid_create_time")
        if not isinstance(pid, int):
            return False
        return created is not None and _create_time(pid) == created

    def owns(self, entry: Entry) -> bool:
        """Whether this server started the run (and so holds its process handle)."""
        return entry.run_id in self._children

    def stop(self, entry: Entry, grace_s: float) -> int | None:
        """End the child's whole tree (SIGTERM, grace, SIGKILL); its exit code."""
        child = self._children.get(entry.run_id)
        if child is None:
            raise Refused(
                f"{entry.run_id} was started by an earlier server (pid "
                f"{entry.meta.get('server_pid')}), which alone can stop it cleanly.",
                fix=f"end it by hand: kill -TERM -{entry.meta.get('pid')} (its process group).",
            )
        child.kill_tree(grace_s)
        return child.poll()

    def running(self) -> list[tuple[str, int]]:
        return [(i, c.pid) for i, c in self._children.items() if c.poll() is None]


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _create_time(pid: int) -> float | None:
    """When the live process `pid` started; None when it is gone, or a zombie (it has
    exited, and only waits for a parent that adopted it to reap it)."""
    with contextlib.suppress(psutil.Error):
        found = psutil.Process(pid)
        if found.status() != psutil.STATUS_ZOMBIE:
            return float(found.create_time())
    return None


def python_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "code_runner", *args]


__all__ = ["EXPERIMENT", "TASK", "Entry", "Registry", "new_id", "python_argv", "runs_dir"]

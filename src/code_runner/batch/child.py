"""The resident item process's loop (started as `python -m code_runner.cli.batch_worker`).

A slot starts one of these once and hands it items over a Unix socket, one at a time, so an
item does not pay for a fresh interpreter and the runner's imports (`slots`). Each request
names an item file and its try dir; the item's output goes to the try dir's `child.out` and
`child.err`. A task runs here in process as `code-runner run` would run it (its record in
`DIR/run`), and so does a sweep cell, as `code-runner exec --yes` would. After each item,
every process it left is killed (this process is their subreaper); then the exit code is
the reply.

The process watches the one that started it: when that owner dies (killed, force-cancelled,
its driver gone), it interrupts itself, so a running item ends as any interrupted run does
and leaves nothing. An interrupted item, or a bug, ends the process after its reply; so does
the `MAX_ITEMS`th item (a bound on what a long batch may accumulate in one process).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from code_runner import proc
from code_runner.batch.items import Item, ItemKind
from code_runner.errors import CodeRunnerError, Interrupted

WATCH_S = 0.2
MAX_ITEMS = 100
PID_FILE = "item.pid"
INTERRUPTED_EXIT = Interrupted.exit_code
_BUG_EXIT = 70


def watch_parent(parent: int) -> None:
    """SIGTERM ourselves once our parent is gone (we were re-parented)."""

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=loop, name="parent-watch", daemon=True).start()


def run_task(item: Item, try_dir: Path) -> int:
    from code_runner import runner
    from code_runner.record import ResultStatus
    from code_runner.task import validate_spec_data

    data = {**item.spec, "output_dir": str(try_dir / "run")}
    spec = validate_spec_data(data, base_dir=Path(item.base_dir), source=item.item_id)
    pre = runner.preflight(spec, base_dir=Path(item.base_dir))
    run_id = runner.new_run_id(spec.task_id)
    (try_dir / "run_id").write_text(run_id)
    result = runner.run_task(pre, run_id=run_id)
    if result.status is ResultStatus.INTERRUPTED:
        return INTERRUPTED_EXIT
    return 0 if result.passed else 1


@contextlib.contextmanager
def output_to(try_dir: Path) -> Iterator[None]:
    """Point fds 1 and 2 (and so every child's output) at the try dir's files for a while."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        for fd, name in ((1, "child.out"), (2, "child.err")):
            target = os.open(try_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(target, fd)
            os.close(target)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved, strict=True):
            os.dup2(old, fd)
            os.close(old)


ExecRunner = Callable[[Item, Path], int]


def run_one(item_path: Path, try_dir: Path, run_exec: ExecRunner) -> int:
    """One item, to its exit code; its output in the try dir, never an exception."""
    (try_dir / PID_FILE).write_text(str(os.getpid()))
    os.chdir(try_dir)  # where a one-shot child of the item would have started
    with output_to(try_dir):
        try:
            item = Item.from_dict(json.loads(item_path.read_text()))
            if item.kind is ItemKind.EXEC:
                return run_exec(item, try_dir)
            return run_task(item, try_dir)
        except CodeRunnerError as exc:
            print(exc.render(), file=sys.stderr)
            return exc.exit_code
        except Exception:
            traceback.print_exc()
            return _BUG_EXIT
        finally:
            os.chdir("/")


def end_leftovers() -> None:
    """Kill whatever an item left: every descendant of ours (we are their subreaper)."""
    with proc.signals_deferred():
        for pid in proc.descendants(os.getpid()) or []:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass


def warm() -> None:
    """Import what items need now, while the slot is idle, not when the first item waits."""
    import code_runner.runner
    import code_runner.task  # noqa: F401


def serve(socket_path: str, run_exec: ExecRunner) -> int:
    """Serve the owner at `socket_path` until it goes or this process retires; a sweep
    cell is run by `run_exec` (the CLI's entry runs it as `code-runner exec` would)."""
    proc.become_subreaper()
    watch_parent(os.getppid())
    warm()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(socket_path)
        requests = conn.makefile("rb")
        for served, line in enumerate(requests, start=1):
            request = json.loads(line)
            code = run_one(Path(request["item"]), Path(request["try_dir"]), run_exec)
            end_leftovers()
            last = code in (INTERRUPTED_EXIT, _BUG_EXIT) or served >= MAX_ITEMS
            conn.sendall(json.dumps({"exit": code, "last": last}).encode() + b"\n")
            if last:
                return 0
    return 0

"""Resident item processes: started once per slot, handed items over a Unix socket.

A fresh interpreter per item cost a few hundred ms of CPU in imports alone, and on a busy
machine that is what kept a batch from its ideal throughput. A `Resident` is one
`python -m code_runner.cli.batch_worker` process (the loop of `batch.child`, started by
`proc.spawn` in a session of its own, carrying its tree token) that imports the runner once
and then runs one item at a time.
The socket lives in a private directory (0700) only until the child connects; the peer's
pid is checked.

An item that must stop (a cancel, a timeout, an interrupt of the caller) ends the resident's
whole tree, exactly as a one-shot child's: the next item gets a fresh resident. A resident
that died under an item (killed by a signal) raises `WorkerLost`, an infrastructure failure.
`ResidentPool` keeps the idle ones; the local engine starts one per slot up front, a Ray
worker keeps one for the items it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from code_runner import proc
from code_runner.batch.results import WorkerLost

POLL_S = 0.1
WORKER_MODULE = "code_runner.cli.batch_worker"  # `batch.child`'s loop, exec cells included
CONNECT_TIMEOUT_S = 120.0
_PEERCRED = struct.Struct("3i")


class Cancelled(Exception):
    """The item was cancelled and its process tree ended."""


class Resident:
    """One resident item process and its connection (one owner thread uses it)."""

    def __init__(self, label: str = "") -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="crslot-", dir="/tmp"))
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self._dir / "s"))
        self._listener.listen(1)
        argv = [sys.executable, "-m", WORKER_MODULE, str(self._dir / "s")]
        self.process = proc.spawn(
            [*argv, label] if label else argv,
            cwd=self._dir,
            env=os.environ,
            stdout_path=self._dir / "out",
            stderr_path=self._dir / "err",
        )
        self._conn: socket.socket | None = None
        self._buffer = b""
        self.retiring = False  # it said it ends after this item
        self._family: list[psutil.Process] = []

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def _startup_error(self) -> str:
        text = ""
        with contextlib.suppress(OSError):
            text = (self._dir / "err").read_text(errors="replace").strip()[-2000:]
        return text

    def connect(self, stopped: threading.Event) -> socket.socket:
        """The connection to the process, once it is ready (`Cancelled` if stopped first)."""
        if self._conn is not None:
            return self._conn
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        self._listener.settimeout(POLL_S)
        while True:
            if stopped.is_set():
                raise Cancelled
            if not self.alive or time.monotonic() > deadline:
                raise WorkerLost(f"the item process did not start: {self._startup_error()}")
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            pid, _uid, _gid = _PEERCRED.unpack(
                conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
            )
            if pid != self.process.pid:
                conn.close()
                continue
            self._conn = conn
            self._forget_dir()
            return conn

    def _forget_dir(self) -> None:
        """Once connected, the socket path is not needed: no file of ours outlives us."""
        self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def run(self, item_path: Path, try_dir: Path, stopped: threading.Event) -> int:
        """Run one item to its exit code. Raises `Cancelled` once `stopped` is set (the caller
        ends the tree), `WorkerLost` when the process died under the item."""
        conn = self.connect(stopped)
        request = {"item": str(item_path), "try_dir": str(try_dir)}
        try:
            conn.sendall(json.dumps(request).encode() + b"\n")
        except OSError:
            return self._lost()
        while b"\n" not in self._buffer:
            if stopped.is_set():
                raise Cancelled
            readable, _, _ = select.select([conn], [], [], POLL_S)
            if not readable:
                continue
            chunk = conn.recv(4096)
            if not chunk:
                return self._lost()
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply = json.loads(line)
        self.retiring = bool(reply.get("last"))
        return int(reply["exit"])

    def _lost(self) -> int:
        """The process closed the connection under an item: how it ended."""
        self.process.wait_exit(5.0)
        raw = self.process.returncode
        if raw is None or raw < 0:
            raise WorkerLost(
                f"the item's process was killed by signal {-raw}"
                if raw is not None
                else "the item's process stopped answering"
            )
        return proc.exit_code_of(raw)

    def wind_down(self, grace_s: Callable[[], float]) -> None:
        """A soft stop: SIGTERM the tree and wait until the process exits or `grace_s()`
        has passed, asked again at every poll (a forced stop shortens it); `end` follows."""
        started = time.monotonic()
        self._note_family()
        self.process.terminate_tree()
        while self.alive and time.monotonic() - started < grace_s():
            self.process.wait_exit(POLL_S)

    def _note_family(self) -> None:
        """Remember the process's descendants now, those in sessions of their own too (an
        exec cell's watchdog and command): once it is gone, nothing leads to them."""
        if self.alive:
            self._family += proc.family(self.process.pid)

    def end(self, grace_s: float) -> None:
        """End the process and its whole tree (SIGTERM, grace, SIGKILL), and whatever of
        its family is left."""
        self._note_family()
        if self._conn is not None:
            self._conn.close()
        else:
            self._forget_dir()
        self.process.kill_tree(grace_s)
        proc.kill_processes(self._family, grace_s)


class ResidentPool:
    """Idle residents, handed to one item at a time; thread-safe."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self._idle: list[Resident] = []
        self._lock = threading.Lock()

    def prestart(self, count: int) -> None:
        """Start `count` residents and wait until each has its imports done and is
        connected (they start side by side); one that fails is dropped (an item that
        needs it starts another, and says why that fails)."""
        started = [Resident(self.label) for _ in range(count)]
        ready = []
        for resident in started:
            try:
                resident.connect(threading.Event())
            except WorkerLost:
                resident.end(0.1)
                continue
            ready.append(resident)
        with self._lock:
            self._idle += ready

    def take(self) -> Resident:
        with self._lock:
            while self._idle:
                resident = self._idle.pop()
                if resident.alive:
                    return resident
                resident.end(0.1)
        return Resident(self.label)

    def give(self, resident: Resident) -> None:
        """Back to the pool, or ended when it is no longer fit to serve."""
        if resident.retiring or not resident.alive:
            resident.end(0.5)
            return
        with self._lock:
            self._idle.append(resident)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for resident in idle:
            resident.end(0.5)

"""A resident sandbox: one bubblewrap sandbox per session, started once, fed commands.

Starting a sandbox costs more than most commands it runs (joining the cgroups through a
shell, two bwrap stages, `prlimit`): about 11x a bare fork/exec. A `Resident` pays that
once: the session's own argv (`Profile.wrap`, with its cgroups and rlimits) starts the
executor (`executor.py`) inside, and each command is one message over a socket carrying
the command's stdout and stderr descriptors. What the executor guarantees per command
(its own session, nothing left running after it, a clean `/tmp` and scratch mounts) is
in `executor.py`; what the runner keeps doing here is every bound it had before: the
timeout, the output cap and the caller's stop check, each ending with a kill the executor
must answer, or the whole sandbox is killed. A command given no output paths (an agent's)
writes to two anonymous files made once per sandbox and emptied around each command
(`scratch_output`), read back by descriptor: no file is made, opened or looked up by
name per command.

A reply must echo the request's random nonce; anything else (a dead executor, a forged or
missing answer) ends this sandbox, and the session starts a new one for the next command.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import select
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from code_runner import proc, tuning
from code_runner.sandbox.profile import SYSTEM_BIN_PATH

RESIDENT_ENV = tuning.SANDBOX_RESIDENT_ENV  # "off": a sandbox per command, as before
READY_TIMEOUT_S = 15.0
_KILL_ANSWER_S = 2.0  # beyond the grace: how long a kill may go unanswered
_STOP_CHECK_S = 0.5


class ResidentError(Exception):
    """The executor could not be started (the message says why)."""


@dataclass(frozen=True)
class Outcome:
    """How one command ended in the resident sandbox."""

    returncode: int | None  # raw: negative for a signal; None when the executor broke
    timed_out: bool = False
    output_limited: bool = False
    stopped: bool = False
    killed: int = 0  # other processes of the sandbox killed after it
    broken: str | None = None  # the sandbox ended during the command: why


@functools.cache
def executor_source() -> str:
    return Path(__file__).with_name("executor.py").read_text(encoding="utf-8")


def python_for_executor() -> str:
    """A system Python (visible inside, unlike a venv or a user's home), else our own."""
    return shutil.which("python3", path=SYSTEM_BIN_PATH) or os.path.realpath(sys.executable)


class Resident:
    """One running sandbox with its executor. Not thread-safe: one command at a time."""

    def __init__(self, process: proc.Process, sock: socket.socket, log: IO[bytes]) -> None:
        self.process = process
        self._sock = sock
        self._log = log
        self._outputs: list[tuple[IO[bytes], int]] = []  # per stream: the file, write-only

    def scratch_output(self, stream: int) -> tuple[int, int]:
        """New descriptors (write-only for the command, and one to read it back) of this
        sandbox's anonymous file for stream 0 (stdout) or 1 (stderr) of a command given no
        path, emptied: made once, not per command. Nothing of the previous command holds it
        (the executor kills everything of a command before it answers); the write offset
        is shared, so it is put back at 0 too. They outlive `close` (a broken sandbox)."""
        if not self._outputs:
            for _ in range(2):
                made: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the sandbox
                own = Path(f"/proc/self/fd/{made.fileno()}")
                self._outputs.append((made, proc.open_no_follow(own, os.O_WRONLY)))
        file, write_only = self._outputs[stream]
        fd = os.dup(write_only)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd, os.dup(file.fileno())

    @classmethod
    def start(
        cls,
        wrap: Callable[[Sequence[str]], list[str]],
        *,
        cwd: Path,
        env: dict[str, str],
        wipe: Sequence[str],
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> Resident:
        """Start the sandbox (`wrap` is the session's argv) and wait for its executor."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = tempfile.TemporaryFile()  # noqa: SIM115 - kept for the sandbox's life: its own output: why it failed to start
        log_path = Path(f"/proc/self/fd/{log.fileno()}")
        argv = [python_for_executor(), "-I", "-S", "-c", executor_source()]
        try:
            process = proc.spawn(
                wrap([*argv, str(theirs.fileno()), *wipe]),
                cwd=cwd,
                env=env,
                stdout_path=log_path,
                stderr_path=log_path,
                pass_fds=(theirs.fileno(),),
            )
        except OSError as exc:
            ours.close()
            log.close()
            raise ResidentError(f"the sandbox could not start: {exc.strerror or exc}") from exc
        finally:
            theirs.close()
        resident = cls(process, ours, log)
        try:
            resident._ready(ready_timeout_s)
        except ResidentError:
            resident.close()
            raise
        return resident

    def _ready(self, timeout_s: float) -> None:
        ready, _, _ = select.select([self._sock], [], [], timeout_s)
        data = self._sock.recv(4096) if ready else b""
        with contextlib.suppress(ValueError):
            if json.loads(data or b"{}").get("ready") is True:
                return
        self.process.kill_tree(0.1)
        self._log.seek(0)
        said = self._log.read(2000).decode("utf-8", "replace").strip()
        why = "did not answer" if not ready else "ended before it was ready"
        raise ResidentError(f"the sandbox's executor {why}" + (f": {said}" if said else ""))

    def alive(self) -> bool:
        return self.process.returncode is None

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        out_fd: int,
        err_fd: int,
        timeout_s: float,
        max_output_bytes: int,
        grace_s: float,
        stop_when: proc.StopCheck | None,
    ) -> Outcome:
        """Run one command; the sandbox is ended when the executor breaks its contract."""
        nonce = secrets.token_hex(16)
        request = json.dumps({"nonce": nonce, "argv": list(argv), "cwd": str(cwd)}).encode()
        started = time.monotonic()
        try:
            socket.send_fds(self._sock, [request], [out_fd, err_fd])
        except OSError as exc:
            return self._broken(f"the executor did not take the command ({exc.strerror})")
        return self._await(
            nonce, started + timeout_s, (out_fd, err_fd), max_output_bytes, grace_s, stop_when
        )

    def _await(  # noqa: C901 - one branch per bound the runner keeps
        self,
        nonce: str,
        deadline: float,
        fds: tuple[int, int],
        max_output_bytes: int,
        grace_s: float,
        stop_when: proc.StopCheck | None,
    ) -> Outcome:
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        interval = 0.005
        next_check = time.monotonic() + _STOP_CHECK_S
        why: dict[str, bool] = {}
        answer_by = float("inf")
        while True:
            now = time.monotonic()
            wait_s = max(0.0, min(interval, deadline - now, answer_by - now))
            if poller.poll(int(wait_s * 1000) + 1):
                return self._reply(nonce, why)
            now = time.monotonic()
            if why:
                if now >= answer_by:
                    return self._broken("the executor did not answer a kill", **why)
                continue
            if now >= deadline:
                why = {"timed_out": True}
            elif sum(os.fstat(fd).st_size for fd in fds) > max_output_bytes:
                why = {"output_limited": True}
            elif stop_when is not None and now >= next_check:
                if stop_when():
                    why = {"stopped": True}
                next_check = time.monotonic() + _STOP_CHECK_S
            if why:
                if not self._send({"kill": grace_s}):
                    return self._broken("the executor is gone", **why)
                answer_by = time.monotonic() + grace_s + _KILL_ANSWER_S
            interval = min(interval * 2, 0.2)

    def _reply(self, nonce: str, why: dict[str, bool]) -> Outcome:
        try:
            data = self._sock.recv(4096)
        except OSError:
            data = b""
        if not data:
            return self._broken("the sandbox's executor ended during the command", **why)
        try:
            reply = json.loads(data)
        except ValueError:
            reply = {}
        if not isinstance(reply, dict) or reply.get("nonce") != nonce:
            return self._broken("an answer that was not the executor's", **why)
        code = reply.get("returncode")
        return Outcome(
            returncode=code if isinstance(code, int) else None,
            timed_out=why.get("timed_out", False),
            output_limited=why.get("output_limited", False),
            stopped=why.get("stopped", False),
            killed=int(reply.get("killed") or 0),
        )

    def _send(self, message: dict[str, float]) -> bool:
        try:
            self._sock.send(json.dumps(message).encode())
        except OSError:
            return False
        return True

    def _broken(self, why: str, **bounds: bool) -> Outcome:
        self.close()
        return Outcome(returncode=None, broken=why, **bounds)

    def close(self, grace_s: float = 0.5) -> None:
        """End the sandbox: the executor stops at the closed socket; then the whole tree."""
        with contextlib.suppress(OSError):
            self._sock.close()
        self.process.wait_exit(grace_s)
        self.process.kill_tree(0.1)
        self._log.close()
        for file, write_only in self._outputs:
            os.close(write_only)
            file.close()
        self._outputs = []


def run_command(
    resident: Resident,
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    stdout_path: Path | None,
    stderr_path: Path | None,
    max_output_bytes: int,
    head_bytes: int,
    tail_bytes: int,
    grace_s: float,
    stop_when: proc.StopCheck | None,
) -> tuple[proc.ProcResult, str | None]:
    """`proc.run`'s contract for one command in `resident`: its `ProcResult`, and why the
    sandbox broke during it (None: it did not)."""
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        fds: list[int] = []
        sources: list[Path | int] = []  # where each stream is read back: a path or a descriptor
        for stream, given in enumerate((stdout_path, stderr_path)):
            if given is None:
                fd, reader = resident.scratch_output(stream)
                stack.callback(os.close, reader)
                stack.callback(os.ftruncate, reader, 0)  # its space back at once, as before
                sources.append(reader)
            else:
                fd = proc.open_no_follow(given, os.O_WRONLY | os.O_TRUNC)
                sources.append(given)
            stack.callback(os.close, fd)
            fds.append(fd)
        outcome = resident.run(
            argv,
            cwd=cwd,
            out_fd=fds[0],
            err_fd=fds[1],
            timeout_s=timeout_s,
            max_output_bytes=max_output_bytes,
            grace_s=grace_s,
            stop_when=stop_when,
        )
        returncode = outcome.returncode
        if outcome.broken is not None:
            returncode = -9
            note = f"\n[code-runner: {outcome.broken}; the next command gets a new sandbox]\n"
            os.write(fds[1], note.encode())
        (stdout, stdout_size), (stderr, stderr_size) = (
            proc.read_head_tail(source, head_bytes, tail_bytes)
            if isinstance(source, Path)
            else proc.read_head_tail_fd(source, head_bytes, tail_bytes)
            for source in sources
        )
    code = 127 if returncode is None else returncode
    return (
        proc.ProcResult(
            argv=tuple(argv),
            cwd=str(cwd),
            exit_code=proc.exit_code_of(code, outcome.timed_out),
            duration_s=time.monotonic() - started,
            stdout=stdout,
            stderr=stderr,
            stdout_size=stdout_size,
            stderr_size=stderr_size,
            timed_out=outcome.timed_out,
            output_limited=outcome.output_limited,
            stopped=outcome.stopped,
            signal=proc.signal_of(code),
            killed_descendants=outcome.killed,
        ),
        outcome.broken,
    )

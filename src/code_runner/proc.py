"""How code-runner starts, bounds and ends a subprocess, and how it meets signals.

Every child gets its own session (so a timeout can signal the whole group), stdin from
/dev/null, and a token in its environment so that descendants which `setsid` away can still
be found and killed. Output goes to files, never pipes (a grandchild holding a pipe would
block us), with a size cap enforced while the process runs. The runner makes itself a
child subreaper, so orphaned descendants are re-parented to it and can be reaped.

A result is a value (`ProcResult`); a timeout is exit code 124, as with timeout(1).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import psutil

TIMEOUT_EXIT_CODE = 124
TOKEN_ENV = "CODE_RUNNER_PROC_TOKEN"  # noqa: S105 (a name, not a secret)
RUN_ID_ENV = "CODE_RUNNER_RUN_ID"  # set in every agent command and DoD by the runner
DEFAULT_GRACE_S = 2.0
DEFAULT_HEAD_BYTES = 8 * 1024
DEFAULT_TAIL_BYTES = 24 * 1024
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ProcResult:
    """What happened to one process. Output text is head + tail of what it wrote."""

    argv: tuple[str, ...]
    cwd: str
    exit_code: int
    duration_s: float
    stdout: str
    stderr: str
    stdout_size: int
    stderr_size: int
    timed_out: bool = False
    output_limited: bool = False
    signal: int | None = None
    killed_descendants: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def describe(self) -> str:
        """A short human phrase for the outcome ("exit 0", "timed out after 5.0 s")."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f} s (exit {TIMEOUT_EXIT_CODE})"
        if self.output_limited:
            return f"killed: output exceeded the cap (exit {self.exit_code})"
        if self.signal is not None:
            return f"killed by signal {self.signal} (exit {self.exit_code})"
        return f"exit {self.exit_code}"


@dataclass(frozen=True)
class Captured:
    """Result of a short command whose output we need in memory (git plumbing)."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def become_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants (Linux only). Idempotent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def shell_argv(command: str) -> list[str]:
    """How a command string is run: bash without rc files, so results do not depend on them."""
    bash = shutil.which("bash") or "/bin/bash"
    return [bash, "--noprofile", "--norc", "-c", command]


def run(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    timeout_s: float,
    stdout_path: Path | None = None,
    stderr_path: Path | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    head_bytes: int = DEFAULT_HEAD_BYTES,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    grace_s: float = DEFAULT_GRACE_S,
) -> ProcResult:
    """Run `argv` to completion or timeout, killing its whole tree either way."""
    token = uuid.uuid4().hex
    child_env = dict(env)
    child_env[TOKEN_ENV] = token
    scratch: str | None = None
    if stdout_path is None or stderr_path is None:
        scratch = tempfile.mkdtemp(prefix="code-runner-proc-")
    out_path = stdout_path or Path(scratch or ".") / "stdout"
    err_path = stderr_path or Path(scratch or ".") / "stderr"
    try:
        return _run_to_files(
            tuple(argv),
            cwd=str(cwd),
            env=child_env,
            token=token,
            timeout_s=timeout_s,
            out_path=out_path,
            err_path=err_path,
            max_output_bytes=max_output_bytes,
            head_bytes=head_bytes,
            tail_bytes=tail_bytes,
            grace_s=grace_s,
        )
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _run_to_files(
    argv: tuple[str, ...],
    *,
    cwd: str,
    env: dict[str, str],
    token: str,
    timeout_s: float,
    out_path: Path,
    err_path: Path,
    max_output_bytes: int,
    head_bytes: int,
    tail_bytes: int,
    grace_s: float,
) -> ProcResult:
    out_path.parent.mkdir(parents=True, exist_ok=True)
    err_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with out_path.open("wb") as out_f, err_path.open("wb") as err_f:
        try:
            popen = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out_f,
                stderr=err_f,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            err_f.write(f"could not start {argv[0]!r}: {exc.strerror or exc}\n".encode())
            err_f.flush()
            return ProcResult(
                argv=argv,
                cwd=cwd,
                exit_code=127,
                duration_s=time.monotonic() - started,
                stdout="",
                stderr=f"could not start {argv[0]!r}: {exc.strerror or exc}",
                stdout_size=0,
                stderr_size=0,
            )
        try:
            timed_out, output_limited = _wait(
                popen, started + timeout_s, (out_path, err_path), max_output_bytes
            )
        except BaseException:  # an interrupt while waiting: leave no process behind
            with signals_deferred():
                _terminate(popen, token, grace_s)
                popen.wait()
                _kill_descendants(token, popen.pid, grace_s)
            raise
        if timed_out or output_limited:
            _terminate(popen, token, grace_s)
        returncode = popen.wait()
        killed = _kill_descendants(token, popen.pid, grace_s)
    duration = time.monotonic() - started
    sig = -returncode if returncode < 0 else None
    if timed_out:
        exit_code = TIMEOUT_EXIT_CODE
    elif sig is not None:
        exit_code = 128 + sig
    else:
        exit_code = returncode
    stdout, stdout_size = read_head_tail(out_path, head_bytes, tail_bytes)
    stderr, stderr_size = read_head_tail(err_path, head_bytes, tail_bytes)
    return ProcResult(
        argv=argv,
        cwd=cwd,
        exit_code=exit_code,
        duration_s=duration,
        stdout=stdout,
        stderr=stderr,
        stdout_size=stdout_size,
        stderr_size=stderr_size,
        timed_out=timed_out,
        output_limited=output_limited,
        signal=sig,
        killed_descendants=killed,
    )


def _wait(
    popen: subprocess.Popen[bytes],
    deadline: float,
    paths: tuple[Path, Path],
    max_output_bytes: int,
) -> tuple[bool, bool]:
    """Wait for exit; return (timed_out, output_limited). Polls gently, backing off."""
    interval = 0.005
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True, False
        try:
            popen.wait(timeout=min(interval, remaining))
            return False, False
        except subprocess.TimeoutExpired:
            pass
        total = 0
        for path in paths:
            with contextlib.suppress(OSError):
                total += path.stat().st_size
        if total > max_output_bytes:
            return False, True
        interval = min(interval * 2, 0.2)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _terminate(popen: subprocess.Popen[bytes], token: str, grace_s: float) -> None:
    """SIGTERM the group and every tokened descendant, wait `grace_s`, then SIGKILL."""
    _signal_group(popen.pid, signal.SIGTERM)
    for proc in _tokened(token, popen.pid):
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=grace_s)
    _signal_group(popen.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        popen.kill()


def _tokened(token: str, root_pid: int) -> list[psutil.Process]:
    """Live processes that carry our token: descendants of ours, or orphans now ours."""
    found: list[psutil.Process] = []
    try:
        candidates = psutil.Process(os.getpid()).children(recursive=True)
    except psutil.Error:
        return found
    for proc in candidates:
        if proc.pid == root_pid:
            continue
        try:
            if proc.environ().get(TOKEN_ENV) == token:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _kill_descendants(token: str, root_pid: int, grace_s: float) -> int:
    """Kill anything the command left behind (daemons, setsid escapees); reap our orphans."""
    _signal_group(root_pid, signal.SIGKILL)
    leftovers = _tokened(token, root_pid)
    if not leftovers:
        return 0
    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(leftovers, timeout=grace_s)
    for proc in leftovers:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(proc.pid, os.WNOHANG)
    return len(leftovers)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends (main thread only; elsewhere a no-op).

    Cleanup that must finish, such as killing a process tree, runs inside it: the runner's
    interrupt handler then fires after the cleanup instead of cutting it short.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def signals_as_interrupt(
    make_error: Callable[[str], BaseException],
    *,
    signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
    on_signal: Callable[[str], None] = lambda _name: None,
    ignore: Callable[[], bool] = lambda: False,
) -> Iterator[None]:
    """The first of `signals` raises `make_error(name)`, so `finally` blocks run cleanup.

    A repeat during cleanup is reported to `on_signal` and otherwise ignored: cleanup must
    finish. So is any signal while `ignore()` (a stop already being honoured). In a thread
    other than the main one, Python cannot install handlers: a no-op.
    """
    received: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        on_signal(name)
        if received or ignore():
            return
        received.append(signum)
        raise make_error(name)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in signals}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def kill_run_processes(run_id: str, *, grace_s: float = 2.0) -> tuple[int, ...]:
    """Kill processes a dead run left running (they carry its id in their environment)."""
    found: list[psutil.Process] = []
    for candidate in psutil.process_iter():
        try:
            if candidate.environ().get(RUN_ID_ENV) == run_id:
                found.append(candidate)
        except (psutil.Error, OSError):
            continue
    for victim in found:
        with contextlib.suppress(psutil.Error):
            victim.kill()
    psutil.wait_procs(found, timeout=grace_s)
    return tuple(sorted(p.pid for p in found))


class Spawned:
    """A child started by `spawn` that the caller supervises: poll it, then kill its tree.

    For callers that must watch a process while it runs (read its output as it grows,
    stop it on an idle timeout); `run` is the simpler choice when waiting is enough.
    """

    def __init__(self, popen: subprocess.Popen[bytes], token: str, started: float) -> None:
        self.popen = popen
        self.token = token
        self.started = started

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit code once the child has exited (128+N for signal N), else None."""
        code = self.popen.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code

    def kill_tree(self, grace_s: float = DEFAULT_GRACE_S) -> int:
        """End the child and everything it started (SIGTERM, grace, SIGKILL); reap them.

        Returns how many descendants outside the child's process group were killed.
        Signals are deferred meanwhile, so an interrupt cannot leave half a tree behind.
        """
        with signals_deferred():
            others = 0
            if self.popen.poll() is None:
                others = len(_tokened(self.token, self.popen.pid))
                _terminate(self.popen, self.token, grace_s)
            self.popen.wait()
            return max(others, _kill_descendants(self.token, self.popen.pid, grace_s))


def spawn(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    stdout_path: Path,
    stderr_path: Path,
) -> Spawned:
    """Start `argv` in its own session, stdin from /dev/null, output appended to files.

    The child carries a fresh token (`TOKEN_ENV`) so `kill_tree` finds descendants that
    left its process group. Raises OSError when the program cannot be started.
    """
    token = uuid.uuid4().hex
    child_env = {**env, TOKEN_ENV: token}
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    stderr_path.parent.mkdir(parents=True, exist_ok=True)
    with stdout_path.open("ab") as out_f, stderr_path.open("ab") as err_f:
        popen = subprocess.Popen(
            tuple(argv),
            cwd=str(cwd),
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=out_f,
            stderr=err_f,
            start_new_session=True,
            close_fds=True,
        )
    return Spawned(popen, token, time.monotonic())


def kill_tokened(token: str, *, grace_s: float = DEFAULT_GRACE_S) -> int:
    """End every descendant of ours that carries `token` (SIGTERM, grace, SIGKILL); reap.

    For trees whose root is not our child (a tmux server: it daemonizes, and is found
    here because the runner is a child subreaper). Returns how many were signalled.
    """
    with signals_deferred():
        found = _tokened(token, os.getpid())
        for child in found:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        _, alive = psutil.wait_procs(found, timeout=grace_s)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(alive, timeout=grace_s)
        for child in found:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(child.pid, os.WNOHANG)
        return len(found)


def read_head_tail(path: Path, head_bytes: int, tail_bytes: int) -> tuple[str, int]:
    """Return (text, total_size): the whole file if small, else head + marker + tail."""
    try:
        size = path.stat().st_size
    except OSError:
        return "", 0
    with path.open("rb") as f:
        if size <= head_bytes + tail_bytes:
            data = f.read()
            return data.decode("utf-8", errors="replace"), size
        head = f.read(head_bytes)
        f.seek(size - tail_bytes)
        tail = f.read()
    omitted = size - head_bytes - tail_bytes
    text = (
        head.decode("utf-8", errors="replace")
        + f"\n[... {omitted} bytes omitted ...]\n"
        + tail.decode("utf-8", errors="replace")
    )
    return text, size


def capture(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str],
    timeout_s: float,
    input_bytes: bytes | None = None,
) -> Captured:
    """Run a short plumbing command and keep its output in memory (git and friends)."""
    args = tuple(argv)
    try:
        popen = subprocess.Popen(
            args,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return Captured(args, 127, b"", f"could not start {args[0]!r}: {exc}".encode())
    try:
        out, err = popen.communicate(input=input_bytes, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(popen.pid, signal.SIGKILL)
        out, err = popen.communicate()
        return Captured(args, TIMEOUT_EXIT_CODE, out, err, timed_out=True)
    return Captured(args, popen.returncode, out, err)

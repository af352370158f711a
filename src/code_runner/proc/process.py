"""One handle for a started process: `spawn` it, `poll` it, `wait` for a `ProcResult`, or
`kill_tree` it.

Every child gets its own session (so a timeout can signal the whole group, and the runner's
terminal is not the child's to read), stdin from /dev/null, and a token in its environment
(see `tree`). `run` gives a command its own process group instead where the runner has no
terminal: there the two are alike, and a session costs the command's wall time (the kernel
groups each session for the scheduler; a new group waits for CPU). Output goes to files,
never pipes (a grandchild holding a pipe would block us), with a size cap enforced while
`wait` watches.

Exit codes are as a shell reports them, whichever way a caller asks: 128+N for signal N and
124 for a timeout, as with timeout(1) (`exit_code_of`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

import code_runner.proc.tracking as tracking
from code_runner.proc.outputs import open_no_follow
from code_runner.proc.signals import signals_deferred
from code_runner.proc.tree import (
    DEFAULT_GRACE_S,
    RUN_ID_ENV,
    TOKEN_ENV,
    kill_descendants,
    kill_tokened,
    make_undumpable,
    new_token,
    signal_group,
    tokened,
)

TIMEOUT_EXIT_CODE = 124
DEFAULT_HEAD_BYTES = 8 * 1024
DEFAULT_TAIL_BYTES = 24 * 1024
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024


def exit_code_of(returncode: int, timed_out: bool = False) -> int:
    """The exit code a shell would report: 124 on timeout, 128+N for signal N."""
    if timed_out:
        return TIMEOUT_EXIT_CODE
    return 128 - returncode if returncode < 0 else returncode


def signal_of(returncode: int | None) -> int | None:
    """The signal that ended a process, from its raw return code (negative: a signal)."""
    return -returncode if returncode is not None and returncode < 0 else None


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
    stopped: bool = False  # ended because the caller's `stop_when` said so (a disk budget)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def describe(self) -> str:
        """A short human phrase for the outcome ("exit 0", "timed out after 5.0 s")."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f} s (exit {TIMEOUT_EXIT_CODE})"
        if self.output_limited:
            return f"killed: output exceeded the cap (exit {self.exit_code})"
        if self.stopped:
            return f"killed: it went over the run's limit (exit {self.exit_code})"
        if self.signal is not None:
            return f"killed by signal {self.signal} (exit {self.exit_code})"
        return f"exit {self.exit_code}"


StopCheck = Callable[[], bool]
STOP_CHECK_S = 0.5  # how often a running command's `stop_when` is asked, at the most


class Process:
    """A child started by `spawn`: poll it, wait for its result, or end its whole tree.

    Not thread-safe; one owner supervises it. `started` is on the monotonic clock.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        token: str,
        *,
        argv: tuple[str, ...],
        started: float,
        cwd: str,
        stdout_path: Path,
        stderr_path: Path,
        group: Path | None = None,
    ) -> None:
        self.popen = popen
        self.group = group  # the run's cgroup leaf it joined (`tracking`), if any
        self.token = token
        self.started = started
        self.argv = argv
        self.cwd = cwd
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.timed_out = False
        self.output_limited = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """The raw return code (negative: killed by that signal), None while it runs."""
        return self.popen.poll()

    def poll(self) -> int | None:
        """The exit code once the child has exited (see `exit_code_of`), else None."""
        code = self.popen.poll()
        return None if code is None else exit_code_of(code, self.timed_out)

    def send_signal(self, sig: int) -> None:
        """Signal the child itself (a graceful stop sends SIGINT this way)."""
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(sig)

    def signal_group(self, sig: int) -> None:
        """Signal the child's process group (its session: everything that did not leave)."""
        signal_group(self.pid, sig)

    def wait_exit(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the child itself to exit; whether it has.

        Woken by the exit itself (a pidfd), not by polling, where the kernel has pidfds.
        """
        if self.popen.poll() is not None:
            return True
        with self._exit_fd() as pidfd:
            return self._wait_exit_on(pidfd, timeout_s)

    @contextlib.contextmanager
    def _exit_fd(self) -> Iterator[int | None]:
        """A pidfd of the child (readable once it exits), None where the kernel has none.
        Only while the child is not reaped: its pid cannot be anyone else's yet."""
        try:
            pidfd = os.pidfd_open(self.popen.pid)
        except (AttributeError, OSError):
            yield None
            return
        try:
            yield pidfd
        finally:
            os.close(pidfd)

    def _wait_exit_on(self, pidfd: int | None, timeout_s: float) -> bool:
        if pidfd is None:
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        waiter = select.poll()
        waiter.register(pidfd, select.POLLIN)
        waiter.poll(max(0, math.ceil(timeout_s * 1000)))
        return self.popen.poll() is not None

    def kill_tree(self, grace_s: float = DEFAULT_GRACE_S) -> int:
        """End the child and everything it started (SIGTERM, grace, SIGKILL); reap them.

        Returns how many descendants outside the child's process group were killed.
        Signals are deferred meanwhile, so an interrupt cannot leave half a tree behind.
        """
        with signals_deferred():
            others = 0
            if self.popen.poll() is None:
                others = len(tokened(self.token, self.pid))
                self._terminate(grace_s)
            self.popen.wait()
            tracked = self._empty_group()
            return max(others, tracked + kill_descendants(self.token, self.pid, grace_s))

    def _empty_group(self) -> int:
        """Kill whatever is left in the command's cgroup leaf (escapees included); how many.
        The leaf is given back to the run (its next command's), so this is done once."""
        group, self.group = self.group, None
        if group is None:
            return 0
        return len(tracking.give_back(group))

    def wait(
        self,
        timeout_s: float | None = None,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        head_bytes: int = DEFAULT_HEAD_BYTES,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
        grace_s: float = DEFAULT_GRACE_S,
        stop_when: StopCheck | None = None,
    ) -> ProcResult:
        """Wait for exit, the timeout (from the start), the output cap or `stop_when` (asked
        every `STOP_CHECK_S` or so: a check of the run's disk use); the tree is gone after.

        An interrupt while waiting (KeyboardInterrupt, a signal turned into an error) kills
        the tree before it propagates: no process is left behind.
        """
        deadline = float("inf") if timeout_s is None else self.started + timeout_s
        try:
            timed_out, limited, stopped = self._watch(deadline, max_output_bytes, stop_when)
        except BaseException:
            self.kill_tree(grace_s)
            raise
        self.timed_out = self.timed_out or timed_out
        self.output_limited = self.output_limited or limited
        if timed_out or limited or stopped:
            self._terminate(grace_s)
        returncode = self.popen.wait()
        killed = self._empty_group() + kill_descendants(self.token, self.pid, grace_s)
        duration = time.monotonic() - self.started
        stdout, stdout_size = read_head_tail(self.stdout_path, head_bytes, tail_bytes)
        stderr, stderr_size = read_head_tail(self.stderr_path, head_bytes, tail_bytes)
        return ProcResult(
            argv=self.argv,
            cwd=self.cwd,
            exit_code=exit_code_of(returncode, self.timed_out),
            duration_s=duration,
            stdout=stdout,
            stderr=stderr,
            stdout_size=stdout_size,
            stderr_size=stderr_size,
            timed_out=self.timed_out,
            output_limited=self.output_limited,
            stopped=stopped,
            signal=signal_of(returncode),
            killed_descendants=killed,
        )

    def _watch(
        self, deadline: float, max_output_bytes: int, stop_when: StopCheck | None
    ) -> tuple[bool, bool, bool]:
        """Wait for exit; return (timed_out, output_limited, stopped). Woken by the exit
        itself (one pidfd for the whole wait); between wakes, which back off, the output cap
        is checked, and `stop_when` at most every `STOP_CHECK_S` (less often when slow)."""
        if self.popen.poll() is not None:
            return False, False, False
        with self._exit_fd() as pidfd:
            return self._watch_on(pidfd, deadline, max_output_bytes, stop_when)

    def _watch_on(
        self,
        pidfd: int | None,
        deadline: float,
        max_output_bytes: int,
        stop_when: StopCheck | None,
    ) -> tuple[bool, bool, bool]:
        interval = 0.005
        next_check = time.monotonic() + STOP_CHECK_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True, False, False
            if self._wait_exit_on(pidfd, min(interval, remaining)):
                return False, False, False
            if stop_when is not None and time.monotonic() >= next_check:
                asked = time.monotonic()
                if stop_when():
                    return False, False, True
                now = time.monotonic()
                next_check = now + max(STOP_CHECK_S, 10 * (now - asked))
            total = 0
            for path in (self.stdout_path, self.stderr_path):
                with contextlib.suppress(OSError):
                    total += path.stat().st_size
            if total > max_output_bytes:
                return False, True, False
            interval = min(interval * 2, 0.2)

    def terminate_tree(self) -> None:
        """SIGTERM the group and every tokened descendant (a soft stop; `kill_tree` ends it)."""
        self.signal_group(signal.SIGTERM)
        for member in tokened(self.token, self.pid):
            with contextlib.suppress(psutil.Error):
                member.terminate()

    def _terminate(self, grace_s: float) -> None:
        """SIGTERM the group and every tokened descendant, wait `grace_s`, then SIGKILL."""
        self.terminate_tree()
        self.wait_exit(grace_s)
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()


def spawn(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    stdout_path: Path,
    stderr_path: Path,
    append: bool = True,
    pass_fds: Sequence[int] = (),
    open_fds: tuple[int | None, int | None] = (None, None),
    own_session: bool = True,
) -> Process:
    """Start `argv` in its own session, stdin from /dev/null, output to files.

    Output is appended to the files (or replaces them, `append=False`). The child carries a
    fresh token (`TOKEN_ENV`) so `kill_tree` finds descendants that left its process group.
    A child of a run (`RUN_ID_ENV` in `env`) first joins a cgroup leaf of that run, which
    nothing it starts can leave (`tracking`), and the runner becomes non-dumpable, so the
    child cannot read the runner's environment through /proc.
    `pass_fds` stay open in the child (a socket to a resident sandbox's executor).
    `open_fds` are descriptors the caller already holds on `stdout_path` and
    `stderr_path` (`run`'s unnamed files), given to the child as they are.
    `own_session=False` starts it in a process group of its own, in the runner's session
    (only where the runner has no terminal: `has_terminal`).
    Raises OSError when the program cannot be started.
    """
    token = new_token()
    child_env = {**env, TOKEN_ENV: token}
    prefix, group = _run_prefix(env, token)
    flags = os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
    args = tuple(argv)
    try:
        with contextlib.ExitStack() as opened:
            out_fd, err_fd = (
                given if given is not None else _open_output(opened, path, flags)
                for given, path in zip(open_fds, (stdout_path, stderr_path), strict=True)
            )
            started = time.monotonic()
            popen = subprocess.Popen(
                (*prefix, *args),
                cwd=str(cwd),
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=out_fd,
                stderr=err_fd,
                start_new_session=own_session,
                process_group=None if own_session else 0,
                close_fds=True,
                pass_fds=tuple(pass_fds),
            )
    except BaseException:
        if group is not None:  # not started: the leaf goes back to the run, empty
            tracking.give_back(group)
        raise
    return Process(
        popen,
        token,
        argv=args,
        started=started,
        cwd=str(cwd),
        stdout_path=stdout_path,
        stderr_path=stderr_path,
        group=group,
    )


def has_terminal() -> bool:
    """Whether this process has a controlling terminal (an error other than "none" is
    taken for yes: a child then gets a session of its own, away from it)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        return exc.errno != errno.ENXIO
    os.close(fd)
    return True


def _open_output(opened: contextlib.ExitStack, path: Path, flags: int) -> int:
    """`path` opened for the child's output (a missing directory is made), closed with
    `opened`."""
    fd = open_no_follow(path, flags)
    opened.callback(os.close, fd)
    return fd


def _run_prefix(env: Mapping[str, str], leaf: str) -> tuple[list[str], Path | None]:
    """For a run's child: the argv prefix that joins its cgroup leaf (the run's spare, else
    a new one named `leaf`), and that leaf."""
    run_id = env.get(RUN_ID_ENV)
    if not run_id:
        return [], None
    make_undumpable()
    here = tracking.take_leaf(run_id, leaf)
    return ([], None) if here is None else (tracking.join_leaf_argv(here), here)


def hand_terminal(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    grace_s: float = DEFAULT_GRACE_S,
) -> int:
    """Give this terminal to `argv` until it exits (a `tmux attach` client); its exit code.

    The child inherits stdin, stdout and stderr and stays in our process group, so it is
    the terminal's foreground and Ctrl-C reaches it. It carries a token like any child:
    whatever it leaves behind is killed when it ends, or when we are interrupted.
    """
    token = new_token()
    prefix, group = _run_prefix(env, token)
    popen = subprocess.Popen(
        (*prefix, *argv), cwd=cwd, env={**env, TOKEN_ENV: token}, close_fds=True
    )
    try:
        returncode = popen.wait()
    except BaseException:
        with signals_deferred():
            with contextlib.suppress(ProcessLookupError):
                popen.terminate()
            try:
                popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        raise
    finally:
        if group is not None:
            tracking.give_back(group)
        kill_tokened(token, grace_s=grace_s)
    return exit_code_of(returncode)


def read_head_tail(path: Path, head_bytes: int, tail_bytes: int) -> tuple[str, int]:
    """Return (text, total_size): the whole file if small, else head + marker + tail."""
    try:
        if os.stat(path).st_size == 0:
            return "", 0
    except OSError:
        return "", 0
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return read_head_tail_fd(fd, head_bytes, tail_bytes)
    finally:
        os.close(fd)


def read_head_tail_fd(fd: int, head_bytes: int, tail_bytes: int) -> tuple[str, int]:
    """`read_head_tail` of an open file (read at offsets: its own offset is left alone)."""
    size = os.fstat(fd).st_size
    if size <= head_bytes + tail_bytes:
        return _read_at(fd, size, 0).decode("utf-8", errors="replace"), size
    head = _read_at(fd, head_bytes, 0)
    tail = _read_at(fd, tail_bytes, size - tail_bytes)
    omitted = size - head_bytes - tail_bytes
    text = (
        head.decode("utf-8", errors="replace")
        + f"\n[... {omitted} bytes omitted ...]\n"
        + tail.decode("utf-8", errors="replace")
    )
    return text, size


def _read_at(fd: int, count: int, offset: int) -> bytes:
    """Up to `count` bytes at `offset` (fewer only at the end of the file)."""
    chunks: list[bytes] = []
    while count > 0:
        chunk = os.pread(fd, count, offset)
        if not chunk:
            break
        chunks.append(chunk)
        count -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)

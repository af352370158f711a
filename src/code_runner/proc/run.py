"""Run a command to its end: `run` (output to files, a `ProcResult`) and `capture` (short
plumbing whose output is needed in memory, such as git).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import code_runner.proc.tracking as tracking
from code_runner.proc.outputs import open_no_follow
from code_runner.proc.process import (
    DEFAULT_HEAD_BYTES,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TAIL_BYTES,
    TIMEOUT_EXIT_CODE,
    ProcResult,
    StopCheck,
    has_terminal,
    spawn,
)
from code_runner.proc.tree import DEFAULT_GRACE_S, RUN_ID_ENV, signal_group

SCRATCH_PREFIX = "code-runner-proc-"  # + owner pid + "-": `stale_scratch` finds a dead one's


def stale_scratch() -> list[Path]:
    """Per-command scratch dirs in the system temp dir whose owner pid is gone (SIGKILLed)."""
    found: list[Path] = []
    root = Path(tempfile.gettempdir())
    for path in root.glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and path.is_dir():
            found.append(path)
    return found


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


class Launcher(Protocol):
    """What runs a command to its end with `run`'s contract: `run` itself, or a sandbox's
    `Session.run` (the command inside the session's resident sandbox)."""

    def __call__(
        self,
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
        stop_when: StopCheck | None = None,
    ) -> ProcResult: ...


def shell_argv(command: str) -> list[str]:
    """How a command string is run: bash without rc files, so results do not depend on them."""
    return [_bash(os.environ.get("PATH")), "--noprofile", "--norc", "-c", command]


@functools.lru_cache(maxsize=8)
def _bash(search_path: str | None) -> str:
    """Where `bash` is on `search_path`: looked up once per PATH, not once per command."""
    return shutil.which("bash", path=search_path) or "/bin/bash"


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
    stop_when: StopCheck | None = None,
) -> ProcResult:
    """Run `argv` to completion or timeout, killing its whole tree either way; also when
    `stop_when` (asked while it runs) returns True (`ProcResult.stopped`).

    The command gets a process group of its own, and a session of its own too where the
    runner has a terminal (so the command cannot read it).

    A program that cannot be started is exit code 127 with the reason in stderr, as in a
    shell, not an exception. Output the caller does not keep goes to anonymous files,
    which need no directory and vanish with the runner, however it ends.
    """
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        out_path, out_fd = (stdout_path, None) if stdout_path else _anonymous(stack)
        err_path, err_fd = (stderr_path, None) if stderr_path else _anonymous(stack)
        try:
            process = spawn(
                argv,
                cwd=cwd,
                env=env,
                stdout_path=out_path,
                stderr_path=err_path,
                append=False,
                open_fds=(out_fd, err_fd),
                own_session=has_terminal(),
            )
        except OSError as exc:
            return _not_started(tuple(argv), str(cwd), err_path, exc, started)
        return process.wait(
            timeout_s,
            max_output_bytes=max_output_bytes,
            head_bytes=head_bytes,
            tail_bytes=tail_bytes,
            grace_s=grace_s,
            stop_when=stop_when,
        )
    raise AssertionError("unreachable")  # pragma: no cover - the with block returns


def _anonymous(stack: contextlib.ExitStack) -> tuple[Path, int | None]:
    """A file with no name in any directory, for the life of `stack`: its path through
    /proc/self/fd and its descriptor; a file in a per-command scratch dir (and None) where
    /proc is missing."""
    if not os.path.isdir("/proc/self/fd"):
        scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
        stack.callback(shutil.rmtree, scratch, ignore_errors=True)
        return Path(scratch) / "output", None
    fd = _unnamed_fd()
    stack.callback(os.close, fd)
    return Path(f"/proc/self/fd/{fd}"), fd


def _unnamed_fd() -> int:
    """A descriptor of a new file with no name: in memory (`memfd_create`: no disk, no
    journal) where the kernel has it, else in the temp dir (O_TMPFILE), else one named
    and unlinked at once (`tempfile.TemporaryFile`). Its size is the output cap's to
    bound, as any output file's."""
    with contextlib.suppress(AttributeError, OSError):
        return os.memfd_create("code-runner-output", os.MFD_CLOEXEC)
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        flags = tmpfile | os.O_RDWR | os.O_EXCL | os.O_CLOEXEC
        with contextlib.suppress(OSError):
            return os.open(tempfile.gettempdir(), flags, 0o600)
    with tempfile.TemporaryFile() as unnamed:
        return os.dup(unnamed.fileno())


def _not_started(
    argv: tuple[str, ...], cwd: str, err_path: Path, exc: OSError, started: float
) -> ProcResult:
    message = f"could not start {argv[0]!r}: {exc.strerror or exc}"
    with os.fdopen(open_no_follow(err_path, os.O_WRONLY | os.O_APPEND), "ab") as err_f:
        err_f.write(f"{message}\n".encode())
    return ProcResult(
        argv=argv,
        cwd=cwd,
        exit_code=127,
        duration_s=time.monotonic() - started,
        stdout="",
        stderr=message,
        stdout_size=0,
        stderr_size=0,
    )


def capture(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str],
    timeout_s: float,
    input_bytes: bytes | None = None,
    stdin_file: IO[bytes] | None = None,
    stdout_file: IO[bytes] | None = None,
) -> Captured:
    """Run a short plumbing command and keep its output in memory (git and friends).

    A large input or output streams instead: `stdin_file` is read by the command and
    `stdout_file` written by it (then `Captured.stdout` is empty); stderr is always kept.

    A run's plumbing (`RUN_ID_ENV` in `env`) joins the run's shared cgroup leaf: a daemon
    it starts on purpose (a tmux server) outlives the call, but not the run's `gc`.
    """
    args = tuple(argv)
    run_id = env.get(RUN_ID_ENV)
    prefix = tracking.join_argv(run_id, tracking.SHARED_LEAF)[0] if run_id else []
    try:
        popen = subprocess.Popen(
            (*prefix, *args),
            cwd=cwd,
            env=dict(env),
            stdin=(
                stdin_file
                if stdin_file is not None
                else subprocess.PIPE
                if input_bytes is not None
                else subprocess.DEVNULL
            ),
            stdout=stdout_file if stdout_file is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return Captured(args, 127, b"", f"could not start {args[0]!r}: {exc}".encode())
    try:
        out, err = popen.communicate(input=input_bytes, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        signal_group(popen.pid, signal.SIGKILL)
        out, err = popen.communicate()
        return Captured(args, TIMEOUT_EXIT_CODE, out or b"", err, timed_out=True)
    return Captured(args, popen.returncode, out or b"", err)

"""Supervise one run of an agent CLI: timeouts, idle detection, stop requests, blockers.

The CLI writes its stdout and stderr to files in the record (directly, or through the
tmux pane's launcher); the supervisor polls them, feeds complete lines to the backend's
translator, and ends the run on the first of:

- the CLI exits (`EXITED`);
- a known failure text in its error output (`BLOCKED`), at once;
- no output growth for `idle_timeout_s` (`IDLE_TIMEOUT`): both CLIs are known to hang
  without a word in headless runs;
- the wall clock (`TIMEOUT`), the output cap (`OUTPUT_LIMIT`), or a stop request
  (`STOPPED`, from `code-runner stop`).

Whatever the ending, the whole process tree is killed afterwards (daemons a CLI left
behind included) with signals deferred, so an interrupt cannot cut the kill short.
"""

from __future__ import annotations

import contextlib
import errno
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from code_runner import proc
from code_runner.agents.cli_agents.blockers import Blocker, not_installed
from code_runner.agents.cli_agents.tmux import PaneFiles, TmuxPane
from code_runner.agents.cli_agents.translate import Translator

DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
_MAX_LINE_BYTES = 8 * 1024 * 1024
_READ_CHUNK_BYTES = 4 * 1024 * 1024  # per stream per poll
_POLL_S = 0.1


class Ending(StrEnum):
    EXITED = "exited"
    BLOCKED = "blocked"
    IDLE_TIMEOUT = "idle_timeout"
    TIMEOUT = "timeout"
    OUTPUT_LIMIT = "output_limit"
    STOPPED = "stopped"
    START_FAILED = "start_failed"


@dataclass(frozen=True)
class Launch:
    """What to run, where, with which environment, and where its output goes."""

    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]
    stdout_path: Path
    stderr_path: Path


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    idle_timeout_s: float
    grace_s: float = proc.DEFAULT_GRACE_S
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    poll_s: float = _POLL_S


@dataclass(frozen=True)
class TmuxPlan:
    """Run in a tmux pane instead of as a direct child."""

    socket: Path
    files: PaneFiles
    banner: str
    info: Mapping[str, Any]


@dataclass(frozen=True)
class Supervised:
    ending: Ending
    exit_code: int | None
    duration_s: float
    silent_s: float  # seconds since the last output when the run ended
    killed: int  # processes killed after the end (beyond the CLI itself)
    output_bytes: int
    blocker: Blocker | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "ending": self.ending.value,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
            "silent_s": round(self.silent_s, 3),
            "killed": self.killed,
            "output_bytes": self.output_bytes,
            "blocker": self.blocker.to_dict() if self.blocker else None,
            "detail": self.detail,
        }


class _Running(Protocol):
    def exit_code(self) -> int | None: ...

    def kill(self, grace_s: float) -> int: ...


class _Child:
    """A direct child (`proc.spawn`)."""

    def __init__(self, launch: Launch) -> None:
        self.spawned = proc.spawn(
            launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            stdout_path=launch.stdout_path,
            stderr_path=launch.stderr_path,
        )

    def exit_code(self) -> int | None:
        return self.spawned.poll()

    def kill(self, grace_s: float) -> int:
        return self.spawned.kill_tree(grace_s)


class _LineReader:
    """Complete lines appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.pending = b""

    def read(self, *, final: bool = False, max_bytes: int = _READ_CHUNK_BYTES) -> list[str]:
        """New complete lines, reading at most `max_bytes` (a flood must not stall us)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read(max_bytes)
        except OSError:
            data = b""
        self.offset += len(data)
        buffer = self.pending + data
        lines = buffer.split(b"\n")
        self.pending = lines.pop()
        if final or len(self.pending) > _MAX_LINE_BYTES:
            if self.pending:
                lines.append(self.pending)
            self.pending = b""
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]


def _on_disk(readers: tuple[_LineReader, ...]) -> int:
    """Bytes written so far: the cap is checked against the files, not what was parsed."""
    total = 0
    for reader in readers:
        with contextlib.suppress(OSError):
            total += reader.path.stat().st_size
    return total


def supervise(
    launch: Launch,
    limits: Limits,
    translator: Translator,
    *,
    stop_requested: Callable[[], bool] = lambda: False,
    tmux: TmuxPlan | None = None,
) -> Supervised:
    """Run `launch` to one of the endings; the tree is always gone afterwards."""
    started = time.monotonic()
    for path in (launch.stdout_path, launch.stderr_path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    running: _Running
    try:
        if tmux is None:
            running = _Child(launch)
        else:
            running = TmuxPane.start(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                files=tmux.files,
                socket=tmux.socket,
                banner=tmux.banner,
                info=tmux.info,
            )
    except OSError as exc:
        blocker = None
        if exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC):
            blocker = not_installed(launch.argv[0], exc.strerror or str(exc))
        return Supervised(
            Ending.BLOCKED if blocker else Ending.START_FAILED,
            None,
            time.monotonic() - started,
            0.0,
            0,
            0,
            blocker=blocker,
            detail=f"could not start {launch.argv[0]!r}: {exc.strerror or exc}",
        )
    readers = (_LineReader(launch.stdout_path), _LineReader(launch.stderr_path))
    total = 0
    last_growth = started

    def pump(final: bool = False) -> int:
        grown = 0
        for reader, feed in zip(
            readers, (translator.stdout_line, translator.stderr_line), strict=True
        ):
            before = reader.offset
            for line in reader.read(final=final):
                feed(line)
            grown += reader.offset - before
        return grown

    ending = Ending.EXITED
    code: int | None = None
    detail = ""
    try:
        while True:
            code = running.exit_code()
            now = time.monotonic()
            grown = pump()
            if grown:
                total += grown
                last_growth = now
            if translator.state.blocker is not None:
                ending = Ending.BLOCKED
                break
            if code is not None:
                break
            if stop_requested():
                ending, detail = Ending.STOPPED, "a stop was requested (code-runner stop)"
                break
            if now - started > limits.timeout_s:
                ending = Ending.TIMEOUT
                detail = f"the CLI ran longer than {limits.timeout_s:g} s"
                break
            if now - last_growth > limits.idle_timeout_s:
                ending = Ending.IDLE_TIMEOUT
                detail = f"the CLI wrote nothing for {limits.idle_timeout_s:g} s"
                break
            if total > limits.max_output_bytes or _on_disk(readers) > limits.max_output_bytes:
                ending = Ending.OUTPUT_LIMIT
                detail = f"the CLI wrote more than {limits.max_output_bytes} bytes"
                break
            time.sleep(limits.poll_s)
    finally:
        killed = running.kill(limits.grace_s)
    ended = time.monotonic()
    while total <= limits.max_output_bytes:  # drain what is left, chunk by chunk, up to the cap
        grown = pump()
        if not grown:
            break
        total += grown
    total += pump(final=True)
    if code is None and ending is Ending.EXITED:
        code = running.exit_code()
    translator.finish(code)
    blocker = translator.state.blocker
    if blocker is not None and ending in (Ending.EXITED, Ending.BLOCKED):
        ending = Ending.BLOCKED
        detail = blocker.reason
    elif code == 127 and ending is Ending.EXITED:
        blocker = not_installed(launch.argv[0], "exit code 127 (command not found)")
        ending, detail = Ending.BLOCKED, blocker.reason
    return Supervised(
        ending=ending,
        exit_code=code,
        duration_s=ended - started,
        silent_s=ended - last_growth,
        killed=killed,
        output_bytes=total,
        blocker=blocker if ending is Ending.BLOCKED else None,
        detail=detail,
    )


__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "Ending",
    "Launch",
    "Limits",
    "Supervised",
    "TmuxPlan",
    "supervise",
]

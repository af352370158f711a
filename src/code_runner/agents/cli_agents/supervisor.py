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
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from code_runner import files, proc
from code_runner.agents.cli_agents.blockers import Blocker, not_installed
from code_runner.agents.cli_agents.tmux import PaneFiles, TmuxPane
from code_runner.agents.cli_agents.translate import Translator

DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
_MAX_LINE_BYTES = 8 * 1024 * 1024
_READ_CHUNK_BYTES = 4 * 1024 * 1024  # per stream per poll
_POLL_S = 0.1
DISK_CHECK_S = 0.5  # how often the disk budget is asked at the most (as for a command)


class Ending(StrEnum):
    EXITED = "exited"
    BLOCKED = "blocked"
    IDLE_TIMEOUT = "idle_timeout"
    TIMEOUT = "timeout"
    OUTPUT_LIMIT = "output_limit"
    STOPPED = "stopped"
    START_FAILED = "start_failed"
    SCOPE_EXPANSION = "scope_expansion"  # a write outside the owned paths, with on_scope: stop
    DISK_BUDGET = "disk_budget"  # the run wrote more than `limits.disk_mb`


@dataclass(frozen=True)
class SupervisedCommand:
    """What to run, where, with which environment, and where its output goes."""

    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]
    stdout_path: Path
    stderr_path: Path


@dataclass(frozen=True)
class SupervisionLimits:
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

    def __init__(self, command: SupervisedCommand) -> None:
        self.process = proc.spawn(
            command.argv,
            cwd=command.cwd,
            env=command.env,
            stdout_path=command.stdout_path,
            stderr_path=command.stderr_path,
        )

    def exit_code(self) -> int | None:
        return self.process.poll()

    def kill(self, grace_s: float) -> int:
        return self.process.kill_tree(grace_s)


class _LineReader:
    """Complete lines appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.pending = b""

    def read(self, *, final: bool = False, max_bytes: int = _READ_CHUNK_BYTES) -> list[str]:
        """New complete lines, reading at most `max_bytes` (a flood must not stall us)."""
        try:
            # never through a link or into a FIFO planted at the log's name
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                f.seek(self.offset)
                data = f.read(max_bytes) or b""
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


class OutputStreams:
    """The CLI's two output files, read as they grow and fed line by line to the translator."""

    def __init__(self, command: SupervisedCommand, translator: Translator) -> None:
        self.readers = (_LineReader(command.stdout_path), _LineReader(command.stderr_path))
        self.feeds = (translator.stdout_line, translator.stderr_line)
        self.total = 0  # bytes read so far

    def pump(self, *, final: bool = False) -> int:
        """Read and feed what was appended since the last call; how many bytes that was."""
        grown = 0
        for reader, feed in zip(self.readers, self.feeds, strict=True):
            before = reader.offset
            for line in reader.read(final=final):
                feed(line)
            grown += reader.offset - before
        self.total += grown
        return grown

    def on_disk(self) -> int:
        """Bytes written so far: the cap is checked against the files, not what was parsed."""
        total = 0
        for reader in self.readers:
            with contextlib.suppress(OSError):
                total += reader.path.stat().st_size
        return total

    def drain(self, max_bytes: int) -> None:
        """What is left after the end, chunk by chunk up to the cap, then the last partial line."""
        while self.total <= max_bytes and self.pump():
            pass
        self.pump(final=True)


@dataclass(frozen=True)
class Moment:
    """One poll of the run: what the ending checks look at."""

    elapsed_s: float
    silent_s: float  # since the output last grew
    exit_code: int | None


class EndingCheck(Protocol):
    """One way a run ends: `None` while it does not apply, else the ending and why."""

    def check(self, moment: Moment) -> tuple[Ending, str] | None: ...


@dataclass(frozen=True)
class BlockerSeen:
    """A known failure text in the output ends the run at once, even as the CLI exits."""

    translator: Translator

    def check(self, moment: Moment) -> tuple[Ending, str] | None:
        return (Ending.BLOCKED, "") if self.translator.state.blocker is not None else None


class Exited:
    """The CLI exited by itself."""

    def check(self, moment: Moment) -> tuple[Ending, str] | None:
        return (Ending.EXITED, "") if moment.exit_code is not None else None


@dataclass(frozen=True)
class StopRequested:
    """`code-runner stop` asked the run to end."""

    requested: Callable[[], bool]

    def check(self, moment: Moment) -> tuple[Ending, str] | None:
        if self.requested():
            return Ending.STOPPED, "a stop was requested (code-runner stop)"
        return None


@dataclass(frozen=True)
class WallClock:
    """The round's time is up."""

    timeout_s: float

    def check(self, moment: Moment) -> tuple[Ending, str] | None:
        if moment.elapsed_s > self.timeout_s:
            return Ending.TIMEOUT, f"the CLI ran longer than {self.timeout_s:.3g} s"
        return None


@dataclass(frozen=True)
class IdleTimeout:
    """No output growth for too long: both CLIs are known to hang without a word."""

    idle_timeout_s: float

    def check(self, moment: Moment) -> tuple[Ending, str] | None:
        if moment.silent_s > self.idle_timeout_s:
            return Ending.IDLE_TIMEOUT, f"the CLI wrote nothing for {self.idle_timeout_s:g} s"
        return None


@dataclass(frozen=True)
class OutputCap:
    """More output than the cap, read or still unread on disk."""

    max_output_bytes: int
    streams: OutputStreams

    def check(self, moment: Moment) -> tuple[Ending, str] | None:
        cap = self.max_output_bytes
        if self.streams.total > cap or self.streams.on_disk() > cap:
            return Ending.OUTPUT_LIMIT, f"the CLI wrote more than {cap} bytes"
        return None


@dataclass
class DiskBudget:
    """The run's disk budget (`limits.disk_mb`), asked while the CLI runs, as it is while a
    command runs: at most every `check_s`, and less often when the question is slow (a
    large tree), so the round is stopped soon after it passes the budget."""

    over: Callable[[], bool]
    check_s: float = DISK_CHECK_S
    next_s: float = 0.0

    def check(self, moment: Moment) -> tuple[Ending, str] | None:
        if moment.elapsed_s < self.next_s:
            return None
        asked = time.monotonic()
        if self.over():
            return Ending.DISK_BUDGET, (
                "the round wrote more than the run's disk budget (limits.disk_mb); "
                "the CLI was stopped"
            )
        self.next_s = moment.elapsed_s + max(self.check_s, 10 * (time.monotonic() - asked))
        return None


def ending_checks(
    limits: SupervisionLimits,
    translator: Translator,
    streams: OutputStreams,
    stop_requested: Callable[[], bool],
) -> tuple[EndingCheck, ...]:
    """The endings, in the order they are decided when several hold at once."""
    return (
        BlockerSeen(translator),
        Exited(),
        StopRequested(stop_requested),
        WallClock(limits.timeout_s),
        IdleTimeout(limits.idle_timeout_s),
        OutputCap(limits.max_output_bytes, streams),
    )


def supervise(
    command: SupervisedCommand,
    limits: SupervisionLimits,
    translator: Translator,
    *,
    stop_requested: Callable[[], bool] = lambda: False,
    tmux: TmuxPlan | None = None,
    watchers: Sequence[EndingCheck] = (),
) -> Supervised:
    """Run `command` to one of the endings; the tree is always gone afterwards.

    `watchers` are polled with the endings (after a stop request, before the clocks): a
    live watch of the work tree that reports as it goes and may end the round."""
    started = time.monotonic()
    for path in (command.stdout_path, command.stderr_path):
        files.touch(path)  # never through a link planted at the log's name
    try:
        running = _start(command, tmux)
    except OSError as exc:
        return _not_started(command, exc, time.monotonic() - started)
    streams = OutputStreams(command, translator)
    checks = ending_checks(limits, translator, streams, stop_requested)
    checks = (*checks[:3], *watchers, *checks[3:])
    last_growth = started
    try:
        while True:
            code = running.exit_code()
            now = time.monotonic()
            if streams.pump():
                last_growth = now
            found = _first_ending(checks, Moment(now - started, now - last_growth, code))
            if found is not None:
                ending, detail = found
                break
            time.sleep(limits.poll_s)
    finally:
        killed = running.kill(limits.grace_s)
    ended = time.monotonic()
    streams.drain(limits.max_output_bytes)
    if code is None and ending is Ending.EXITED:
        code = running.exit_code()
    translator.finish(code)
    blocker, ending, detail = _blocker(command, translator, ending, detail, code)
    return Supervised(
        ending=ending,
        exit_code=code,
        duration_s=ended - started,
        silent_s=ended - last_growth,
        killed=killed,
        output_bytes=streams.total,
        blocker=blocker if ending is Ending.BLOCKED else None,
        detail=detail,
    )


def _first_ending(checks: tuple[EndingCheck, ...], moment: Moment) -> tuple[Ending, str] | None:
    for check in checks:
        found = check.check(moment)
        if found is not None:
            return found
    return None


def _start(command: SupervisedCommand, tmux: TmuxPlan | None) -> _Running:
    if tmux is None:
        return _Child(command)
    return TmuxPane.start(
        command.argv,
        cwd=command.cwd,
        env=command.env,
        files=tmux.files,
        socket=tmux.socket,
        banner=tmux.banner,
        info=tmux.info,
    )


def _not_started(command: SupervisedCommand, exc: OSError, duration_s: float) -> Supervised:
    blocker = None
    if exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC):
        blocker = not_installed(command.argv[0], exc.strerror or str(exc))
    return Supervised(
        Ending.BLOCKED if blocker else Ending.START_FAILED,
        None,
        duration_s,
        0.0,
        0,
        0,
        blocker=blocker,
        detail=f"could not start {command.argv[0]!r}: {exc.strerror or exc}",
    )


def _blocker(
    command: SupervisedCommand,
    translator: Translator,
    ending: Ending,
    detail: str,
    code: int | None,
) -> tuple[Blocker | None, Ending, str]:
    """A blocker seen in the output, or a missing program (exit 127), names the ending."""
    blocker = translator.state.blocker
    if blocker is not None and ending in (Ending.EXITED, Ending.BLOCKED):
        return blocker, Ending.BLOCKED, blocker.reason
    if code == 127 and ending is Ending.EXITED:
        blocker = not_installed(command.argv[0], "exit code 127 (command not found)")
        return blocker, Ending.BLOCKED, blocker.reason
    return blocker, ending, detail


__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "BlockerSeen",
    "Ending",
    "EndingCheck",
    "Exited",
    "IdleTimeout",
    "Moment",
    "OutputCap",
    "OutputStreams",
    "StopRequested",
    "Supervised",
    "SupervisedCommand",
    "SupervisionLimits",
    "TmuxPlan",
    "WallClock",
    "ending_checks",
    "supervise",
]

"""Start a long-running command without blocking, sample its process tree, kill it whole.

The command is started by `proc.spawn` (own session, stdin from /dev/null, output to files,
the `proc.TOKEN_ENV` token in its environment), with this process a child subreaper; a
`Launched` adds what the monitor needs on top of that `proc.Process`: the tree, sampled.
The tree is every process seen under the command, plus any process carrying the token (a
`setsid` escapee re-parented to us). Handles are cached so a check costs little.

Tree CPU time counts each CPU-second once: live processes' own and reaped-children times,
plus what this process has reaped (the command itself and orphans it adopted).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict

from code_runner import proc
from code_runner.errors import UsageError

_POLL_S = 0.02


@dataclass(frozen=True)
class TreeSample:
    """One look at the whole tree: size, cumulative CPU, summed RSS and PSS, biggest members."""

    processes: int
    cpu_s: float
    rss_bytes: int
    pss_bytes: int | None
    largest: tuple[tuple[int, str, int], ...]


class KillReport(BaseModel):
    """How a tree kill went; `survivors` must be empty, `last_gone_s` is from the first signal."""

    model_config = ConfigDict(frozen=True)

    signalled: int
    needed_sigkill: int
    last_gone_s: float
    survivors: tuple[int, ...]


class Launched:
    """A running command. Not thread-safe; one monitor loop owns it."""

    def __init__(self, process: proc.Process) -> None:
        self.process = process
        self.pid = process.pid
        self.token = process.token
        self.started_s = process.started
        self._me = psutil.Process()
        self._known: dict[int, psutil.Process] = {}
        self._parents: dict[int, int] = {}
        self._cpu_reaped_base = _reaped_cpu_s()
        self._last_cpu_s = 0.0
        self.exclude: set[int] = set()  # our children that are not the command's (the watchdog)
        self.pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self.pidfd = os.pidfd_open(process.pid)
        with contextlib.suppress(psutil.Error):
            self._known[process.pid] = psutil.Process(process.pid)

    def poll(self) -> int | None:
        """The exit code once the command has exited (128+N for signal N), else None."""
        return self.process.poll()

    @property
    def returncode(self) -> int | None:
        """The raw return code (negative: killed by that signal), None while it runs."""
        return self.process.returncode

    def _refresh(self) -> tuple[dict[int, ProcStat], list[int]]:
        """One pass over /proc: every process's stat line, and which pids are ours.

        Only pids not seen before get a psutil handle (and an environ read), so a check of
        a stable tree costs one small read per process on the machine, plus PSS if asked.
        """
        stats = _scan_proc()
        self._parents = {pid: st.ppid for pid, st in stats.items()}
        children: dict[int, list[int]] = {}
        for pid, st in stats.items():
            children.setdefault(st.ppid, []).append(pid)
        for gone in [pid for pid in self._known if pid not in stats]:
            del self._known[gone]
        ours: list[int] = []
        stack = list(children.get(os.getpid(), []))
        while stack:
            pid = stack.pop()
            stack.extend(children.get(pid, []))
            if pid in self._known or self._adopt(pid):
                ours.append(pid)
        return stats, ours

    def members(self) -> list[psutil.Process]:
        """Live processes of the tree (handles are cached between calls)."""
        _, ours = self._refresh()
        return [self._known[pid] for pid in ours]

    def _adopt(self, pid: int) -> bool:
        """A new pid under us is ours if it descends from the command, carries our token, or
        was re-parented to us (an `env -i setsid` escapee whose parent exited)."""
        if pid in self.exclude:
            return False
        try:
            member = psutil.Process(pid)
        except psutil.Error:
            return False
        if self._descends(pid) or self._parents.get(pid) == os.getpid() or self._has_token(member):
            self._known[pid] = member
            return True
        return False

    def _descends(self, pid: int) -> bool:
        for _ in range(4096):
            if pid == self.pid:
                return True
            if pid <= 1:
                return False
            pid = self._parents.get(pid, 0)
        return False

    def _has_token(self, member: psutil.Process) -> bool:
        try:
            return member.environ().get(proc.TOKEN_ENV) == self.token
        except (psutil.Error, OSError):
            return False

    def sample(self, *, with_pss: bool = True) -> TreeSample:
        """Sum CPU and memory over the tree; PSS is optional because smaps costs more."""
        stats, ours = self._refresh()
        cpu = 0.0
        rss = 0
        pss: int | None = 0 if with_pss else None
        sizes: list[tuple[int, str, int]] = []
        for pid in ours:
            st = stats[pid]
            cpu += st.cpu_s
            if st.state == "Z":
                continue
            rss += st.rss_bytes
            sizes.append((pid, st.name, st.rss_bytes))
            if pss is not None:
                pss += _pss_bytes(pid)
        self._reap_adopted()
        cpu += _reaped_cpu_s() - self._cpu_reaped_base
        # A process dying between reads can make the sum dip; CPU time never goes back.
        self._last_cpu_s = max(self._last_cpu_s, cpu)
        sizes.sort(key=lambda item: -item[2])
        return TreeSample(len(ours), self._last_cpu_s, rss, pss, tuple(sizes[:3]))

    def _reap_adopted(self) -> None:
        """Wait for orphans re-parented to us (subreaper), never for the command itself.

        `waitpid(WNOHANG)` on a live child returns at once, so no status read is needed.
        """
        me = os.getpid()
        for pid in list(self._known):
            if pid != self.pid and self._parents.get(pid) == me:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)

    def _alive(self) -> list[psutil.Process]:
        alive: list[psutil.Process] = []
        self.process.poll()
        self._reap_adopted()
        self.members()
        for member in list(self._known.values()):
            try:
                if member.is_running() and member.status() != psutil.STATUS_ZOMBIE:
                    alive.append(member)
            except psutil.Error:
                continue
        return alive

    def send_signal(self, sig: int) -> None:
        """Signal the command itself (a user's graceful stop sends SIGINT this way)."""
        self.process.send_signal(sig)

    def terminate_tree(self, grace_s: float) -> KillReport:
        """SIGTERM the group and every member, wait `grace_s`, SIGKILL the rest, reap."""
        began = time.monotonic()
        targets = self._alive()
        self.process.signal_group(signal.SIGTERM)
        for member in targets:
            with contextlib.suppress(psutil.Error):
                member.terminate()
        alive = self._wait_gone(began + grace_s, resignal=signal.SIGTERM)
        needed_kill = len(alive)
        if alive:
            self.process.signal_group(signal.SIGKILL)
            alive = self._wait_gone(time.monotonic() + 5.0, resignal=signal.SIGKILL)
        gone_s = time.monotonic() - began
        self.process.wait_exit(1.0)
        self._reap_adopted()
        return KillReport(
            signalled=len(targets),
            needed_sigkill=needed_kill,
            last_gone_s=round(gone_s, 3),
            survivors=tuple(p.pid for p in alive),
        )

    def _wait_gone(self, deadline: float, *, resignal: int) -> list[psutil.Process]:
        """Poll until the tree is empty or the deadline; newcomers get `resignal` too."""
        signalled: set[int] = set()
        while True:
            alive = self._alive()
            for member in alive:
                if resignal == signal.SIGKILL or member.pid not in signalled:
                    with contextlib.suppress(psutil.Error):
                        member.send_signal(resignal)
                    signalled.add(member.pid)
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(_POLL_S)

    def close(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None


def launch(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdout_path: Path,
    stderr_path: Path,
) -> Launched:
    """Start `argv` exactly as given, in its own session, output to files, stdin /dev/null."""
    proc.become_subreaper()
    try:
        process = proc.spawn(
            argv, cwd=cwd, env=env, stdout_path=stdout_path, stderr_path=stderr_path, append=False
        )
    except FileNotFoundError:
        raise UsageError(
            f"cannot start {argv[0]!r}: no such program (in {cwd})",
            fix="check the program name and PATH; to run a shell command line, pass it to "
            "bash -c '...' or give `command:` as one string in a spec file",
        ) from None
    except PermissionError:
        raise UsageError(
            f"cannot start {argv[0]!r}: permission denied",
            fix=f"make it executable (chmod +x {argv[0]}) or run it through its interpreter",
        ) from None
    except OSError as exc:
        raise UsageError(
            f"cannot start {argv[0]!r}: {exc.strerror or exc}",
            fix="check the command and the working directory",
        ) from None
    return Launched(process)


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat a check needs."""

    ppid: int
    state: str
    cpu_s: float
    rss_bytes: int
    name: str


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _scan_proc() -> dict[int, ProcStat]:
    """Every process's stat line in one pass (one read each): parent, state, CPU, RSS."""
    if not Path("/proc/self/stat").exists():
        return _scan_psutil()
    result: dict[int, ProcStat] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        data = _read_small(f"/proc/{entry}/stat")
        if not data:
            continue
        close = data.rfind(b")")
        fields = data[close + 2 :].split()
        if len(fields) < 22:
            continue
        # fields[0] is field 3 of proc(5): state, ppid, ..., utime=14, stime=15,
        # cutime=16, cstime=17, ..., rss=24 (pages).
        ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        result[int(entry)] = ProcStat(
            ppid=int(fields[1]),
            state=fields[0].decode(),
            cpu_s=ticks / _CLK_TCK,
            rss_bytes=int(fields[21]) * _PAGE,
            name=data[data.find(b"(") + 1 : close].decode(errors="replace"),
        )
    return result


def _read_small(path: str) -> bytes:
    """One open/read/close without Python's buffered file object (3x cheaper on /proc)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.read(fd, 8192)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _scan_psutil() -> dict[int, ProcStat]:
    """The same, through psutil, where there is no /proc (slower, portable)."""
    result: dict[int, ProcStat] = {}
    attrs = ["ppid", "status", "cpu_times", "memory_info", "name"]
    for member in psutil.process_iter(attrs):
        info = member.info
        times = info.get("cpu_times")
        mem = info.get("memory_info")
        cpu = sum(times[:4]) if times else 0.0
        zombie = info.get("status") == psutil.STATUS_ZOMBIE
        result[member.pid] = ProcStat(
            ppid=info.get("ppid") or 0,
            state="Z" if zombie else "R",
            cpu_s=float(cpu),
            rss_bytes=mem.rss if mem else 0,
            name=info.get("name") or "?",
        )
    return result


def _pss_bytes(pid: int) -> int:
    """Proportional set size from smaps_rollup (shared pages divided among their users)."""
    data = _read_small(f"/proc/{pid}/smaps_rollup")
    start = data.find(b"\nPss:")
    if start >= 0:
        with contextlib.suppress(ValueError, IndexError):
            return int(data[start + 5 :].split()[0]) * 1024
    try:
        return int(getattr(psutil.Process(pid).memory_full_info(), "pss", 0))
    except psutil.Error:
        return 0


def _reaped_cpu_s() -> float:
    times = os.times()
    return times.children_user + times.children_system


def check_launchable(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> None:
    """Fail before anything is created when the directory or the program is not there."""
    if not cwd.is_dir():
        raise UsageError(
            f"working directory {cwd} does not exist or is not a directory",
            fix="pass an existing directory to --cwd (or `cwd:` in the spec file)",
        )
    program = argv[0]
    if "/" in program:
        path = Path(program) if Path(program).is_absolute() else cwd / program
        if not path.exists():
            raise UsageError(
                f"cannot start {program!r}: {path} does not exist",
                fix="check the path; relative paths are taken from --cwd",
            )
        return
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        hint = " (it contains spaces: a whole shell command line?)" if " " in program else ""
        raise UsageError(
            f"cannot start {program!r}: not found on PATH{hint}",
            fix="check the program name and PATH; to run a shell command line, pass it to "
            "bash -c '...' or give `command:` as one string in a spec file",
        )

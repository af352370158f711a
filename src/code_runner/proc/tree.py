"""Process trees: the token that marks a tree, and ending a tree whole.

Every child gets a fresh token in its environment (`TOKEN_ENV`), so descendants which
`setsid` away from its process group can still be found and killed. The runner makes itself
a child subreaper, so such orphans are re-parented to it and can be reaped.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import select
import signal
import time
import uuid

import psutil

import code_runner.proc.tracking as tracking
from code_runner.proc.signals import signals_deferred

TOKEN_ENV = "CODE_RUNNER_PROC_TOKEN"  # noqa: S105 (a name, not a secret)
RUN_ID_ENV = "CODE_RUNNER_RUN_ID"  # set in every agent command and DoD by the runner
DEFAULT_GRACE_S = 2.0
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_DUMPABLE = 4
_WALL = 0x40000000  # waitid's __WALL: children of any kind (the os module has no name for it)


def new_token() -> str:
    return uuid.uuid4().hex


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, loaded once (a `dlopen` per command is a tenth of a millisecond)."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _prctl(option: int, arg: int) -> bool:
    libc = _libc()
    try:
        return libc is not None and int(libc.prctl(option, arg, 0, 0, 0)) == 0
    except AttributeError:
        return False


def become_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants (Linux only). Idempotent."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def make_undumpable() -> bool:
    """Make this process non-dumpable: its /proc files (environ, mem, fds) become root's,
    so a child running as the same user cannot read the runner's environment or memory,
    nor ptrace it. No core dumps either. Idempotent; False where prctl is missing."""
    return _prctl(_PR_SET_DUMPABLE, 0)


def signal_group(pgid: int, sig: int) -> None:
    """Signal a process group; a group already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _children(pid: int) -> list[int] | None:
    """The children of `pid` from /proc (every thread's list); None where the kernel has no
    such file (CONFIG_PROC_CHILDREN off)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(child) for child in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int] | None:
    """Every live descendant of `pid`, read from its children lists: the work grows with
    the tree, not with the machine. None where /proc has no children lists."""
    found: list[int] = []
    todo = [pid]
    while todo:
        children = _children(todo.pop())
        if children is None:
            return None
        found.extend(children)
        todo.extend(children)
    return found


def _carries(pid: int, token: str) -> bool:
    needle = f"{TOKEN_ENV}={token}".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def has_children() -> bool:
    """Whether this process has a child (running, stopped or a zombie): one `waitid` that
    reaps nothing. Without one it has no descendants at all (an orphan re-parented to us,
    the subreaper, is a child)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL)
    except ChildProcessError:
        return False
    except OSError:
        return True  # not asked: the tree is read
    return True


def tokened(token: str, root_pid: int) -> list[psutil.Process]:
    """Live processes that carry `token`: descendants of ours, or orphans now ours."""
    found: list[psutil.Process] = []
    if not has_children():
        return found
    pids = descendants(os.getpid())
    if pids is None:  # no children lists: psutil builds the tree from every process
        try:
            pids = [p.pid for p in psutil.Process(os.getpid()).children(recursive=True)]
        except psutil.Error:
            return found
    for pid in pids:
        if pid == root_pid or not _carries(pid, token):
            continue
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


def kill_descendants(token: str, root_pid: int, grace_s: float) -> int:
    """Kill anything a command left behind (daemons, setsid escapees); reap our orphans."""
    signal_group(root_pid, signal.SIGKILL)
    leftovers = tokened(token, root_pid)
    if not leftovers:
        return 0
    _kill_all(leftovers, grace_s)
    _reap(leftovers)
    return len(leftovers)


def family(pid: int) -> list[psutil.Process]:
    """The live descendants of `pid` now, each pinned to its start time (a reused pid is
    not taken for it later), those in sessions of their own included."""
    pids = descendants(pid)
    if pids is None:
        try:
            return psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return []
    found: list[psutil.Process] = []
    for child in pids:
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(child))
    return found


def kill_processes(processes: list[psutil.Process], grace_s: float) -> int:
    """SIGKILL those of `processes` still running (the very processes, not a reused pid),
    wait up to `grace_s` for them to go, and reap ours; how many there were."""
    alive = [p for p in processes if p.is_running()]
    if alive:
        _kill_all(alive, grace_s)
        _reap(alive)
    return len(alive)


def _kill_all(processes: list[psutil.Process], grace_s: float) -> None:
    """SIGKILL each of `processes`, and wait up to `grace_s` for them to be gone."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    wait_gone(processes, grace_s)


def wait_gone(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to `timeout_s` for each of `processes` to exit; those still running.

    Woken by each exit (a pidfd per process, checked to be that very process once open),
    not by polling; psutil's polling where the kernel has no pidfds."""
    deadline = time.monotonic() + timeout_s
    watched: dict[int, psutil.Process] = {}
    try:
        for process in processes:
            try:
                fd = os.pidfd_open(process.pid)
            except ProcessLookupError:
                continue  # gone already
            except (AttributeError, OSError):
                return list(psutil.wait_procs(processes, timeout=timeout_s)[1])
            watched[fd] = process
            if not process.is_running():  # the pid is another process's now
                del watched[fd]
                os.close(fd)
        waiter = select.poll()
        for fd in watched:
            waiter.register(fd, select.POLLIN)
        pending = set(watched)
        while pending and (remaining := deadline - time.monotonic()) > 0:
            for fd, _ in waiter.poll(math.ceil(remaining * 1000)):
                waiter.unregister(fd)
                pending.discard(fd)
        return [watched[fd] for fd in pending]
    finally:
        for fd in watched:
            os.close(fd)


def kill_tokened(token: str, *, grace_s: float = DEFAULT_GRACE_S) -> int:
    """End every descendant of ours that carries `token` (SIGTERM, grace, SIGKILL); reap.

    For trees whose root is not our child (a tmux server: it daemonizes, and is found
    here because the runner is a child subreaper). Returns how many were signalled.
    """
    with signals_deferred():
        found = tokened(token, os.getpid())
        for child in found:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        alive = wait_gone(found, grace_s)
        _kill_all(alive, grace_s)
        _reap(found)
        return len(found)


def kill_run_processes(run_id: str, *, grace_s: float = DEFAULT_GRACE_S) -> tuple[int, ...]:
    """Kill processes a dead run left running: everything in the run's cgroup (`tracking`),
    then, for the fallback without one, what carries the run's id in its environment."""
    tracked = tracking.end_run(run_id)
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
    return tuple(sorted({*tracked, *(p.pid for p in found)}))


def _reap(processes: list[psutil.Process]) -> None:
    for gone in processes:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(gone.pid, os.WNOHANG)

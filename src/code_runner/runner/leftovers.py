"""The agent's leftover processes: found among the runner's descendants and killed.

The runner is a child subreaper, so a daemon or a `setsid env -i` escapee the agent started
is still its descendant after a round. What was already running under the host program when
the run began (a library caller's own children) is never taken for the agent's.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

from code_runner import proc


def _is_agents(candidate: psutil.Process, run_id: str, root: Path) -> bool:
    """A descendant of the runner that belongs to this run's agent: it carries the run's id,
    shed every marker the runner gives its children, or works inside the workspace."""
    try:
        env = candidate.environ()
        if env.get(proc.RUN_ID_ENV) == run_id:
            return True
        if proc.TOKEN_ENV not in env and proc.RUN_ID_ENV not in env:
            return True
        cwd = Path(candidate.cwd())
    except (psutil.Error, OSError):
        return False
    return cwd == root or root in cwd.parents


def own_descendants() -> frozenset[tuple[int, float]]:
    """(pid, start time) of every descendant of this process now: what a run started inside
    a program finds already there is the program's, never the agent's."""
    try:
        found = psutil.Process(os.getpid()).children(recursive=True)
    except psutil.Error:
        return frozenset()
    return frozenset(_identity(p) for p in found)


def tree_of(pid: int | None) -> frozenset[tuple[int, float]]:
    """(pid, start time) of `pid` and its descendants: a resident sandbox, idle between
    commands (its executor has already killed what each command left), never the agent's."""
    if pid is None:
        return frozenset()
    try:
        top = psutil.Process(pid)
        return frozenset(_identity(p) for p in (top, *top.children(recursive=True)))
    except psutil.Error:
        return frozenset()


def _identity(process: psutil.Process) -> tuple[int, float]:
    try:
        return process.pid, process.create_time()
    except psutil.Error:
        return process.pid, 0.0


def end_agent_processes(
    run_id: str,
    root: Path,
    grace_s: float = 1.0,
    *,
    before: frozenset[tuple[int, float]] = frozenset(),
) -> list[int]:
    """Kill every process the agent left (daemons, `setsid env -i` escapees): the runner is
    a child subreaper, so each is its descendant. The descendants that were already there
    when the run began (`before`, from `own_descendants`) are left alone. Returns the pids
    killed."""
    try:
        candidates = psutil.Process(os.getpid()).children(recursive=True)
    except psutil.Error:
        return []
    victims = [c for c in candidates if _identity(c) not in before and _is_agents(c, run_id, root)]
    for victim in victims:
        with contextlib.suppress(psutil.Error):
            victim.kill()
    psutil.wait_procs(victims, timeout=grace_s)
    for gone in victims:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(gone.pid, os.WNOHANG)
    return sorted(v.pid for v in victims)


__all__ = ["end_agent_processes", "own_descendants", "tree_of"]

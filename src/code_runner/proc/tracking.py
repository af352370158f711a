"""Tracking a run's processes by a cgroup, which a child cannot leave or shed.

Every process started for a run (its environment names the run: `RUN_ID_ENV`) first joins
a cgroup of that run, `code-runner-run-<run id>/<leaf>`, and only then execs the program:
a one-line `sh` writes `$$` to the leaf's `cgroup.procs`. Whatever the program forks,
`setsid`s or `env -i`s stays inside, and only a process with write access to the cgroup
tree (root outside any sandbox) could move itself out. A command's leaf is emptied (every
member SIGKILLed) when the command ends; `gc` empties a dead run's whole group by its name.

Which hierarchy: a cgroup v2 hierarchy with no controllers to share (a hybrid system's
`unified`), else a v1 one the sandbox does not put its limits in (`freezer`, `name=systemd`,
...), else v2 or `pids`/`memory`, where the sandbox nests its own limit groups inside the
run's group (`nest_parent`). The runner must be able to write to its own cgroup there.

The fallback, when no cgroup is writable (a non-root runner without a delegated cgroup):
with the sandbox on, each command's PID namespace (bubblewrap, `--die-with-parent`) ends
with it; without it, the runner is a child subreaper and kills descendants carrying the
command's token (`tree`). That fallback misses a process that cleared its environment and
is not re-parented to the runner, and a SIGKILLed runner's leftovers; `describe()` says
which mechanism is in force.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "code-runner-run-"
SHARED_LEAF = "shared"  # short plumbing (`capture`) that may leave a daemon on purpose (tmux)
_KILL_WAIT_S = 5.0
# v1 hierarchies by preference: those the sandbox never puts its limits in come first.
_V1_ORDER = ("freezer", "name=systemd", "devices", "blkio", "cpuacct", "cpu", "pids", "memory")


@dataclass(frozen=True)
class Hierarchy:
    """Where run groups are made: the runner's own cgroup in one hierarchy."""

    base: Path
    version: int
    name: str

    def describe(self) -> str:
        return f"cgroup v{self.version} {self.name} ({self.base})"


def _unescape(text: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def mounts() -> list[tuple[Path, str, frozenset[str]]]:
    """The cgroup-relevant mounts: (mount point, fs type, super options)."""
    found: list[tuple[Path, str, frozenset[str]]] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) < 5 or len(rest) < 3:
                continue
            found.append((Path(_unescape(fields[4])), rest[0], frozenset(rest[2].split(","))))
    return found


def memberships() -> list[tuple[str, frozenset[str], str]]:
    """This process's cgroups: (hierarchy id, controllers, path)."""
    found: list[tuple[str, frozenset[str], str]] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hierarchy, controllers, path = line.split(":", 2)
            found.append((hierarchy, frozenset(filter(None, controllers.split(","))), path))
    return found


def _usable(here: Path) -> bool:
    return here.is_dir() and os.access(here, os.W_OK) and (here / "cgroup.procs").exists()


def _candidates() -> list[Hierarchy]:
    found_mounts, members = mounts(), memberships()
    out: list[Hierarchy] = []
    unified = next((m for m in found_mounts if m[1] == "cgroup2"), None)
    v2_path = next((p for h, c, p in members if h == "0" and not c), None)
    v2: Hierarchy | None = None
    if unified is not None and v2_path is not None:
        v2 = Hierarchy(unified[0] / v2_path.lstrip("/"), 2, "unified")
        with contextlib.suppress(OSError):
            if not (v2.base / "cgroup.subtree_control").read_text().split():
                out.append(v2)  # nothing for the sandbox to share: pure tracking
                v2 = None
    for name in _V1_ORDER:
        if name == "pids" and v2 is not None:
            out.append(v2)
            v2 = None
        mount = next((m for m in found_mounts if m[1] == "cgroup" and name in m[2]), None)
        path = next((p for _, c, p in members if name in c), None)
        if mount is not None and path is not None:
            out.append(Hierarchy(mount[0] / path.lstrip("/"), 1, name))
    if v2 is not None:
        out.append(v2)
    return out


@functools.cache
def hierarchy() -> Hierarchy | None:
    """The hierarchy this runner tracks its runs in, or None (see `describe`). Cached."""
    return next((h for h in _candidates() if _usable(h.base)), None)


def describe() -> str:
    """For `doctor` and the record: how a run's processes are tracked here."""
    found = hierarchy()
    if found is not None:
        return found.describe()
    return (
        "no writable cgroup: the sandbox's PID namespace, else the command token and the "
        "child subreaper (a process that clears its environment and leaves the runner's "
        "tree is not found)"
    )


def run_group(run_id: str) -> Path | None:
    found = hierarchy()
    return None if found is None else found.base / f"{PREFIX}{run_id}"


def nest_parent(parent: Path, name: str, *, create: bool = True) -> Path:
    """Where the sandbox makes its limit group `name` (`code-runner-<run id>`): inside the
    run's group when both share one hierarchy, so joining it keeps a command tracked."""
    found = hierarchy()
    run_id = name.removeprefix("code-runner-")
    if found is None or found.base != parent:
        return parent
    group = found.base / f"{PREFIX}{run_id}"
    if not create:
        return group
    group.mkdir(exist_ok=True)
    if found.version == 2:
        controllers = (parent / "cgroup.subtree_control").read_text().split()
        if controllers:
            (group / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in controllers))
    return group


def join_argv(run_id: str, leaf: str) -> tuple[list[str], Path | None]:
    """(`sh -c` that joins the run's leaf then execs the rest, the leaf) or ([], None)."""
    group = run_group(run_id)
    if group is None:
        return [], None
    here = group / leaf
    try:
        group.mkdir(exist_ok=True)
        here.mkdir(exist_ok=True)
    except OSError:
        return [], None
    move = f"echo $$ > {shlex.quote(str(here / 'cgroup.procs'))}"
    return ["/bin/sh", "-c", move + ' && exec "$@"', "code-runner-track"], here


def members(group: Path) -> set[int]:
    """Every pid in `group` and the groups under it."""
    found: set[int] = set()
    if not group.is_dir():
        return found
    for dirpath, _, filenames in os.walk(group):
        if "cgroup.procs" in filenames:
            with contextlib.suppress(OSError, ValueError):
                text = (Path(dirpath) / "cgroup.procs").read_text()
                found.update(int(pid) for pid in text.split())
    return found


def empty(group: Path, *, remove: bool = True) -> tuple[int, ...]:
    """SIGKILL every process in `group` until none is left, then remove the group (and the
    run's group, once it has no other leaf). Returns the pids killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + _KILL_WAIT_S
    while True:
        pids = members(group)
        if not pids or time.monotonic() > deadline:
            break
        for pid in pids - {os.getpid()}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.005)
    for pid in killed:  # our children and our orphans (we are a subreaper) are reaped
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    if remove:
        remove_group(group)
        if group.parent.name.startswith(PREFIX):
            with contextlib.suppress(OSError):
                group.parent.rmdir()
    return tuple(sorted(killed))


def remove_group(group: Path) -> None:
    """Remove `group` and the groups under it (each must be empty of processes)."""
    subdirs = sorted((Path(d) for d, _, _ in os.walk(group)), key=lambda p: -len(p.parts))
    for here in subdirs:
        remove_cgroup_dir(here)


def remove_cgroup_dir(group: Path, *, tries: int = 20, wait_s: float = 0.02) -> bool:
    """rmdir a cgroup, retrying while the kernel still counts a dying process in it;
    True once it is gone."""
    for _ in range(tries):
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(wait_s)
    return False


def end_run(run_id: str) -> tuple[int, ...]:
    """Kill everything a run's group holds and remove the group (`gc`, and a run's end)."""
    group = run_group(run_id)
    return () if group is None else empty(group)


def leftover_groups() -> list[tuple[str, Path]]:
    """(run id, group) for every run group in the tracking hierarchy."""
    found = hierarchy()
    if found is None:
        return []
    with contextlib.suppress(OSError):
        return [
            (p.name.removeprefix(PREFIX), p)
            for p in sorted(found.base.iterdir())
            if p.is_dir() and p.name.startswith(PREFIX)
        ]
    return []

"""Tracking a run's processes by a cgroup, which a child cannot leave or shed.

Every process started for a run (its environment names the run: `RUN_ID_ENV`) first joins
a cgroup of that run, `code-runner-run-<run id>/<leaf>`, and only then execs the program:
a one-line `sh` writes `$$` to the leaf's `cgroup.procs`. Whatever the program forks,
`setsid`s or `env -i`s stays inside, and only a process with write access to the cgroup
tree (root outside any sandbox) could move itself out. A command's leaf is emptied (every
member SIGKILLed) when the command ends; `gc` empties a dead run's whole group by its name.
On v2 an empty leaf costs one read of `cgroup.events`; a full one is killed whole with
`cgroup.kill`, and its members' exits are awaited on pidfds, never by sleeping.

A leaf found empty at a command's end is kept as its run's spare, and the run's next
command joins it (`take_leaf`, `give_back`): a command makes and removes no cgroup. The
spare and the run's group go when the run ends (`release`), when more runs keep one than
`_KEEP_RUNS`, at the runner's exit, or by `gc` (an empty run group) after a SIGKILL.

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

import atexit
import contextlib
import functools
import math
import os
import select
import shlex
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = "code-runner-run-"
SHARED_LEAF = "shared"  # short plumbing (`capture`) that may leave a daemon on purpose (tmux)
_KILL_WAIT_S = 5.0
_WATCH_MAX = 64  # pidfds held at once while a group is emptied
_SLICE_S = 0.05  # the longest wait before the group is read again
_KEEP_RUNS = 4  # runs whose spare leaf is kept at once: the most recently used ones
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
    return join_leaf_argv(here), here


def join_leaf_argv(leaf: Path) -> list[str]:
    """`sh -c` that moves itself into `leaf`, then execs the rest of the argv."""
    move = f"echo $$ > {shlex.quote(str(leaf / 'cgroup.procs'))}"
    return ["/bin/sh", "-c", move + ' && exec "$@"', "code-runner-track"]


_spares: OrderedDict[str, Path] = OrderedDict()  # run id -> an emptied leaf for its next command
_spares_lock = threading.Lock()


def _forget_spares() -> None:
    """In a forked child: the spares are the parent's (its exit must not remove them)."""
    global _spares_lock
    _spares.clear()
    _spares_lock = threading.Lock()  # another thread may have held it across the fork


os.register_at_fork(after_in_child=_forget_spares)


def take_leaf(run_id: str, name: str) -> Path | None:
    """A leaf of the run's group for one command: the run's spare (checked empty when it
    was given back, and nobody else may join it) or a new one named `name`; None where no
    cgroup can be made. A spare that a `gc` elsewhere removed is made again."""
    with _spares_lock:
        spare = _spares.pop(run_id, None)
    if spare is not None:
        with contextlib.suppress(OSError):
            spare.mkdir(exist_ok=True)  # one lookup; FileNotFoundError once the group is gone
            return spare
    group = run_group(run_id)
    if group is None:
        return None
    here = group / name
    try:
        group.mkdir(exist_ok=True)
        here.mkdir(exist_ok=True)
    except OSError:
        return None
    return here


def give_back(leaf: Path) -> tuple[int, ...]:
    """End a command's leaf: SIGKILL whatever is left in it (as `empty`), then keep it as
    its run's spare, or remove it (and the run's group, once it has no other leaf) where
    the run has a spare already or the leaf could not be emptied. Returns the pids killed."""
    killed, emptied = _emptied(leaf)
    run_id = leaf.parent.name.removeprefix(PREFIX)
    evicted: list[Path] = []
    kept = False
    if emptied and leaf.parent.name.startswith(PREFIX) and _pristine(leaf):
        with _spares_lock:
            if run_id not in _spares:
                _spares[run_id] = leaf  # the most recently used run is last
                kept = True
                while len(_spares) > _KEEP_RUNS:
                    evicted.append(_spares.popitem(last=False)[1])
    for gone in evicted if kept else (leaf, *evicted):
        _remove_leaf(gone)
    return killed


def _pristine(leaf: Path) -> bool:
    """Whether an emptied leaf is as `take_leaf` made it, so the next command may join it:
    not frozen (v2 `cgroup.freeze`, v1 `freezer.state`), no group made under it, no
    controller enabled for one, no controller of its own whose limits a command (root,
    outside a sandbox) could have changed. Anything else: the leaf is removed, not kept."""
    try:
        if os.stat(leaf).st_nlink != 2:  # cgroupfs: 2 + the groups under it
            return False
    except OSError:
        return False
    for name, clean in (
        ("cgroup.events", lambda text: b"frozen 1" not in text),
        ("cgroup.subtree_control", lambda text: not text.strip()),
        ("cgroup.controllers", lambda text: not text.strip()),
        ("freezer.state", lambda text: text.strip() == b"THAWED"),
    ):
        try:
            text = _read(leaf / name)
        except FileNotFoundError:
            continue  # not this hierarchy's file
        except OSError:
            return False
        if not clean(text):
            return False
    return True


def release(run_id: str) -> None:
    """The run has ended: remove its spare leaf, and its group once it has no other leaf."""
    with _spares_lock:
        spare = _spares.pop(run_id, None)
    if spare is not None:
        _remove_leaf(spare)


@atexit.register
def _release_all() -> None:
    """At the runner's exit: every spare leaf, and the groups they kept."""
    with _spares_lock:
        spares = list(_spares.values())
        _spares.clear()
    for spare in spares:
        _remove_leaf(spare)


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


def populated(group: Path) -> bool | None:
    """Whether a process is left in `group` or under it (cgroup v2's `cgroup.events`: one
    read, whatever the tree); None where that file is missing (v1), False once it is gone."""
    try:
        return _populated_in(_read(group / "cgroup.events"))
    except FileNotFoundError:
        return False if not group.exists() else None
    except OSError:
        return None


def _read(path: Path) -> bytes:
    """A control file's text, in one read (a missing file raises FileNotFoundError)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _populated_in(events: bytes) -> bool | None:
    for line in events.splitlines():
        key, _, value = line.partition(b" ")
        if key == b"populated":
            return value.strip() != b"0"
    return None


def empty(group: Path, *, remove: bool = True) -> tuple[int, ...]:
    """SIGKILL every process in `group` until none is left, then remove the group (and the
    run's group, once it has no other leaf). Returns the pids killed.

    On cgroup v2, an empty group costs one read (`cgroup.events`), and a full one is
    killed whole by `cgroup.kill`; its members' exits are awaited on pidfds."""
    killed, _ = _emptied(group)
    if remove:
        _remove_leaf(group)
    return killed


def _emptied(group: Path) -> tuple[tuple[int, ...], bool]:
    """(the pids killed in `group`, whether it is empty now)."""
    killed: set[int] = set()
    emptied = populated(group) is False
    if not emptied:
        killed, emptied = _kill_all_in(group)
    for pid in killed:  # our children and our orphans (we are a subreaper) are reaped
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    return tuple(sorted(killed)), emptied


def _remove_leaf(group: Path) -> None:
    """Remove `group`, and its parent once that is a run's group with no other leaf."""
    remove_group(group)
    if group.parent.name.startswith(PREFIX):
        with contextlib.suppress(OSError):
            group.parent.rmdir()


def _kill_all_in(group: Path) -> tuple[set[int], bool]:
    """SIGKILL everything in `group` and wait (up to `_KILL_WAIT_S`) until it is empty;
    (the pids killed, whether it is empty).

    Each member's exit is awaited on a pidfd (opened before the kill, while it is alive),
    not by sleeping; the group's `cgroup.events` notice is rate-limited by the kernel
    (10 ms), so it is read, not waited on. A fork racing the kill is found by the next
    read and killed in turn."""
    deadline = time.monotonic() + _KILL_WAIT_S
    killed: set[int] = set()
    pids = _left(group)
    while pids and time.monotonic() <= deadline:
        with _exit_fds(sorted(pids)[:_WATCH_MAX]) as fds:
            whole = os.getpid() not in pids and _write(group / "cgroup.kill", "1")
            for pid in () if whole else pids - {os.getpid()}:  # v1: a pid at a time
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed |= pids
            _wait_exits(fds, min(deadline, time.monotonic() + _SLICE_S))
        pids = _left(group)
    return killed, not pids


def _left(group: Path) -> set[int]:
    return set() if populated(group) is False else members(group)


@contextlib.contextmanager
def _exit_fds(pids: list[int]) -> Iterator[list[int]]:
    """pidfds of `pids` (each readable once its process has exited); those gone are
    skipped, and none where the kernel has no pidfds."""
    fds: list[int] = []
    try:
        for pid in pids:
            with contextlib.suppress(AttributeError, OSError):
                fds.append(os.pidfd_open(pid))
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def _wait_exits(fds: list[int], until: float) -> None:
    """Wait until every process of `fds` has exited, or `until` (a short sleep where
    there is no pidfd to wait on)."""
    if not fds:
        time.sleep(max(0.0, min(0.005, until - time.monotonic())))
        return
    waiter = select.poll()
    for fd in fds:
        waiter.register(fd, select.POLLIN)
    pending = len(fds)
    while pending:
        remaining = until - time.monotonic()
        if remaining <= 0:
            return
        for fd, _ in waiter.poll(math.ceil(remaining * 1000)):
            waiter.unregister(fd)
            pending -= 1


def _write(path: Path, text: str) -> bool:
    """Write `text` to the control file `path` (never made: a missing one is False)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, text.encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def remove_group(group: Path) -> None:
    """Remove `group` and the groups under it (each must be empty of processes)."""
    with contextlib.suppress(OSError):
        group.rmdir()  # a leaf, as a command's is: no walk
        return
    if not group.exists():
        return
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
    with _spares_lock:
        _spares.pop(run_id, None)
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

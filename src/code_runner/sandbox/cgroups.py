"""Process-count and memory limits for a whole command tree, where a cgroup is writable.

A sandbox session makes one child cgroup per controller (`pids`, `memory`) under the
runner's own cgroup, writes the limits, and has each command join it before bubblewrap
starts (a one-line `sh` that writes `$$` to `cgroup.procs`, then execs), so nothing the
command forks can be outside it. Both cgroup v2 (a controller enabled for children in the
runner's cgroup) and v1 (a writable controller hierarchy) are used; on a machine with
neither, `detect()` says why and the limits fall back to rlimits. Where the run's process
tracking uses the same hierarchy, the groups are made inside the run's group
(`proc.tracking.nest_parent`), so joining them keeps a command tracked.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from code_runner.proc import tracking
from code_runner.sandbox.limits import MIB, ResourceLimits

CONTROLLERS = ("pids", "memory")
_REMOVE_TRIES = 20


@dataclass(frozen=True)
class Placement:
    """Where children for one controller can be made: a dir and its cgroup version."""

    controller: str
    parent: Path
    version: int


@dataclass(frozen=True)
class CgroupSupport:
    """Which controllers a session can use, and why the others cannot be."""

    placements: tuple[Placement, ...]
    reasons: tuple[str, ...] = ()

    def placement(self, controller: str) -> Placement | None:
        return next((p for p in self.placements if p.controller == controller), None)

    def describe(self) -> dict[str, str]:
        """For `doctor` and the result: each controller's mechanism, or why it is missing."""
        out: dict[str, str] = {}
        for name in CONTROLLERS:
            found = self.placement(name)
            if found is not None:
                out[name] = f"cgroup v{found.version} ({found.parent})"
            else:
                why = next((r for r in self.reasons if r.startswith(name + ":")), name + ": -")
                out[name] = "unavailable: " + why.split(":", 1)[1].strip()
        return out


def _within(mount: Path, path: str) -> Path:
    return mount / path.lstrip("/")


@functools.cache
def detect() -> CgroupSupport:
    """The cgroup controllers this process can delegate to its commands (cached)."""
    mounts = tracking.mounts()
    members = tracking.memberships()
    placements: list[Placement] = []
    reasons: list[str] = []
    unified = next((m for m in mounts if m[1] == "cgroup2"), None)
    v2_path = next((p for h, c, p in members if h == "0" and not c), None)
    for name in CONTROLLERS:
        why = f"{name}: no cgroup hierarchy has the {name} controller"
        if unified is not None and v2_path is not None:
            here = _within(unified[0], v2_path)
            try:
                enabled = (here / "cgroup.subtree_control").read_text().split()
            except OSError:
                enabled = []
            if name in enabled and os.access(here, os.W_OK):
                placements.append(Placement(name, here, 2))
                continue
            if name in enabled:
                why = f"{name}: cgroup v2 {here} is not writable"
        v1_path = next((p for _, c, p in members if name in c), None)
        v1_mount = next((m for m in mounts if m[1] == "cgroup" and name in m[2]), None)
        if v1_path is not None and v1_mount is not None:
            here = _within(v1_mount[0], v1_path)
            if os.access(here, os.W_OK):
                placements.append(Placement(name, here, 1))
                continue
            why = f"{name}: cgroup v1 {here} is not writable (run as root, or delegate it)"
        reasons.append(why)
    return CgroupSupport(tuple(placements), tuple(reasons))


@dataclass
class CgroupSet:
    """The cgroups of one session: made by `create`, joined by every command, removed."""

    support: CgroupSupport
    name: str
    limits: ResourceLimits
    dirs: list[Path] = field(default_factory=list)

    def create(self) -> None:
        """Make the groups and write the limits; on any failure, undo and raise OSError."""
        try:
            for placement in self.support.placements:
                here = tracking.nest_parent(placement.parent, self.name) / self.name
                if here not in self.dirs:
                    here.mkdir()
                    self.dirs.append(here)
                self._write_limits(placement, here)
        except OSError:
            self.remove()
            raise

    def _write_limits(self, placement: Placement, here: Path) -> None:
        memory = str(self.limits.memory_mb * MIB)
        if placement.controller == "pids":
            (here / "pids.max").write_text(str(self.limits.processes))
        elif placement.version == 2:
            (here / "memory.max").write_text(memory)
            if (here / "memory.swap.max").exists():
                (here / "memory.swap.max").write_text("0")
        else:
            (here / "memory.limit_in_bytes").write_text(memory)
            if (here / "memory.memsw.limit_in_bytes").exists():
                (here / "memory.memsw.limit_in_bytes").write_text(memory)

    def exclude_running(self) -> None:
        """Raise each limit by what the groups hold now (the resident sandbox's own bwrap
        stages and executor, before any command), so a command gets exactly its limits."""
        for placement in self.support.placements if self.dirs else ():
            here = tracking.nest_parent(placement.parent, self.name, create=False) / self.name
            with contextlib.suppress(OSError, ValueError):
                if placement.controller == "pids":
                    held = int((here / "pids.current").read_text())
                    (here / "pids.max").write_text(str(self.limits.processes + held))
                elif placement.version == 2:
                    held = int((here / "memory.current").read_text())
                    (here / "memory.max").write_text(str(self.limits.memory_mb * MIB + held))
                else:
                    held = int((here / "memory.usage_in_bytes").read_text())
                    memory = str(self.limits.memory_mb * MIB + held)
                    if (here / "memory.memsw.limit_in_bytes").exists():
                        (here / "memory.memsw.limit_in_bytes").write_text(memory)
                    (here / "memory.limit_in_bytes").write_text(memory)

    @property
    def controllers(self) -> tuple[str, ...]:
        return tuple(p.controller for p in self.support.placements)

    def join_argv(self) -> list[str]:
        """`sh -c` that moves itself into every group, then execs the rest of the argv."""
        if not self.dirs:
            return []
        moves = " && ".join(f"echo $$ > {shlex.quote(f'{d}/cgroup.procs')}" for d in self.dirs)
        return ["/bin/sh", "-c", moves + ' && exec "$@"', "code-runner-cgroup"]

    def remove(self) -> None:
        """Remove the groups (empty once the command's PID namespace is gone)."""
        for here in reversed(self.dirs):
            tracking.remove_cgroup_dir(here, tries=_REMOVE_TRIES, wait_s=0.05)
        self.dirs = [d for d in self.dirs if d.exists()]


def remove_leftovers(run_id: str) -> list[Path]:
    """Remove the (empty) cgroups of a run that was killed before it could; for `gc`."""
    removed: list[Path] = []
    for placement in detect().placements:
        here = placement.parent / f"code-runner-{run_id}"
        if not here.is_dir():
            here = tracking.nest_parent(placement.parent, here.name, create=False) / here.name
        with contextlib.suppress(OSError):
            here.rmdir()
            removed.append(here)
    return removed

"""One run's sandbox: the mode decision, the uid it runs as, its cgroups, and `wrap`.

`decide(mode)` turns the spec's `sandbox: auto | required | off` into a `Decision` before
anything is created (`required` without a working sandbox is a preflight error). A
`Session` then lives as long as the workspace: it hands the work tree to the sandbox's
uid, makes the cgroups, and wraps each command's argv (`Session.wrap` is the Toolbox's
`wrap_argv` and the DoD's). `posture()` is what result.json records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import code_runner.sandbox.idmap as idmap
import code_runner.sandbox.mounts as mounts
import code_runner.sandbox.setid as setid
from code_runner import proc
from code_runner.sandbox.cgroups import CgroupSet, CgroupSupport
from code_runner.sandbox.limits import ResourceLimits
from code_runner.sandbox.profile import (
    SANDBOX_UID,
    Bind,
    Profile,
    Programs,
    SandboxUser,
    sandbox_env,
    under,
)
from code_runner.sandbox.resident import Resident, ResidentError, run_command

# Host uids for sandboxed commands: far above any account or subuid range in common use,
# one per session, so RLIMIT_NPROC counts exactly one run's processes.
_UID_BASE = 2_000_000_000
_UID_SPAN = 100_000_000
_MAX_DEPTH = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SandboxMode(StrEnum):
    """What a spec asks for: use the sandbox when it works, insist on it, or never use it."""

    AUTO = "auto"
    REQUIRED = "required"
    OFF = "off"


class SandboxWorkspace(Protocol):
    """What a session needs of a workspace (`workspace.Workspace` is one)."""

    @property
    def work_tree(self) -> Path: ...

    @property
    def git_dir(self) -> Path: ...

    @property
    def source_dir(self) -> Path: ...


def new_identity() -> SandboxUser:
    uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
    return SandboxUser(uid=uid, gid=uid)


def hand_over(work_tree: Path, identity: SandboxUser) -> int:
    """Give every entry of the work tree to `identity`; return how many changed owner.

    What the runner writes (the checkout, restored files, the file tools' writes) is
    root's; the sandboxed uid must be able to change it. Walks from directory
    descriptors without following a symlink, never leaves the work tree's file system,
    and leaves the `.git` pointer alone.
    """
    fd = os.open(work_tree, _DIR_FLAGS)
    try:
        st = os.fstat(fd)
        changed = 0
        if (st.st_uid, st.st_gid) != (identity.uid, identity.gid):
            os.fchown(fd, identity.uid, identity.gid)
            changed = 1
        return changed + _hand_over_dir(fd, identity, st.st_dev, 0, skip=frozenset({".git"}))
    finally:
        os.close(fd)


def _hand_over_dir(
    dir_fd: int, identity: SandboxUser, dev: int, depth: int, skip: frozenset[str] = frozenset()
) -> int:
    changed = 0
    with os.scandir(dir_fd) as entries:
        names = [(e.name, e.stat(follow_symlinks=False)) for e in entries if e.name not in skip]
    for name, st in names:
        if (st.st_uid, st.st_gid) != (identity.uid, identity.gid):
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, identity.uid, identity.gid, dir_fd=dir_fd, follow_symlinks=False)
                changed += 1
        if stat.S_ISDIR(st.st_mode) and st.st_dev == dev and depth < _MAX_DEPTH:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                changed += _hand_over_dir(child, identity, dev, depth + 1)
            finally:
                os.close(child)
    return changed


def _identity(path: str) -> tuple[int, int, int]:
    """What is at `path` now, as the resident sandbox's mounts depend on it: its device,
    inode and type; (-1, -1, 0) when it is absent, (-2, -2, 0) when it cannot be seen."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return (-1, -1, 0)
    except OSError:
        return (-2, -2, 0)
    return (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode))


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


class Session:
    """The sandbox of one workspace. Use as a context manager around the agent's rounds."""

    def __init__(
        self,
        workspace: SandboxWorkspace,
        *,
        programs: Programs,
        env: Mapping[str, str],
        network: bool,
        limits: ResourceLimits,
        cpu_s: int,
        cgroups: CgroupSupport | None,
        name: str,
        owner: SandboxUser | None = None,
        frozen: Sequence[Path] = (),
        keep_vars: Sequence[str] = (),
        identity: SandboxUser | None = None,
        resident: bool = False,
    ) -> None:
        self.workspace = workspace
        self.programs = programs
        self.network = network
        self.limits = limits
        self.cpu_s = cpu_s
        # `owner`: a tree that must keep its ownership (the user's repo) is never handed
        # over. A root runner's commands run as a fresh uid that sees the tree through an
        # id-mapped view (`open`); where none can be made, as the tree's owner.
        self.keeps_owner = owner is not None
        self._owner = owner
        self._view: idmap.IdMapped | None = None
        self.view_error: str | None = None
        # no DoD in the user's repo may make a set-ID file (None: no filter for this machine)
        self._seccomp = setid.filter_file() if owner is not None else None
        self._frozen = tuple(frozen)  # files in the tree bound read-only onto themselves
        if os.geteuid() != 0:
            self.identity: SandboxUser | None = None
        else:
            self.identity = owner or identity or new_identity()
        self._env = sandbox_env(env, workspace.work_tree, keep_vars)
        self._cgroups = CgroupSet(cgroups, f"code-runner-{name}", limits) if cgroups else None
        self.cgroup_error: str | None = None
        self._masks = mounts.masked_dirs()
        self._secrets = mounts.masked_files()
        private = mounts.private_dirs()
        hidden = mounts.hidden_paths()
        wanted = [
            *mounts.toolchain_binds(env, self._masks, private),
            *mounts.alternates_binds(workspace.git_dir),
            *mounts.dependency_binds(
                workspace.source_dir, workspace.work_tree, self._masks, hidden
            ),
        ]  # decided here, once, before the first command: never from the agent's tree
        self._read_only = tuple(b for b in wanted if mounts.exposes(b.source, hidden) is None)
        # What the resident sandbox's mounts were made from, besides the binds above: the
        # work tree, its `.git` pointer, the git dir, each mount point in the tree and each
        # frozen file. When any of them is another file than at its start (the audit removed
        # a mount point bwrap made, a frozen file was rewritten), its mounts are stale.
        wt = workspace.work_tree
        self._mount_paths = tuple(
            str(p)
            for p in (
                wt,
                wt / ".git",
                workspace.git_dir,
                *(b.dest for b in self._read_only if under(b.dest, wt)),
                *self._frozen,
            )
        )
        # `resident`: commands go to one sandbox started for the session (`run`)
        self._resident: Resident | None = None
        self._resident_key: tuple[tuple[int, int, int], ...] = ()
        self.resident_off: str | None = None if resident else "not asked for"
        self.resident_starts = 0
        self.resident_restarts: list[str] = []  # why each sandbox after the first was started
        self._restart_why = ""

    def __enter__(self) -> Session:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Hand the work tree to the sandbox's uid (or, for a tree that keeps its owner, show
        it to a fresh uid through an id-mapped view) and make the cgroups."""
        self.hand_over()
        self._open_view()
        if self._cgroups is not None:
            try:
                self._cgroups.create()
            except OSError as exc:
                self.cgroup_error = f"could not create cgroups ({exc.strerror or exc})"
                self._cgroups = None

    def start(self, env: Mapping[str, str]) -> None:
        """Start the resident sandbox now, not on the first command: the caller's own work
        (fingerprinting the source) then overlaps with the sandbox's start. Commands are
        what the sandbox runs; starting it runs none. Without a resident sandbox: nothing."""
        self._resident_for(env)

    def close(self) -> None:
        if self._resident is not None:
            self._resident.close()
            self._resident = None
        if self._cgroups is not None:
            self._cgroups.remove()
        if self._view is not None:
            self._view.close()
            self._view = None

    def _open_view(self) -> None:
        """A root runner's view of a tree that keeps its owner, as a fresh uid's; without
        one (the errno is kept in `view_error`), commands run as the owner, as before."""
        owner = self._owner
        if owner is None or self.identity is None or self._view is not None:
            return
        shown_as = new_identity()
        try:
            self._view = idmap.mount(self.workspace.work_tree, owner, shown_as)
        except OSError as exc:
            code = f"errno {exc.errno}: " if exc.errno else ""
            self.view_error = f"no id-mapped mount ({code}{exc.strerror or exc})"
            return
        self.identity = shown_as

    def hand_over(self) -> int:
        """Re-own what the runner wrote into the work tree since the last command.

        Nothing to do, and no walk reads the tree, for a workspace whose files the runner
        writes as the sandbox's uid (`owner`: checked out and restored as that uid) while
        its top directory is still that uid's: what takes a tree back (an agent CLI's round
        runs as the runner) takes the whole tree, its top directory included."""
        identity = self.identity
        if identity is None or self.keeps_owner:
            return 0
        if getattr(self.workspace, "owner", None) == (identity.uid, identity.gid):
            with contextlib.suppress(OSError):
                top = os.lstat(self.workspace.work_tree)
                if (top.st_uid, top.st_gid) == (identity.uid, identity.gid):
                    return 0
        return hand_over(self.workspace.work_tree, identity)

    @property
    def cgroup_controllers(self) -> tuple[str, ...]:
        return self._cgroups.controllers if self._cgroups is not None else ()

    def profile(self) -> Profile:
        """The profile for the next command: the session's binds, less any whose mount point
        in the work tree is no longer a plain directory."""
        ws = self.workspace
        work_tree = ws.work_tree
        controllers = self.cgroup_controllers
        return Profile(
            programs=self.programs,
            work_tree=work_tree,
            git_dir=ws.git_dir,
            read_only=(
                *(b for b in self._read_only if mounts.mountable(b, work_tree)),
                *(Bind(p, p) for p in self._frozen if _regular(p)),
            ),
            masked_dirs=tuple(self._masks),
            masked_files=tuple(self._secrets),
            env=self._env,
            limits=self.limits,
            cpu_s=self.cpu_s,
            network=self.network,
            identity=self.identity,
            cgroup_join=tuple(self._cgroups.join_argv()) if self._cgroups else (),
            process_rlimit=self.identity is not None and self._owns_nothing(),
            memory_rlimit="memory" not in controllers,
            tree_source=self._view.path if self._view is not None else None,
            seccomp=self._seccomp,
        )

    def _owns_nothing(self) -> bool:
        """Whether the commands' host uid is one of the session's own (RLIMIT_NPROC then
        counts exactly its processes), not the owner of a tree that keeps its owner."""
        return not self.keeps_owner or self._view is not None

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The `wrap_argv` hook: `argv` as it runs inside this sandbox."""
        return self.profile().wrap(argv)

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        timeout_s: float,
        stdout_path: Path | None = None,
        stderr_path: Path | None = None,
        max_output_bytes: int = proc.DEFAULT_MAX_OUTPUT_BYTES,
        head_bytes: int = proc.DEFAULT_HEAD_BYTES,
        tail_bytes: int = proc.DEFAULT_TAIL_BYTES,
        grace_s: float = proc.DEFAULT_GRACE_S,
        stop_when: proc.StopCheck | None = None,
    ) -> proc.ProcResult:
        """`proc.run` of `argv` inside this sandbox: in the session's resident sandbox when
        it has one (started on the first command, again after one ends), else in a sandbox
        of its own, as `wrap` builds it."""
        resident = self._resident_for(env)
        if resident is None:
            return proc.run(
                self.profile().wrap(argv),
                cwd=cwd,
                env=env,
                timeout_s=timeout_s,
                stdout_path=stdout_path,
                stderr_path=stderr_path,
                max_output_bytes=max_output_bytes,
                head_bytes=head_bytes,
                tail_bytes=tail_bytes,
                grace_s=grace_s,
                stop_when=stop_when,
            )
        result, broken = run_command(
            resident,
            argv,
            cwd=Path(cwd),
            timeout_s=timeout_s,
            stdout_path=stdout_path,
            stderr_path=stderr_path,
            max_output_bytes=max_output_bytes,
            head_bytes=head_bytes,
            tail_bytes=tail_bytes,
            grace_s=grace_s,
            stop_when=stop_when,
        )
        if broken is not None:
            self._resident = None
            self._restart_why = broken
        return result

    def _mount_key(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(map(_identity, self._mount_paths))

    def _resident_for(self, env: Mapping[str, str]) -> Resident | None:
        """The running resident sandbox, started (again) when there is none or its mounts
        would differ from the next command's; None where it cannot work (recorded)."""
        if self.resident_off is not None:
            return None
        current = self._resident
        if current is not None and current.alive() and self._mount_key() == self._resident_key:
            return current
        if current is not None:
            self._restart_why = "its mounts changed" if current.alive() else "it had ended"
            current.close()
            self._resident = None
        profile = self.profile()
        try:
            self._resident = Resident.start(
                dataclasses.replace(profile, own_processes=1).wrap,  # the executor
                cwd=self.workspace.work_tree,
                env=dict(env),
                wipe=[*map(str, profile.masked_dirs), "/dev/shm"],  # noqa: S108 - inside the sandbox
            )
        except ResidentError as exc:
            self.resident_off = str(exc)
            return None
        if self._cgroups is not None:
            self._cgroups.exclude_running()
        if self.resident_starts:
            self.resident_restarts.append(self._restart_why)
        self.resident_starts += 1
        self._resident_key = self._mount_key()  # with the mount points bwrap made
        return self._resident

    @property
    def resident_pid(self) -> int | None:
        """The host pid of the running resident sandbox (its outer bwrap), if one runs."""
        current = self._resident
        return current.process.pid if current is not None and current.alive() else None

    def executor_posture(self) -> dict[str, Any]:
        """How commands reached the sandbox: one resident sandbox per session (how often it
        was started, and why again), or a sandbox per command (and why)."""
        if self.resident_off is not None and not self.resident_starts:
            return {"mode": "per-command", "why": self.resident_off}
        return {
            "mode": "resident",
            "started": self.resident_starts,
            "restarts": list(self.resident_restarts),
            "fell_back": self.resident_off,
        }

    def posture(self) -> dict[str, Any]:
        """What the sandbox enforces, for result.json."""
        controllers = self.cgroup_controllers
        limits = self.limits
        unenforced: list[str] = []
        if "pids" in controllers:
            processes = f"{limits.processes} (cgroup pids.max)"
        elif self.identity is not None and self._owns_nothing():
            processes = f"{limits.processes} (RLIMIT_NPROC of the run's own uid)"
        else:
            processes = "not limited (no writable cgroup; commands share the runner's uid)"
            unenforced.append(f"processes: {processes}")
        memory = (
            f"{limits.memory_mb} MiB for the command tree (cgroup)"
            if "memory" in controllers
            else f"{limits.memory_mb} MiB address space per process (RLIMIT_AS)"
        )
        return {
            "kind": "bwrap",
            "network": "on" if self.network else "off",
            "uid_inside": SANDBOX_UID,
            "host_uid": self.identity.uid if self.identity else os.geteuid(),
            "limits": {
                "file_size_mb": limits.file_size_mb,
                "cpu_s_per_process": self.cpu_s,
                "tmp_mb": limits.tmp_mb,
                "processes": processes,
                "memory": memory,
            },
            "unenforced": unenforced,
            "cgroup_error": self.cgroup_error,
            **({"tree": self.tree_posture()} if self.keeps_owner else {}),
            "executor": self.executor_posture(),
        }

    def tree_posture(self) -> dict[str, Any]:
        """For a tree that keeps its owner: which host uid the commands run as, and how."""
        if self._view is not None:
            how = "an id-mapped view: the owner's files are this uid's, its files the owner's"
        elif self.identity is not None:
            how = f"the tree's owner, every capability dropped; {self.view_error or 'no view'}"
        else:
            how = "the runner's own uid (it owns what it may write)"
        host = self.identity.uid if self.identity is not None else os.geteuid()
        set_id = "refused (seccomp)" if self._seccomp else "not refused: no filter here"
        return {"host_uid": host, "how": how, "set_id_files": set_id}

"""The bubblewrap profile: one pure function from a description to an argv.

The profile that held on this machine (DESIGN.md): no capabilities, a non-zero uid, no
new user namespaces, a read-only root, tmpfs over `/tmp`, `/root`, `/home`, `/run` (and
the runner's own home and state dir), secrets masked, a cleared environment with an
explicit allowlist, network off, a PID namespace so nothing outlives the command, and the
workspace the only writable path, with its `.git` pointer and git dir read-only.

bubblewrap started by root keeps every capability unless told otherwise, and a user
namespace made by root maps the sandbox's uid to root outside, so every root-owned file
(`/etc/gshadow`, sockets, keys) would look like the sandbox's own. A root runner therefore
sets the sandbox up in two stages: an outer bwrap (root, no user namespace) makes the
mounts, `setpriv` drops to a uid of the run's own that owns nothing but the work tree, and
an inner bwrap (that uid) adds the user namespace, `--disable-userns` and `--cap-drop
ALL`. A runner that is not root needs only the single, unprivileged bwrap.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath

from code_runner.sandbox.limits import MIB, ResourceLimits, rlimit_argv

SANDBOX_UID = 1000
SANDBOX_GID = 1000
SANDBOX_HOME = "/tmp"  # noqa: S108 (a fresh tmpfs per command: HOME and TMPDIR)
BWRAP_ENV = "CODE_RUNNER_BWRAP"
SYSTEM_BIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Variables a sandboxed command may see (when the runner's command env has them).
ENV_ALLOWLIST = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "NO_COLOR",
    "CI",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED",
    "VIRTUAL_ENV",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_GLOBAL",
)


@dataclass(frozen=True)
class Bind:
    """A read-only bind mount: host `source` seen at `dest` inside the sandbox."""

    source: Path
    dest: Path


@dataclass(frozen=True)
class SandboxUser:
    """The host uid/gid a root runner drops to for the sandboxed command."""

    uid: int
    gid: int


@dataclass(frozen=True)
class Programs:
    """Absolute paths of the helpers the argv names (looked up once)."""

    bwrap: str
    prlimit: str
    setpriv: str | None = None

    @classmethod
    def find(cls) -> Programs | None:
        """System copies only (a PATH entry in the workspace must not stand in for them);
        `CODE_RUNNER_BWRAP` names another bubblewrap binary."""
        where = SYSTEM_BIN_PATH
        override = os.environ.get(BWRAP_ENV)
        bwrap = override if override and os.path.isabs(override) else None
        bwrap = bwrap or shutil.which("bwrap", path=where)
        prlimit = shutil.which("prlimit", path=where)
        if bwrap is None or prlimit is None:
            return None
        return cls(bwrap=bwrap, prlimit=prlimit, setpriv=shutil.which("setpriv", path=where))


@dataclass(frozen=True)
class Profile:
    """Everything one sandboxed command needs, except the command itself."""

    programs: Programs
    work_tree: Path
    git_dir: Path
    read_only: tuple[Bind, ...]
    masked_dirs: tuple[Path, ...]
    masked_files: tuple[Path, ...]
    env: tuple[tuple[str, str], ...]
    limits: ResourceLimits
    cpu_s: int
    network: bool = False
    identity: SandboxUser | None = None
    cgroup_join: tuple[str, ...] = ()
    process_rlimit: bool = True
    memory_rlimit: bool = True
    private_tmp: str = SANDBOX_HOME
    tree_source: Path | None = None  # the work tree is bound from here (an id-mapped view)
    seccomp: Path | None = None  # a filter file (`setid`), opened as fd 3 for bubblewrap
    own_processes: int = 0  # the sandbox's own processes as its uid (a resident executor)

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The argv that runs `argv` inside this profile."""
        limits = rlimit_argv(
            self.programs.prlimit,
            self.limits,
            own_processes=self.own_processes,
            cpu_s=self.cpu_s,
            processes=self.process_rlimit,
            address_space=self.memory_rlimit,
        )
        inner = [*limits, *argv]
        wt = str(self.work_tree)
        if self.identity is not None and self.identity.uid == 0:
            # a root-owned tree kept as root's (the user's repo): root, every capability
            # dropped (none comes back on exec), in every namespace but the user one
            outer = [self.programs.bwrap, *self._outer_namespaces(keep_setuid=False)]
        elif self.identity is not None:
            assert self.programs.setpriv is not None
            outer = [self.programs.bwrap, *self._outer_namespaces()]
            inner = [
                self.programs.setpriv,
                f"--reuid={self.identity.uid}",
                f"--regid={self.identity.gid}",
                "--clear-groups",
                "--",
                self.programs.bwrap,
                *_user_namespace(),
                "--die-with-parent",
                "--dev-bind",
                "/",
                "/",
                "--chdir",
                wt,
                "--",
                *inner,
            ]
        else:
            outer = [
                self.programs.bwrap,
                "--unshare-all",
                *(["--share-net"] if self.network else []),
                *_user_namespace(),
            ]
        if self.seccomp is not None:
            outer = [*_OPEN_FD3, str(self.seccomp), *outer, "--seccomp", "3"]
        return [
            *self.cgroup_join,
            *outer,
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            *[arg for name, value in self.env for arg in ("--setenv", name, value)],
            *self._mounts(),
            "--chdir",
            wt,
            "--",
            *inner,
        ]

    def _outer_namespaces(self, *, keep_setuid: bool = True) -> list[str]:
        """Root's outer stage: every namespace but the user one; only setuid/setgid kept."""
        kept = ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if keep_setuid else []
        return [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-cgroup-try",
            *([] if self.network else ["--unshare-net"]),
            "--cap-drop",
            "ALL",
            *kept,
        ]

    def _mounts(self) -> list[str]:
        args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        tmp_bytes = str(self.limits.tmp_mb * MIB)
        tmpfs: list[Path] = []
        for masked in _outermost(self.masked_dirs):
            if str(masked) == self.private_tmp:
                args += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", str(masked)]
            else:
                args += ["--size", tmp_bytes, "--tmpfs", str(masked)]
            tmpfs.append(masked)
        for secret in self.masked_files:
            if not any(under(secret, t) for t in tmpfs):  # a mask already hides it
                args += ["--ro-bind", "/dev/null", str(secret)]
        made: set[PurePosixPath] = set()
        inside_wt = [b for b in self.read_only if under(b.dest, self.work_tree)]
        outside_wt = [b for b in self.read_only if not under(b.dest, self.work_tree)]
        for bind in outside_wt:
            args += _parents(bind.dest, tmpfs, made)
            args += ["--ro-bind", str(bind.source), str(bind.dest)]
        args += _parents(self.work_tree, tmpfs, made)
        args += ["--bind", self._seen(self.work_tree), str(self.work_tree)]
        pointer = self.work_tree / ".git"
        args += ["--ro-bind", self._seen(pointer), str(pointer)]
        args += _parents(self.git_dir, tmpfs, made)
        args += ["--ro-bind", self._seen(self.git_dir), str(self.git_dir)]
        for bind in inside_wt:
            args += ["--ro-bind", self._seen(bind.source), str(bind.dest)]
        return args

    def _seen(self, path: Path) -> str:
        """Where to bind `path` from: through the id-mapped view when it lies in the tree."""
        if self.tree_source is None or not under(path, self.work_tree):
            return str(path)
        return str(self.tree_source / path.relative_to(self.work_tree))


# a shell that opens the filter file (its first argument) as fd 3, then runs bubblewrap
_OPEN_FD3 = ("/bin/sh", "-c", 'exec 3<"$0" && exec "$@"')


def _user_namespace() -> list[str]:
    return [
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_GID),
        "--disable-userns",
        "--cap-drop",
        "ALL",
    ]


def under(path: PurePath, root: PurePath) -> bool:
    """Whether `path` is `root` or inside it, by their components (`root in path.parents`
    builds every parent: 40x slower, and this runs for each bind before each command)."""
    return path.parts[: len(root.parts)] == root.parts


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """Drop paths beneath another one in the list (mounting both would hide the inner)."""
    unique = sorted(set(paths), key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in unique:
        if not any(under(path, other) for other in kept):
            kept.append(path)
    return kept


def _parents(dest: Path, tmpfs: Sequence[Path], made: set[PurePosixPath]) -> list[str]:
    """`--dir` for each missing parent of `dest` on a tmpfs, traversable (bwrap's are 0700)."""
    holders = [t for t in tmpfs if dest != t and under(dest, t)]
    base = max(holders, key=lambda t: len(t.parts), default=None)
    if base is None:
        return []
    args: list[str] = []
    for parent in reversed(dest.parents):
        key = PurePosixPath(parent)
        if len(parent.parts) <= len(base.parts) or key in made:
            continue
        made.add(key)
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def sandbox_env(
    env: Mapping[str, str], work_tree: Path, keep: Iterable[str] = ()
) -> tuple[tuple[str, str], ...]:
    """The allowlisted part of `env` (and the names in `keep`: the variables a task spec
    sets), with HOME/TMPDIR on the private tmpfs.

    Git inside refuses a work tree whose git dir another uid owns, so the one work tree is
    named as safe (command-line scope, which git honours; nothing else changes).
    """
    kept = {name: env[name] for name in (*ENV_ALLOWLIST, *keep) if name in env}
    kept.setdefault("PATH", SYSTEM_BIN_PATH)
    kept.update(
        {
            "HOME": SANDBOX_HOME,
            "TMPDIR": SANDBOX_HOME,
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "safe.directory",
            "GIT_CONFIG_VALUE_0": str(work_tree),
        }
    )
    return tuple(sorted(kept.items()))

"""What a sandboxed command sees besides the read-only root: masks and read-only binds.

Masked (an empty tmpfs): `/tmp`, `/var/tmp`, `/root`, `/home`, `/run`, the runner's home and
XDG dirs, and code-runner's state dir (other runs' workspaces). Secrets that are single
files get `/dev/null` bound over them (`/etc/shadow`, the ssh-agent socket).

Made visible again, read-only, at the same path: the toolchain the commands need (the
running Python's prefixes, `PATH` entries and virtualenvs that live under a masked dir),
the objects the workspace clone borrows from the source (`alternates`), and dependencies
the DoD needs that the source has but the workspace lacks (`.venv`, `venv`, `node_modules`),
which also appear inside the work tree at the same relative path. No bind may show a hidden
path again (`exposes`): a bind whose source holds a mask, a private dir or a secret file
is dropped.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from code_runner import dirs
from code_runner.sandbox.profile import Bind, under

BASE_MASKS = ("/tmp", "/var/tmp", "/root", "/home", "/run")  # noqa: S108 (hidden, not used)
SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-")
DEPENDENCY_DIRS = (".venv", "venv", "node_modules")
_SYSTEM_ROOTS = frozenset(
    {"/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt", "/var", "/srv"}
    | {"/proc", "/sys", "/dev", "/boot", "/mnt", "/media"}
)
_SHIM_DIR = "shims"  # pyenv, rbenv, asdf: the shims need their tool's root


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def private_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The runner's own directories, which a command must never read."""
    env = os.environ if environ is None else environ
    found = [dirs.state_dir()]
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        value = env.get(name)
        if value and os.path.isabs(value):
            found.append(Path(os.path.normpath(value)))
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        found.append(Path(os.path.normpath(runtime)))
    return found


def masked_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Existing directories to hide under a tmpfs (never `/` or a system root)."""
    candidates = [Path(p) for p in BASE_MASKS] + private_dirs(environ)
    return [p for p in dict.fromkeys(candidates) if str(p) not in _SYSTEM_ROOTS and _is_dir(p)]


def masked_files(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Secret files to cover with /dev/null: password hashes, the ssh-agent socket."""
    env = os.environ if environ is None else environ
    found = [Path(p) for p in SECRET_FILES if os.path.lexists(p)]
    sock = env.get("SSH_AUTH_SOCK")
    if sock and os.path.isabs(sock) and os.path.exists(sock) and not _is_dir(Path(sock)):
        found.append(Path(os.path.realpath(sock)))
    return found


def _exposable(path: Path, masks: Sequence[Path], private: Sequence[Path]) -> bool:
    """Strictly beneath a mask, and holding none of the runner's private dirs."""
    if not any(path != m and under(path, m) for m in masks):
        return False
    return not any(under(p, path) for p in private)


def toolchain_binds(
    env: Mapping[str, str], masks: Sequence[Path], private: Sequence[Path]
) -> list[Bind]:
    """Interpreter prefixes, virtualenvs and PATH entries hidden by a mask, read-only."""
    candidates: list[Path] = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)]
    venv = env.get("VIRTUAL_ENV")
    if venv and os.path.isabs(venv):
        candidates.append(Path(venv))
    for entry in env.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        path = Path(os.path.normpath(entry))
        if path.name == _SHIM_DIR and _exposable(path.parent, masks, private):
            path = path.parent
        candidates.append(path)
    binds: list[Bind] = []
    for path in dict.fromkeys(candidates):
        real = Path(os.path.realpath(path))
        if not _is_dir(real) or any(under(p, real) for p in private):
            continue
        for dest in dict.fromkeys((path, real)):
            if _exposable(dest, masks, private):
                binds.append(Bind(real, dest))
    return _outermost_binds(binds)


def _outermost_binds(binds: Iterable[Bind]) -> list[Bind]:
    kept: list[Bind] = []
    for bind in sorted(set(binds), key=lambda b: len(b.dest.parts)):
        if not any(under(bind.dest, k.dest) for k in kept):
            kept.append(bind)
    return kept


def alternates_binds(git_dir: Path) -> list[Bind]:
    """The source object dirs the workspace clone reads through `objects/info/alternates`."""
    binds: list[Bind] = []
    objects = git_dir / "objects"
    with contextlib.suppress(OSError):
        for line in (objects / "info" / "alternates").read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            path = Path(os.path.normpath(objects / line))
            if _is_dir(path):
                binds.append(Bind(Path(os.path.realpath(path)), path))
    return binds


def hidden_paths(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Everything a command must not see: the masks, the runner's dirs, the secret files."""
    found = [Path(p) for p in BASE_MASKS]
    found += masked_dirs(environ) + private_dirs(environ) + masked_files(environ)
    found += [Path(os.path.realpath(p)) for p in found]
    return list(dict.fromkeys(found))


def exposes(source: Path, hidden: Sequence[Path]) -> Path | None:
    """The hidden path a bind of `source` would show again (it holds or is one), if any."""
    real = Path(os.path.realpath(source))
    if str(real) in _SYSTEM_ROOTS:
        return real
    return next((h for h in hidden if under(h, real)), None)


def dependency_binds(
    source_dir: Path,
    work_tree: Path,
    masks: Sequence[Path],
    hidden: Sequence[Path] | None = None,
) -> list[Bind]:
    """The source's `.venv` / `venv` / `node_modules`, read-only, where the work tree lacks them.

    Decided once, before the first command. A dependency dir is bound only when it
    resolves strictly inside the source tree (outside its `.git`) and holds no hidden
    path, so a committed `.venv -> $HOME` shows nothing. Bound into the work tree only
    when the name is free there or an empty directory (never onto an entry of the
    checkout); also at the source's own path when that is masked, so absolute shebangs
    (`#!/src/.venv/bin/python`) still resolve.
    """
    hidden = hidden_paths() if hidden is None else hidden
    binds: list[Bind] = []
    top = Path(os.path.realpath(source_dir))
    for name in DEPENDENCY_DIRS:
        origin = source_dir / name
        real = Path(os.path.realpath(origin))
        if not _is_dir(real) or real == top or not under(real, top):
            continue  # missing, or a link out of the source tree
        if under(real, top / ".git") or exposes(real, hidden) is not None:
            continue
        target = work_tree / name
        try:
            mode: int | None = os.lstat(target).st_mode
        except FileNotFoundError:
            mode = None
        except OSError:
            continue
        if mode is not None and not stat.S_ISDIR(mode):
            continue  # a symlink or file of the checkout's: leave it be
        if mode is not None and _has_entries(target):
            continue  # the work tree has its own (tracked) one
        binds.append(Bind(real, target))
        for dest in dict.fromkeys((origin, real)):
            masked = any(dest != m and under(dest, m) for m in masks)
            if masked and not os.path.islink(dest):
                binds.append(Bind(real, dest))
    return binds


def mountable(bind: Bind, work_tree: Path) -> bool:
    """Whether `bind` may still be mounted: a mount point in the work tree must be absent or
    a plain directory (never a symlink or file the agent put there since)."""
    if not under(bind.dest, work_tree):
        return True
    try:
        return stat.S_ISDIR(os.lstat(bind.dest).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _has_entries(path: Path) -> bool:
    with os.scandir(path) as entries:
        return any(True for _ in entries)

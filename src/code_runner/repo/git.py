"""The one module that runs git.

Every call runs with a hardened environment: no system or global config, no inherited
`GIT_*` variables, an explicit `--git-dir` (and `--work-tree` where there is one), hooks,
fsmonitor, auto-gc, global attributes and excludes switched off. Output that names paths is
read with `-z`. A repo whose own config defines hooks, filters or an fsmonitor gets none of
them run by us.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from code_runner import files, proc
from code_runner.errors import GitError, PreflightError

GIT_TIMEOUT_S = 300.0

HARDENING: tuple[str, ...] = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "core.symlinks=true",
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "advice.detachedHead=false",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "submodule.recurse=false",
)

_KEEP_ENV = ("PATH", "HOME", "LANG", "TMPDIR", "TZ")


def hardened_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for every git call: nothing inherited that can steer git."""
    env = {k: v for k, v in os.environ.items() if k in _KEEP_ENV}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_ASKPASS": "/bin/false",
            "GIT_PAGER": "cat",
            "LC_ALL": "C",
        }
    )
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class Repo:
    """A git dir plus (optionally) its work tree; every command is explicit about both."""

    git_dir: Path
    work_tree: Path | None
    overrides: tuple[str, ...] = ()  # extra `-c` pairs, e.g. to switch off the repo's filters

    def argv(self, args: Sequence[str]) -> list[str]:
        base = ["git", *HARDENING, *self.overrides, f"--git-dir={self.git_dir}"]
        if self.work_tree is not None:
            base.append(f"--work-tree={self.work_tree}")
        return [*base, *args]

    def run(
        self,
        *args: str,
        input_bytes: bytes | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        timeout_s: float = GIT_TIMEOUT_S,
        stdin_file: IO[bytes] | None = None,
        stdout_file: IO[bytes] | None = None,
        prefix: Sequence[str] = (),
    ) -> proc.Captured:
        """Run one git command; a large input or output streams through the given files.

        `prefix` runs git under another program (`setpriv`, to write as another uid)."""
        argv = [*prefix, *self.argv(args)]
        cwd = self.work_tree or self.git_dir
        result = proc.capture(
            argv,
            cwd=cwd,
            env=hardened_env(env),
            timeout_s=timeout_s,
            input_bytes=input_bytes,
            stdin_file=stdin_file,
            stdout_file=stdout_file,
        )
        if check and not result.ok:
            raise GitError(argv, result.exit_code, result.stderr.decode("utf-8", "replace"))
        return result

    def out(self, *args: str, **kwargs: object) -> str:
        """stdout of a command as text, trailing newline removed."""
        result = self.run(*args, **kwargs)  # type: ignore[arg-type]
        return result.stdout.decode("utf-8", "surrogateescape").rstrip("\n")

    def z(self, *args: str, **kwargs: object) -> list[bytes]:
        """NUL-separated output split into raw byte fields (for `-z` commands)."""
        result = self.run(*args, **kwargs)  # type: ignore[arg-type]
        data = result.stdout
        if data.endswith(b"\0"):
            data = data[:-1]
        return data.split(b"\0") if data else []


def _run_bare(args: Sequence[str], *, cwd: Path, timeout_s: float = GIT_TIMEOUT_S) -> proc.Captured:
    """A hardened git command that names no repo yet (`init`, `clone`)."""
    return proc.capture(
        ["git", *HARDENING, *args], cwd=cwd, env=hardened_env(), timeout_s=timeout_s
    )


def init(work_tree: Path) -> Repo:
    """A new, empty repository at `work_tree` (no template: no sample hooks)."""
    result = _run_bare(["init", "--quiet", "--template=", "--", str(work_tree)], cwd=work_tree)
    if not result.ok:
        raise GitError(["git", "init", str(work_tree)], result.exit_code, _text(result.stderr))
    return Repo(git_dir=work_tree / ".git", work_tree=work_tree)


def clone_shared(source: Repo, *, git_dir: Path, work_tree: Path) -> Repo:
    """A `clone --shared --no-checkout` of `source` with its git dir at `git_dir`.

    It shares only the source's object store (read-only, through alternates) and inherits
    none of its config, hooks or filters; `origin` is removed so nothing points back.
    """
    result = _run_bare(
        [
            "clone",
            "--quiet",
            "--shared",
            "--no-checkout",
            "--no-tags",
            "--template=",
            f"--separate-git-dir={git_dir}",
            "--",
            str(source.git_dir),
            str(work_tree),
        ],
        cwd=work_tree.parent,
    )
    if not result.ok:
        raise PreflightError(
            f"could not clone {source.work_tree or source.git_dir}: "
            + _text(result.stderr).strip()[-500:],
            fix="check that the source repository is readable and healthy (`git fsck`).",
        )
    clone = Repo(git_dir=git_dir, work_tree=work_tree)
    clone.run("remote", "remove", "origin")
    return clone


def borrow_objects(source: Repo, *, git_dir: Path, work_tree: Path, object_format: str) -> Repo:
    """A new git dir at `git_dir` for `work_tree` that reads `source`'s objects through
    alternates, as `clone --shared --no-checkout` makes one, without running anything in
    the source: no refs, remote, config, hooks or filters of it, nothing pointing back.
    HEAD is unborn: the caller sets it. `object_format` is the source's (sha1, sha256)."""
    result = _run_bare(
        [
            "init",
            "--quiet",
            "--template=",
            f"--object-format={object_format}",
            f"--separate-git-dir={git_dir}",
            "--",
            str(work_tree),
        ],
        cwd=work_tree.parent,
    )
    if not result.ok:
        raise GitError(["git", "init", str(work_tree)], result.exit_code, _text(result.stderr))
    common = _common_dir(source.git_dir)
    info = git_dir / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    files.atomic_write_text(info / "alternates", f"{common / 'objects'}\n", durable=False)
    shallow = common / "shallow"
    if shallow.is_file():  # the source's history ends there: so does the borrowed one
        files.atomic_write_bytes(git_dir / "shallow", shallow.read_bytes(), durable=False)
    return Repo(git_dir=git_dir, work_tree=work_tree)


def _common_dir(git_dir: Path) -> Path:
    """Where a repo keeps its objects: a linked worktree's git dir names its main one."""
    try:
        named = (git_dir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return git_dir
    return (git_dir / named).resolve()


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def open_source(path: Path) -> Repo:
    """Locate the repo containing `path` (a work tree) without trusting its environment.

    Cached per path for the life of the process: spec validation and preflight both ask.
    """
    return _open_source(Path(os.path.abspath(path)))


@functools.lru_cache(maxsize=64)
def _open_source(path: Path) -> Repo:
    if not path.is_dir():
        raise PreflightError(
            f"cwd {path} is not a directory.",
            fix="set `cwd` in the task spec to the root of a git repository.",
        )
    result = proc.capture(
        ["git", *HARDENING, "rev-parse", "--absolute-git-dir", "--show-toplevel"],
        cwd=path,
        env=hardened_env(),
        timeout_s=GIT_TIMEOUT_S,
    )
    lines = result.stdout.decode("utf-8", "surrogateescape").splitlines()
    if not result.ok or len(lines) != 2:
        detail = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PreflightError(
            f"cwd {path} is not a git repository with a work tree"
            + (f" ({detail[-1]})." if detail else "."),
            fix="point `cwd` at a git repository (run `git init` and commit first).",
        )
    repo = Repo(git_dir=Path(lines[0]), work_tree=Path(lines[1]))
    return Repo(repo.git_dir, repo.work_tree, overrides=filter_overrides(repo))


def filter_overrides(repo: Repo) -> tuple[str, ...]:
    """`-c` pairs that switch off every content filter the repo's own config defines.

    `git status` would otherwise run a `clean` filter from the source's config (and
    checkout a `smudge` one); a repo we are asked to work on must not run code in us.
    """
    result = repo.run("config", "--null", "--get-regexp", r"^filter\.", check=False)
    names: set[str] = set()
    for item in result.stdout.split(b"\0"):
        key = item.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        if key.startswith("filter.") and key.count(".") >= 2:
            names.add(key[len("filter.") : key.rindex(".")])
    pairs: list[str] = []
    for name in sorted(names):
        for setting in ("clean=", "smudge=", "process=", "required=false"):
            pairs += ["-c", f"filter.{name}.{setting}"]
    return tuple(pairs)


def head_commit(repo: Repo) -> str | None:
    """The commit HEAD points at, or None for an unborn branch."""
    result = repo.run("rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    if not result.ok:
        return None
    return result.stdout.decode().strip()


def read_refs(git_dir: Path) -> dict[str, str]:
    """Every ref of a git dir as {name: value}, read from files without running git.

    Loose refs override packed ones, as in git. Values are what the files hold (an object
    name, or `ref: ...` for a symbolic ref), which is what a before/after comparison needs.
    """
    refs: dict[str, str] = {}
    try:
        packed = (git_dir / "packed-refs").read_text(errors="surrogateescape")
    except OSError:
        packed = ""
    for line in packed.splitlines():
        if line and line[0] not in "#^":
            sha, _, name = line.partition(" ")
            refs[name] = sha
    root = git_dir / "refs"
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath) / name
            try:
                value = full.read_text(errors="surrogateescape").strip()
            except OSError:
                continue
            refs[full.relative_to(git_dir).as_posix()] = value
    return refs


def decode_path(raw: bytes) -> str:
    """Paths from git are bytes; keep undecodable bytes round-trippable."""
    return raw.decode("utf-8", "surrogateescape")

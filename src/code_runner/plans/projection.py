"""The projected file state: what exists after each item, if each does what it declares.

Starting from the base commit's tree (or from nothing known, when no repository was given),
every item's declared operations are checked against the state *before* the item and then
applied: an `add` onto an existing path, an `edit` of a path an earlier item deleted or
renamed away, a rename onto a used path are refused. Paths are compared by a key that
folds case and Unicode form, so `src/A.py` and `src/a.py` are one file, as on the
case-insensitive checkouts a patch may later be applied on.
"""

from __future__ import annotations

import stat
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from code_runner.errors import PreflightError, UsageError
from code_runner.plans.model import DeclaredFile, FileKind, Item
from code_runner.repo import git

_KINDS = {b"100644": "file", b"100755": "file", b"120000": "symlink", b"160000": "submodule"}


def path_key(path: str) -> str:
    return unicodedata.normalize("NFC", path).casefold()


def _parents(key: str) -> list[str]:
    parts = key.split("/")
    return ["/".join(parts[:n]) for n in range(1, len(parts))]


@dataclass(frozen=True)
class BaseTree:
    """The entries of the plan's base commit: path key -> (path, kind)."""

    commit: str
    entries: dict[str, tuple[str, str]]


def resolve_base(repo: git.Repo, rev: str) -> str:
    result = repo.run(
        "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False
    )
    if not result.ok:
        raise UsageError(
            f"--base {rev!r} is not a commit in {repo.work_tree or repo.git_dir}.",
            fix="name a branch, tag or commit id that exists (`git log --oneline`).",
        )
    return result.stdout.decode().strip()


_SOURCE_FIX = (
    "pass --source the root of the git repository the plan is for (default: the current directory)."
)
_KINDS_OF_PATH = {
    stat.S_IFREG: "a regular file",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def check_source(source: Path) -> None:
    """`--source` names a git work tree's directory; otherwise say what it is and what to pass
    (the task spec's `cwd` wording would point at a file the user never wrote)."""
    try:
        mode = source.stat().st_mode
    except FileNotFoundError:
        raise UsageError(f"--source {source} does not exist.", fix=_SOURCE_FIX) from None
    except OSError as exc:
        raise UsageError(
            f"--source {source} cannot be read: {exc.strerror or exc}.", fix=_SOURCE_FIX
        ) from None
    if not stat.S_ISDIR(mode):
        kind = _KINDS_OF_PATH.get(stat.S_IFMT(mode), "not a directory")
        raise UsageError(
            f"--source {source} is {kind}, not a directory or git repository.", fix=_SOURCE_FIX
        )
    try:
        git.open_source(source)
    except PreflightError:
        raise PreflightError(
            f"--source {source} is a directory but not in a git repository with a work tree.",
            fix="pass --source the root of a git repository (or `git init` and commit there"
            " first).",
        ) from None


def read_base_tree(source: Path, rev: str) -> BaseTree:
    repo = git.open_source(source)
    commit = resolve_base(repo, rev)
    entries: dict[str, tuple[str, str]] = {}
    for raw in repo.z("ls-tree", "-r", "-z", "--full-tree", commit):
        meta, _, name = raw.partition(b"\t")
        mode = meta.split(b" ", 1)[0]
        path = git.decode_path(name)
        entries[path_key(path)] = (path, _KINDS.get(mode, "file"))
    return BaseTree(commit=commit, entries=entries)


@dataclass
class Projection:
    """The state between items. With no base tree, paths not yet touched are unknown."""

    base: BaseTree | None
    entries: dict[str, tuple[str, str]] = field(default_factory=dict)
    dirs: Counter[str] = field(default_factory=Counter)
    gone: set[str] = field(default_factory=set)
    made_by: dict[str, str] = field(default_factory=dict)  # key -> item that added it

    def __post_init__(self) -> None:
        for key, entry in (self.base.entries if self.base else {}).items():
            self._put(key, entry)

    def _put(self, key: str, entry: tuple[str, str]) -> None:
        self.entries[key] = entry
        self.gone.discard(key)
        self.dirs.update(_parents(key))

    def _drop(self, key: str) -> tuple[str, str]:
        entry = self.entries.pop(key, None) or (key, "file")
        self.gone.add(key)
        self.dirs.subtract(_parents(key))
        return entry

    def exists_problem(self, key: str, path: str) -> str | None:
        """Why `path` is not an existing file before this item, or None when it is."""
        if key in self.entries:
            kind = self.entries[key][1]
            if kind == "submodule":
                return f"{path} is a submodule (gitlink); a plan cannot change one"
            return self._parent_problem(key, path)
        if self.dirs[key] > 0:
            return f"{path} is a directory; declare the files in it"
        if self.base is None and key not in self.gone:
            return self._parent_problem(key, path)  # unknown: assumed to exist
        if key in self.gone:
            return f"{path} no longer exists: an earlier item deleted or renamed it away"
        return f"{path} does not exist at the base commit; use kind add to create it"

    def unused_problem(self, key: str, path: str) -> str | None:
        """Why `path` cannot be created before this item, or None when it can."""
        if key in self.entries:
            existing = self.entries[key][0]
            same = "" if existing == path else f" (as {existing})"
            return f"{path} already exists{same}; use kind edit to change it"
        if self.dirs[key] > 0:
            return f"{path} is a directory; a file cannot take its place"
        return self._parent_problem(key, path)

    def _parent_problem(self, key: str, path: str) -> str | None:
        for parent in _parents(key):
            if parent in self.entries:
                name, kind = self.entries[parent]
                return f"{path} lies beneath {name}, which is a {kind}, not a directory"
        return None

    def origin(self, key: str) -> str | None:
        return self.made_by.get(key)

    def apply(self, item: Item) -> None:
        for declared in item.files:
            key = path_key(declared.path)
            if declared.kind is FileKind.ADD:
                self._put(key, (declared.path, "file"))
                self.made_by[key] = item.id
            elif declared.kind is FileKind.DELETE:
                self._drop(key)
                self.made_by.pop(key, None)
            elif declared.kind is FileKind.RENAME and declared.renamed_from is not None:
                old = self._drop(path_key(declared.renamed_from))
                self._put(key, (declared.path, old[1]))
                self.made_by[key] = item.id


def operation_problem(state: Projection, declared: DeclaredFile) -> str | None:
    """Why one declared operation is invalid in the state before its item, or None."""
    key = path_key(declared.path)
    if declared.kind in {FileKind.EDIT, FileKind.DELETE}:
        return state.exists_problem(key, declared.path)
    if declared.kind is FileKind.ADD:
        return state.unused_problem(key, declared.path)
    if declared.renamed_from is None:
        return None  # reported by the field rules
    source_problem = state.exists_problem(path_key(declared.renamed_from), declared.renamed_from)
    if source_problem:
        return f"renamed_from: {source_problem}"
    return state.unused_problem(key, declared.path)

"""Preparing an apply: every check, and the exact target of every path, changing nothing.

Preconditions, each refused with `ApplyRefused` before anything is touched: a non-empty patch;
the source did not change during the run; no merge, rebase, cherry-pick or revert in
progress; the patch applies on the source HEAD (which may have moved since base: say so);
every path it touches is allowlisted, safe and a regular file; no uncommitted source path
overlaps the allowlist (tracked or untracked); each touched path holds exactly its HEAD bytes
(status can miss an assume-unchanged file) with no symlink on the way; and, for a commit,
nothing else is staged and a git identity exists.

Blobs are read through a scratch object directory, so planning writes no byte into `.git`.
Nothing is held whole: git reads the patch from its private copy (`patch_copy`), and each
target's content is streamed into that copy's private directory and hashed there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import code_runner.apply.fs as fs
import code_runner.apply.journal as journal
from code_runner.apply.commit import GitIdentity, commit_identity, commit_message
from code_runner.apply.dod_sandbox import DodSandbox
from code_runner.apply.fs import FileState, Kind
from code_runner.apply.patch_copy import is_blank
from code_runner.errors import ApplyRefused
from code_runner.record import RecordPaths
from code_runner.repo import git, snapshot
from code_runner.task import paths

if TYPE_CHECKING:
    from code_runner.task import DefinitionOfDone

_IN_PROGRESS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply")

_NO_OID = frozenset({"0" * 40, "0" * 64})

_REGULAR_MODES = frozenset({"100644", "100755"})


@dataclass(frozen=True)
class ApplyRequest:
    """Everything the apply step needs; built by the runner or from a finished record."""

    source: git.Repo
    run_id: str
    task_id: str
    title: str
    base: str
    patch: Path  # a private copy (`patch_copy.private_patch`); its directory is our scratch
    allowlist: paths.Allowlist
    dod: DefinitionOfDone
    env: Mapping[str, str]  # the DoD's environment (private HOME and TMPDIR)
    record: RecordPaths
    commit: bool = False
    rollback: bool = True
    run_hooks: bool = False
    author: GitIdentity | None = None
    message: str | None = None  # the whole commit message (a plan item's); else built here
    unchanged_since: snapshot.SourceSnapshot | None = None  # the run's first snapshot
    sandbox: DodSandbox = dataclasses.field(default_factory=DodSandbox)  # the DoD's walls


@dataclass(frozen=True)
class PathChange:
    """One path HEAD + patch changes, from `git diff-index --raw` on a private index."""

    path: str
    old_mode: str
    new_mode: str
    old_oid: str
    new_oid: str

    @property
    def kind(self) -> str:
        if self.old_oid in _NO_OID:
            return "added"
        if self.new_oid in _NO_OID:
            return "deleted"
        if self.old_oid == self.new_oid:
            return "mode_changed"
        return "modified"

    def to_dict(self) -> dict[str, str]:
        return {
            "path": self.path,
            "kind": self.kind,
            "old_mode": self.old_mode,
            "new_mode": self.new_mode,
        }


@dataclass(frozen=True)
class Plan:
    """What an apply will do, established without changing anything."""

    head: str
    base: str
    branch: str | None  # None: detached HEAD
    tree: str
    changes: tuple[PathChange, ...]
    entries: tuple[journal.Entry, ...]
    dirs: tuple[journal.DirEntry, ...]
    target: Mapping[str, Path]  # path -> a private file of its target content
    stat: str
    identity: GitIdentity | None

    @property
    def head_moved(self) -> bool:
        return self.head != self.base

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(c.path for c in self.changes)

    def to_dict(self) -> dict[str, object]:
        return {
            "head": self.head,
            "base": self.base,
            "head_moved": self.head_moved,
            "branch": self.branch,
            "tree": self.tree,
            "changes": [c.to_dict() for c in self.changes],
            "identity": str(self.identity) if self.identity else None,
        }


def common_dir(source: git.Repo) -> Path:
    out = source.out("rev-parse", "--path-format=absolute", "--git-common-dir")
    return Path(out)


def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _target_mode(git_mode: str, prior: FileState) -> int:
    """Permission bits for a written file: the prior bits with exec toggled, like git."""
    executable = git_mode == "100755"
    if prior.kind is Kind.FILE:
        bits = prior.mode
        return bits | ((bits & 0o444) >> 2) if executable else bits & ~0o111
    return (0o777 if executable else 0o666) & ~_umask()


def _z_paths(data: bytes) -> list[str]:
    return [git.decode_path(p) for p in data.split(b"\0") if p]


@contextlib.contextmanager
def _scratch(source: git.Repo) -> Iterator[dict[str, str]]:
    """A private index and object directory: planning writes no byte into the source."""
    with tempfile.TemporaryDirectory(prefix="code-runner-apply-") as tmp:
        objects = Path(tmp) / "objects"
        objects.mkdir()
        yield {
            "GIT_INDEX_FILE": str(Path(tmp) / "index"),
            "GIT_OBJECT_DIRECTORY": str(objects),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common_dir(source) / "objects"),
        }


def _strict(source: git.Repo) -> git.Repo:
    """The source, with the repo's own `apply.*` leniency switched off."""
    extra = ("-c", "apply.ignoreWhitespace=no", "-c", "apply.whitespace=nowarn")
    return dataclasses.replace(source, overrides=source.overrides + extra)


def index_with_patch(source: git.Repo, head: str, patch: Path, env: dict[str, str]) -> str:
    """Fill the index named by `env` with HEAD + patch; the stderr of a failed apply or ''.

    git reads the patch from `patch`, the private copy, never from the record."""
    source.run("read-tree", head, env=env)
    result = _strict(source).run(
        "apply", "--cached", "--binary", "--", str(patch), env=env, check=False
    )
    return "" if result.ok else (result.stderr.decode("utf-8", "replace").strip() or "rejected")


def _read_changes(source: git.Repo, head: str, env: dict[str, str]) -> list[PathChange]:
    fields = source.z(
        "diff-index", "--cached", "--raw", "-z", "--no-renames", "--abbrev=40", head, env=env
    )
    changes: list[PathChange] = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode().lstrip(":").split()
        changes.append(
            PathChange(git.decode_path(fields[i + 1]), meta[0], meta[1], meta[2], meta[3])
        )
    return changes


def prepare(req: ApplyRequest, pre: snapshot.SourceSnapshot) -> Plan:
    """Establish what the apply will do, or raise `ApplyRefused` saying why it must not."""
    source = req.source
    root = source.work_tree
    assert root is not None
    if is_blank(req.patch):
        raise ApplyRefused(
            "the patch is empty: there is nothing to apply.",
            fix="nothing to do; the run made no allowlisted change.",
        )
    if req.unchanged_since is not None:
        moved = snapshot.differences(req.unchanged_since, pre)
        if moved:
            raise ApplyRefused(
                "the source repo changed while the run was working ("
                + "; ".join(moved[:5])
                + "), so the patch was not applied.",
                fix=f"review the source, then apply explicitly: `code-runner apply "
                f"{req.record.output_dir}`.",
            )
    busy = [name for name in _IN_PROGRESS if (source.git_dir / name).exists()]
    if busy:
        raise ApplyRefused(
            f"the source repo is in the middle of a merge, rebase, cherry-pick or revert "
            f"({', '.join(busy)}).",
            fix="finish or abort that operation (`git merge --abort`, `git rebase --abort`), "
            "then apply again.",
        )
    head = git.head_commit(source)
    if head is None:
        raise ApplyRefused(
            "the source HEAD has no commit (an unborn branch).",
            fix="check out the branch the run was made from, then apply again.",
        )
    branch_result = source.run("symbolic-ref", "--quiet", "HEAD", check=False)
    branch = branch_result.stdout.decode().strip() if branch_result.ok else None
    with _scratch(source) as env:
        problem = index_with_patch(source, head, req.patch, env)
        if problem:
            if head != req.base:
                raise ApplyRefused(
                    f"the source HEAD moved since the run (base {req.base[:12]}, now "
                    f"{head[:12]}) and the patch does not apply cleanly on the new HEAD: "
                    f"{problem}",
                    fix="re-run the task from the new HEAD, or check out the base commit and "
                    "apply there.",
                )
            raise ApplyRefused(
                f"the patch does not apply on the source HEAD {head[:12]}: {problem}",
                fix="the patch file may be damaged; re-run the task.",
            )
        tree = source.out("write-tree", env=env)
        changes = _read_changes(source, head, env)
        _check_changes(req, changes)
        stat = _strict(source).run("apply", "--stat", "--binary", "--", str(req.patch), check=False)
        target, target_sha = _read_targets(req, changes, env)
    _check_dirty_overlap(req)
    _check_staged(req, head)
    entries, dirs = _check_paths(req, changes, target_sha)
    identity = None
    if req.commit:
        identity = commit_identity(source, req.author)
        if identity is None:
            raise ApplyRefused(
                "a commit was asked for but the source has no git identity "
                "(user.name and user.email are not set).",
                fix="set them (`git config user.name ...; git config user.email ...`) or "
                'pass --author "Name <email>".',
            )
        commit_message(req.title, req.task_id, req.run_id)  # refuses unusable ids early
    return Plan(
        head=head,
        base=req.base,
        branch=branch,
        tree=tree,
        changes=tuple(changes),
        entries=tuple(entries),
        dirs=tuple(dirs),
        target=target,
        stat=stat.stdout.decode("utf-8", "replace"),
        identity=identity,
    )


def _read_targets(
    req: ApplyRequest, changes: list[PathChange], env: dict[str, str]
) -> tuple[dict[str, Path], dict[str, str]]:
    """Each target's content, streamed from git into a private file beside the patch copy
    and checked against its blob id; (path -> file, path -> sha256)."""
    object_format = req.source.out("rev-parse", "--show-object-format")
    into = Path(tempfile.mkdtemp(prefix="target-", dir=req.patch.parent))
    target: dict[str, Path] = {}
    sha: dict[str, str] = {}
    for index, c in enumerate(changes):
        if c.new_mode not in _REGULAR_MODES:
            continue
        path = into / str(index)
        with path.open("wb") as f:
            req.source.run("cat-file", "blob", c.new_oid, env=env, stdout_file=f)
        sha[c.path], blob_id = fs.digest_file(path, object_format)
        if blob_id != c.new_oid:
            raise ApplyRefused(
                f"git gave content for {c.path} that is not its blob {c.new_oid}.",
                fix="run `git fsck` in the source; its object store may be damaged.",
            )
        target[c.path] = path
    return target, sha


def _check_changes(req: ApplyRequest, changes: list[PathChange]) -> None:
    if not changes:
        raise ApplyRefused(
            "the patch changes nothing on the source HEAD (it is already applied?).",
            fix="nothing to do; check `git log` in the source.",
        )
    bad: list[str] = []
    for change in changes:
        problem = paths.path_problem(change.path)
        if problem is not None:
            bad.append(f"{change.path!r} {problem}")
        elif not req.allowlist.allows(change.path):
            bad.append(f"{change.path} is outside the allowlist")
        elif {change.old_mode, change.new_mode} - _REGULAR_MODES - {"000000"}:
            bad.append(
                f"{change.path} is not a regular file ({change.old_mode} -> {change.new_mode})"
            )
    if bad:
        raise ApplyRefused(
            "the patch touches paths the apply step may not write: " + "; ".join(bad[:10]),
            fix="the record may have been altered; re-run the task.",
        )


def _dirty_paths(source: git.Repo) -> list[str]:
    """Every path `git status` reports (tracked changes, renames' both sides, untracked)."""
    fields = source.z("status", "--porcelain=v1", "-z", "--untracked-files=all",
                      "--ignore-submodules=all")  # fmt: skip
    paths: list[str] = []
    i = 0
    while i < len(fields):
        entry = git.decode_path(fields[i])
        paths.append(entry[3:])
        if entry[:1] in "RC" or entry[1:2] in "RC":
            i += 1
            paths.append(git.decode_path(fields[i]))
        i += 1
    return paths


def _check_dirty_overlap(req: ApplyRequest) -> None:
    overlap = sorted({p for p in _dirty_paths(req.source) if req.allowlist.allows(p)})
    if overlap:
        raise ApplyRefused(
            "uncommitted changes in the source overlap the allowlist: "
            + ", ".join(overlap[:20])
            + (f" (and {len(overlap) - 20} more)" if len(overlap) > 20 else "")
            + ". Nothing was changed.",
            fix="commit, stash or move those changes, then apply again.",
        )


def _check_staged(req: ApplyRequest, head: str) -> None:
    if not req.commit:
        return
    staged = _z_paths(
        req.source.run("diff-index", "--cached", "--name-only", "-z", head, "--").stdout
    )
    if staged:
        raise ApplyRefused(
            "other changes are staged in the source index ("
            + ", ".join(staged[:10])
            + "); a commit would include them or disturb them. Nothing was changed.",
            fix="commit or unstage them (`git restore --staged PATH`), or apply without --commit.",
        )


def _check_paths(  # noqa: C901 - one refusal per precondition on a path, in reading order
    req: ApplyRequest, changes: list[PathChange], target_sha: Mapping[str, str]
) -> tuple[list[journal.Entry], list[journal.DirEntry]]:
    """Each touched path holds its HEAD bytes (status can miss assume-unchanged files), and
    nothing on the way is a symlink. Returns the journal entries."""
    source = req.source
    root = source.work_tree
    assert root is not None
    object_format = source.out("rev-parse", "--show-object-format")
    filemode = source.run("config", "--local", "--bool", "--get", "core.fileMode", check=False)
    check_modes = filemode.stdout.decode().strip() != "false"
    problems: list[str] = []
    entries: list[journal.Entry] = []
    paths = [c.path for c in changes]
    dir_entries: list[journal.DirEntry] = []
    for d in fs.ancestors(paths):
        try:
            dir_entries.append(journal.dir_state(root, d))
        except fs.UnsafePath as exc:
            problems.append(exc.message)
    if set(paths) & {d.path for d in dir_entries}:
        problems.append("the patch turns a file into a directory or back; apply it by hand")
    for index, change in enumerate(changes):
        try:
            state, blob_id = fs.read_state(root, change.path, object_format)
        except fs.UnsafePath as exc:
            problems.append(exc.message)
            continue
        if change.kind == "added":
            if state.kind is not Kind.MISSING:
                problems.append(f"{change.path} already exists in the source ({state.kind})")
                continue
        elif state.kind is not Kind.FILE or blob_id is None:
            problems.append(f"{change.path} is {state.kind.value} in the source, not a file")
            continue
        elif blob_id != change.old_oid:
            problems.append(f"{change.path} differs from HEAD in the source")
            continue
        elif check_modes and bool(state.mode & 0o100) != (change.old_mode == "100755"):
            problems.append(f"{change.path} has a different executable bit than HEAD")
            continue
        after = fs.MISSING
        if change.path in target_sha:
            after = FileState(
                Kind.FILE, _target_mode(change.new_mode, state), target_sha[change.path]
            )
        saved = str(index) if state.kind is Kind.FILE else None
        entries.append(journal.Entry(change.path, state, after, saved))
    if problems:
        raise ApplyRefused(
            "the source is not in a state to take the patch: " + "; ".join(problems[:10]) + ".",
            fix="make those paths match HEAD (commit, stash or remove local changes), then "
            "apply again.",
        )
    return entries, dir_entries

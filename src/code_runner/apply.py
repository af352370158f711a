"""Complete-task mode and explicit apply: land a verified patch in the source, or roll back.

This is the one step that changes the user's repo, so it is a transaction:

    prepare (read only)  preconditions: non-empty patch; no merge/rebase in progress; the
                         patch applies on the source HEAD (which may have moved since base:
                         say so); every path it touches is allowlisted and safe; no dirty
                         source path overlaps the allowlist (tracked or untracked); each
                         touched path holds exactly its HEAD bytes; nothing else is staged
                         and an identity exists when a commit is asked for
    journal              prior state of every touched path and directory, saved under the
                         output dir and registered in the state dir, BEFORE the first write
    write                each path replaced atomically, without following symlinks
    verify               the same DoD, run in the source; byproducts it leaves are moved out
    commit (optional)    a tree built from HEAD + the patch in a private index, a commit
                         with a title and trailers the runner owns, a compare-and-swap ref
                         update, and the user's index updated for the patch's paths only
    roll back            on failure (when asked), on any error while writing, on a signal:
                         exactly the journaled paths go back to their prior bytes and modes

Planning reads blobs through a scratch object directory, so a refused or rolled-back apply
leaves no byte of `.git` changed; only a commit writes objects into the source.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from code_runner import fsx, gitx, journal, policy, snapshot, verify, workspace
from code_runner.errors import ApplyRefused, CodeRunnerError, Interrupted, UsageError
from code_runner.events import EventKind, EventSink
from code_runner.journal import FileState, Journal, Kind, Phase
from code_runner.record import RecordPaths, utc_now

if TYPE_CHECKING:
    from code_runner.spec import DefinitionOfDone

LOCK_TIMEOUT_S = 600.0
TITLE_MAX_CHARS = 72
TRAILERS = ("Code-Runner-Task", "Code-Runner-Run", "Code-Runner-DoD")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_IN_PROGRESS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply")
_NO_OID = frozenset({"0" * 40, "0" * 64})
_REGULAR_MODES = frozenset({"100644", "100755"})


# --- values -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """Who a commit is by: from the source's git config, or `--author "Name <email>"`."""

    name: str
    email: str

    @classmethod
    def parse(cls, text: str) -> Identity:
        match = re.fullmatch(r"\s*([^<>]*?)\s*<([^<>\s]+@[^<>\s]+)>\s*", text)
        if match is None or not match.group(1) or _has_control(text):
            raise UsageError(
                f"--author {text!r} is not `Name <email>`.",
                fix='pass --author "Your Name <you@example.com>".',
            )
        return cls(match.group(1), match.group(2))

    def env(self) -> dict[str, str]:
        return {
            "GIT_AUTHOR_NAME": self.name,
            "GIT_AUTHOR_EMAIL": self.email,
            "GIT_COMMITTER_NAME": self.name,
            "GIT_COMMITTER_EMAIL": self.email,
        }

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


@dataclass(frozen=True)
class ApplyRequest:
    """Everything the apply step needs; built by the runner or from a finished record."""

    source: gitx.Repo
    run_id: str
    task_id: str
    title: str
    base: str
    patch: bytes
    allowlist: policy.Allowlist
    dod: DefinitionOfDone
    env: Mapping[str, str]  # the DoD's environment (private HOME and TMPDIR)
    record: RecordPaths
    commit: bool = False
    rollback: bool = True
    run_hooks: bool = False
    author: Identity | None = None
    unchanged_since: snapshot.SourceSnapshot | None = None  # the run's first snapshot


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
    prior: Mapping[str, bytes]  # path -> prior bytes, for files that exist
    target: Mapping[str, bytes]  # path -> target bytes, for files that will exist
    stat: str
    identity: Identity | None

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


@dataclass(frozen=True)
class ApplyOutcome:
    """What the apply step did; `result_fields()` is what result.json records."""

    applied: bool = False
    dod_passed: bool | None = None
    commit: str | None = None
    rolled_back: bool = False
    error: str | None = None
    refused: bool = False
    interrupted: bool = False
    plan: Plan | None = None
    verdict: verify.Verdict | None = None
    byproducts: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    pre: snapshot.SourceSnapshot | None = None
    post: snapshot.SourceSnapshot | None = None

    @property
    def ok(self) -> bool:
        return (
            self.applied
            and self.dod_passed is True
            and not self.rolled_back
            and self.error is None
            and not self.unexpected
        )

    def result_fields(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "source_patch_applied": self.applied,
            "source_dod_passed": self.dod_passed,
            "source_commit": self.commit,
            "source_rollback_applied": self.rolled_back,
            "source_apply_error": self.error,
            "source_apply": {
                "refused": self.refused,
                "interrupted": self.interrupted,
                "head_before": plan.head if plan else (self.pre.head if self.pre else None),
                "head_moved_since_base": plan.head_moved if plan else None,
                "changes": [c.to_dict() for c in plan.changes] if plan else [],
                "source_dod": self.verdict.to_dict() if self.verdict else None,
                "byproducts_moved": list(self.byproducts),
                "unexpected_changes": list(self.unexpected),
            },
        }


# --- small helpers ------------------------------------------------------------------------


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"} for ch in text)


def commit_title(title: str, task_id: str) -> str:
    """One line a task title (or an agent) cannot use to forge trailers or hide text.

    Line breaks collapse to spaces; control, format (bidi, zero-width), separator,
    surrogate, private-use and unassigned characters are dropped; runs of whitespace become
    one space.
    """
    kept = []
    for ch in title:
        category = unicodedata.category(ch)
        if ch.isspace() or category in {"Zl", "Zp"}:
            kept.append(" ")
        elif category in {"Cc", "Cf", "Cs", "Co", "Cn"}:
            continue
        else:
            kept.append(ch)
    text = " ".join("".join(kept).split())
    if len(text) > TITLE_MAX_CHARS:
        text = text[: TITLE_MAX_CHARS - 1].rstrip() + "…"
    return text or f"code-runner task {task_id}"


def commit_message(title: str, task_id: str, run_id: str) -> str:
    for label, value in (("task id", task_id), ("run id", run_id)):
        if not _SAFE_ID.fullmatch(value):
            raise ApplyRefused(
                f"the {label} {value!r} cannot go into a commit trailer.",
                fix="use a record written by code-runner (ids are letters, digits, '.', '_', '-').",
            )
    return (
        f"{commit_title(title, task_id)}\n\n"
        f"Code-Runner-Task: {task_id}\nCode-Runner-Run: {run_id}\nCode-Runner-DoD: passed\n"
    )


def _config_value(source: gitx.Repo, key: str) -> str | None:
    """`key` as `git commit` in the source would see it: repo config, then the user's."""
    home = Path(os.environ.get("HOME", "/nonexistent"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    attempts: list[tuple[str, ...]] = [("config", "--local", "--get", key)]
    for path in (home / ".gitconfig", xdg / "git" / "config"):
        if path.is_file():
            attempts.append(("config", "--file", str(path), "--includes", "--get", key))
    for args in attempts:
        result = source.run(*args, check=False)
        value = result.stdout.decode("utf-8", "replace").strip()
        if result.ok and value:
            return value
    return None


def commit_identity(source: gitx.Repo, author: Identity | None) -> Identity | None:
    """`author` when given, else user.name/user.email from the source's git config."""
    if author is not None:
        return author
    name, email = _config_value(source, "user.name"), _config_value(source, "user.email")
    if not name or not email or _has_control(name + email) or "<" in name + email:
        return None
    return Identity(name, email.strip("<>"))


def _common_dir(source: gitx.Repo) -> Path:
    out = source.out("rev-parse", "--path-format=absolute", "--git-common-dir")
    return Path(out)


def _blob_id(data: bytes, object_format: str) -> str:
    return hashlib.new(object_format, b"blob %d\0" % len(data) + data).hexdigest()


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
    return [gitx.decode_path(p) for p in data.split(b"\0") if p]


@contextlib.contextmanager
def _scratch(source: gitx.Repo) -> Iterator[dict[str, str]]:
    """A private index and object directory: planning writes no byte into the source."""
    with tempfile.TemporaryDirectory(prefix="code-runner-apply-") as tmp:
        objects = Path(tmp) / "objects"
        objects.mkdir()
        yield {
            "GIT_INDEX_FILE": str(Path(tmp) / "index"),
            "GIT_OBJECT_DIRECTORY": str(objects),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(_common_dir(source) / "objects"),
        }


def _strict(source: gitx.Repo) -> gitx.Repo:
    """The source, with the repo's own `apply.*` leniency switched off."""
    extra = ("-c", "apply.ignoreWhitespace=no", "-c", "apply.whitespace=nowarn")
    return dataclasses.replace(source, overrides=source.overrides + extra)


def _index_with_patch(source: gitx.Repo, head: str, patch: bytes, env: dict[str, str]) -> str:
    """Fill the index named by `env` with HEAD + patch; the stderr of a failed apply or ''."""
    source.run("read-tree", head, env=env)
    result = _strict(source).run(
        "apply", "--cached", "--binary", "-", input_bytes=patch, env=env, check=False
    )
    return "" if result.ok else (result.stderr.decode("utf-8", "replace").strip() or "rejected")


def _read_changes(source: gitx.Repo, head: str, env: dict[str, str]) -> list[PathChange]:
    fields = source.z(
        "diff-index", "--cached", "--raw", "-z", "--no-renames", "--abbrev=40", head, env=env
    )
    changes: list[PathChange] = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode().lstrip(":").split()
        changes.append(
            PathChange(gitx.decode_path(fields[i + 1]), meta[0], meta[1], meta[2], meta[3])
        )
    return changes


# --- prepare: every check, nothing changed --------------------------------------------------


def prepare(req: ApplyRequest, pre: snapshot.SourceSnapshot) -> Plan:
    """Establish what the apply will do, or raise `ApplyRefused` saying why it must not."""
    source = req.source
    root = source.work_tree
    assert root is not None
    if not req.patch.strip():
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
    head = gitx.head_commit(source)
    if head is None:
        raise ApplyRefused(
            "the source HEAD has no commit (an unborn branch).",
            fix="check out the branch the run was made from, then apply again.",
        )
    branch_result = source.run("symbolic-ref", "--quiet", "HEAD", check=False)
    branch = branch_result.stdout.decode().strip() if branch_result.ok else None
    with _scratch(source) as env:
        problem = _index_with_patch(source, head, req.patch, env)
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
        stat = _strict(source).run(
            "apply", "--stat", "--binary", "-", input_bytes=req.patch, check=False
        )
        target = {
            c.path: source.run("cat-file", "blob", c.new_oid, env=env).stdout
            for c in changes
            if c.new_mode in _REGULAR_MODES
        }
    _check_dirty_overlap(req)
    _check_staged(req, head)
    entries, dirs, prior = _check_paths(req, changes, target)
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
        prior=prior,
        target=target,
        stat=stat.stdout.decode("utf-8", "replace"),
        identity=identity,
    )


def _check_changes(req: ApplyRequest, changes: list[PathChange]) -> None:
    if not changes:
        raise ApplyRefused(
            "the patch changes nothing on the source HEAD (it is already applied?).",
            fix="nothing to do; check `git log` in the source.",
        )
    bad: list[str] = []
    for change in changes:
        problem = policy.path_problem(change.path)
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


def _dirty_paths(source: gitx.Repo) -> list[str]:
    """Every path `git status` reports (tracked changes, renames' both sides, untracked)."""
    fields = source.z("status", "--porcelain=v1", "-z", "--untracked-files=all",
                      "--ignore-submodules=all")  # fmt: skip
    paths: list[str] = []
    i = 0
    while i < len(fields):
        entry = gitx.decode_path(fields[i])
        paths.append(entry[3:])
        if entry[:1] in "RC" or entry[1:2] in "RC":
            i += 1
            paths.append(gitx.decode_path(fields[i]))
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


def _check_paths(
    req: ApplyRequest, changes: list[PathChange], target: Mapping[str, bytes]
) -> tuple[list[journal.Entry], list[journal.DirEntry], dict[str, bytes]]:
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
    prior: dict[str, bytes] = {}
    paths = [c.path for c in changes]
    dir_entries: list[journal.DirEntry] = []
    for d in journal.ancestors(paths):
        try:
            dir_entries.append(journal.dir_state(root, d))
        except journal.UnsafePath as exc:
            problems.append(exc.message)
    if set(paths) & {d.path for d in dir_entries}:
        problems.append("the patch turns a file into a directory or back; apply it by hand")
    for index, change in enumerate(changes):
        try:
            state, data = journal.read_state(root, change.path)
        except journal.UnsafePath as exc:
            problems.append(exc.message)
            continue
        if change.kind == "added":
            if state.kind is not Kind.MISSING:
                problems.append(f"{change.path} already exists in the source ({state.kind})")
                continue
        elif state.kind is not Kind.FILE or data is None:
            problems.append(f"{change.path} is {state.kind.value} in the source, not a file")
            continue
        elif _blob_id(data, object_format) != change.old_oid:
            problems.append(f"{change.path} differs from HEAD in the source")
            continue
        elif check_modes and bool(state.mode & 0o100) != (change.old_mode == "100755"):
            problems.append(f"{change.path} has a different executable bit than HEAD")
            continue
        if data is not None:
            prior[change.path] = data
        after = journal.MISSING
        if change.path in target:
            after = FileState.of_bytes(target[change.path], _target_mode(change.new_mode, state))
        entries.append(
            journal.Entry(change.path, state, after, str(index) if data is not None else None)
        )
    if problems:
        raise ApplyRefused(
            "the source is not in a state to take the patch: " + "; ".join(problems[:10]) + ".",
            fix="make those paths match HEAD (commit, stash or remove local changes), then "
            "apply again.",
        )
    return entries, dir_entries, prior


# --- the transaction ----------------------------------------------------------------------


class Transaction:
    """The journaled change of the source. Leaving the block with an exception rolls back."""

    def __init__(self, req: ApplyRequest, plan: Plan, sink: EventSink) -> None:
        self.req = req
        self.plan = plan
        self.sink = sink
        assert req.source.work_tree is not None
        self.root = req.source.work_tree
        self.journal = Journal(
            path=req.record.apply_journal,
            run_id=req.run_id,
            task_id=req.task_id,
            work_tree=str(self.root),
            git_dir=str(req.source.git_dir),
            head_before=plan.head,
            tree=plan.tree,
            token=secrets.token_hex(4),
            entries=plan.entries,
            dirs=plan.dirs,
            commit_requested=req.commit,
            pid_started=workspace._process_start(os.getpid()),
        )
        self.entered = False
        self.applied = False
        self.rolled_back = False
        self.commit: str | None = None
        self.byproducts: list[str] = []

    def __enter__(self) -> Transaction:
        old = self.journal.path
        if old.exists() and Journal.load(old).is_open:
            previous = Journal.load(old)
            if previous.owner_alive():
                raise ApplyRefused(
                    f"another apply of this record is running (pid {previous.pid}).",
                    fix="wait for it to finish.",
                )
            repaired = repair(old, sink=self.sink)
            if repaired.action == "needs you":
                raise ApplyRefused(
                    f"an earlier apply of this record was interrupted and cannot be repaired "
                    f"automatically: {repaired.detail}",
                    fix=f"restore those paths by hand, then delete {old}.",
                )
        prior_dir = self.journal.prior_dir
        if prior_dir.exists():
            workspace.force_rmtree(prior_dir)
        for entry in self.plan.entries:  # prior bytes first: the journal points at them
            if entry.saved is not None:
                fsx.atomic_write_bytes(prior_dir / entry.saved, self.plan.prior[entry.path])
        self.journal.save()  # durable, before the first byte of the source changes
        journal.register(self.journal)  # how `gc` finds it if this process dies
        self.entered = True
        self.sink.emit(
            EventKind.APPLY_JOURNALED,
            journal=str(self.journal.path),
            paths=list(self.plan.paths),
        )
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None and self.journal.is_open:
            if self.journal.phase is Phase.COMMITTING and self._commit_landed():
                self._finish_commit()
            else:
                with contextlib.suppress(Exception):
                    self.rollback(f"{type(exc).__name__}: {exc}")
        if not self.journal.is_open:
            journal.unregister(self.req.run_id)

    # -- steps --

    def write(self) -> None:
        """Every path to its target state: deletions, then emptied dirs, then files."""
        root, plan = self.root, self.plan
        for entry in plan.entries:
            if entry.after.kind is Kind.MISSING:
                journal.remove_file(root, entry.path)
        written = {e.path for e in plan.entries if e.after.kind is Kind.FILE}
        needed = set(journal.ancestors(sorted(written)))
        for d in sorted(plan.dirs, key=lambda d: -d.path.count("/")):
            if d.path not in needed:
                journal.remove_dir_if_empty(root, d.path)
        for index, entry in enumerate(plan.entries):
            if entry.after.kind is Kind.FILE:
                journal.put_file(
                    root,
                    entry.path,
                    plan.target[entry.path],
                    entry.after.mode,
                    tmp_name=journal.tmp_name(self.journal.token, index),
                )
        wrong = journal.differing(self.journal, "after")
        if wrong:
            raise CodeRunnerError(f"after writing, these paths do not hold the patch: {wrong}")
        self.applied = True
        self.journal.move_to(Phase.VERIFYING)
        self.sink.emit(EventKind.SOURCE_PATCH_APPLIED, paths=list(plan.paths), head=plan.head)

    def verify(self, pre: snapshot.SourceSnapshot) -> verify.Verdict:
        """The same DoD, in the source. Untracked files it leaves are moved to the record."""
        dod = self.req.dod
        self.sink.emit(EventKind.DOD_STARTED, label="source", command=dod.command)
        verdict = verify.run_dod(
            dod,
            cwd=self.root,
            env={**self.req.env, "GIT_OPTIONAL_LOCKS": "0"},
            log_path=self.req.record.verifier_log,
            label="source",
        )
        self.sink.emit(
            EventKind.DOD_FINISHED,
            label="source",
            passed=verdict.passed,
            exit_code=verdict.exit_code,
            reason=verdict.reason,
        )
        self._move_byproducts(pre)
        return verdict

    def _move_byproducts(self, pre: snapshot.SourceSnapshot) -> None:
        now = snapshot.take(self.req.source)
        ours = set(self.plan.paths)
        new = sorted(p for p in now.untracked if p not in pre.untracked and p not in ours)
        if not new:
            return
        dest_root = self.journal.apply_dir / "byproducts" / self.journal.token
        for rel in new:
            src = self.root / rel
            dest = dest_root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(src, dest)
            parent = Path(rel).parent
            while parent != Path("."):
                with contextlib.suppress(OSError):
                    journal.remove_dir_if_empty(self.root, parent.as_posix())
                parent = parent.parent
        self.byproducts = new
        self.sink.emit(EventKind.SOURCE_BYPRODUCTS_MOVED, paths=new, moved_to=str(dest_root))

    def paths_changed_by_dod(self) -> list[str]:
        return journal.differing(self.journal, "after")

    def commit_now(self) -> str:
        """Commit HEAD + patch (built in a private index) and move the branch to it."""
        req, plan = self.req, self.plan
        assert plan.identity is not None
        source = req.source
        message = commit_message(req.title, req.task_id, req.run_id)
        self.journal.move_to(Phase.COMMITTING)
        with tempfile.TemporaryDirectory(prefix="code-runner-commit-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **plan.identity.env()}
            problem = _index_with_patch(source, plan.head, req.patch, env)
            if problem:
                raise CodeRunnerError(f"the patch no longer applies on HEAD: {problem}")
            tree = source.out("write-tree", env=env)
            if tree != plan.tree:
                raise CodeRunnerError(f"the commit tree {tree} is not the planned {plan.tree}")
            if req.run_hooks:
                commit = self._commit_with_hooks(env, message)
            else:
                commit = source.out(
                    "commit-tree", tree, "-p", plan.head, "-F", "-",
                    input_bytes=message.encode(), env=env,
                )  # fmt: skip
                self.journal.commit = commit
                self.journal.save()
                source.run(
                    "update-ref", "-m", f"code-runner: apply run {req.run_id}",
                    "HEAD", commit, plan.head,
                )  # fmt: skip
        self.commit = commit
        self._finish_commit()
        self.sink.emit(
            EventKind.SOURCE_COMMITTED,
            commit=commit,
            paths=list(plan.paths),
            branch=plan.branch,
            hooks_ran=req.run_hooks,
        )
        return commit

    def _commit_with_hooks(self, env: dict[str, str], message: str) -> str:
        """`git commit` with the source's own hooks, then prove the hooks changed nothing."""
        source, plan = self.req.source, self.plan
        configured = source.run("config", "--local", "--get", "core.hooksPath", check=False)
        hooks = configured.stdout.decode().strip()
        hooks_dir = Path(hooks) if hooks else _common_dir(source) / "hooks"
        if not hooks_dir.is_absolute():
            hooks_dir = self.root / hooks_dir
        hooked = dataclasses.replace(
            source, overrides=(*source.overrides, "-c", f"core.hooksPath={hooks_dir}")
        )
        result = hooked.run(
            "commit", "--quiet", "--cleanup=verbatim", "-F", "-",
            input_bytes=message.encode(), env=env, check=False,
        )  # fmt: skip
        head = gitx.head_commit(source)
        if head is None or head == plan.head:
            detail = (result.stderr or result.stdout).decode("utf-8", "replace").strip()
            raise CodeRunnerError(f"git commit (with the source's hooks) failed: {detail[-500:]}")
        self.journal.commit = head
        self.journal.save()
        if not self._commit_landed():
            source.run("update-ref", "-m", "code-runner: undo hook-changed commit", "HEAD",
                       plan.head, head)  # fmt: skip
            raise CodeRunnerError(
                "a hook of the source repo changed what was committed; the commit was undone."
            )
        return head

    def _commit_landed(self) -> bool:
        """HEAD is a commit whose parent is the old HEAD and whose tree is the plan's."""
        source = self.req.source
        head = gitx.head_commit(source)
        if head is None or head == self.plan.head:
            return False
        parent = source.run("rev-parse", "--verify", "--quiet", f"{head}^1", check=False)
        tree = source.run("rev-parse", "--verify", "--quiet", f"{head}^{{tree}}", check=False)
        landed = (
            parent.stdout.decode().strip() == self.plan.head
            and tree.stdout.decode().strip() == self.plan.tree
        )
        if landed:
            self.commit = head
        return landed

    def _finish_commit(self) -> None:
        assert self.commit is not None
        update_index(self.req.source, self.commit, self.plan.paths)
        self.journal.commit = self.commit
        self.journal.move_to(Phase.FINISHED)

    def finish(self) -> None:
        self.journal.move_to(Phase.FINISHED)

    def leave_applied(self) -> None:
        self.journal.move_to(Phase.LEFT_APPLIED, "the DoD failed; rollback_on_failure is false")

    def rollback(self, why: str) -> None:
        if self.journal.phase is Phase.ROLLED_BACK:
            return
        kept = journal.restore(self.journal)
        wrong = journal.differing(self.journal, "before")
        if wrong:
            raise CodeRunnerError(f"after the rollback these paths still differ: {wrong}")
        self.rolled_back = True
        note = f"rolled back: {why}" + (f"; not empty, kept: {kept}" if kept else "")
        self.journal.move_to(Phase.ROLLED_BACK, note)
        self.sink.emit(
            EventKind.SOURCE_ROLLED_BACK, paths=list(self.plan.paths), why=why, kept_dirs=kept
        )


def update_index(source: gitx.Repo, commit: str, paths: tuple[str, ...]) -> None:
    """Point the user's index entries for `paths` (and only those) at `commit`."""
    lines = source.run(
        "ls-tree", "-z", "--full-tree", commit, "--", *paths, env={"GIT_LITERAL_PATHSPECS": "1"}
    ).stdout
    present: dict[str, bytes] = {}
    for item in lines.split(b"\0"):
        if item:
            meta, _, name = item.partition(b"\t")
            mode, _type, oid = meta.split()
            present[gitx.decode_path(name)] = mode + b" " + oid
    zero = b"0 " + b"0" * len(commit)
    info = b"".join(
        present.get(p, zero) + b"\t" + p.encode("utf-8", "surrogateescape") + b"\0" for p in paths
    )
    source.run("update-index", "-z", "--index-info", input_bytes=info)


# --- the whole step -----------------------------------------------------------------------


def apply_patch(req: ApplyRequest, sink: EventSink) -> ApplyOutcome:
    """Land `req.patch` in the source, verify it there, commit or roll back. Never raises an
    expected failure: the outcome says what happened (a signal is reported as interrupted)."""
    source = req.source
    sink.emit(EventKind.APPLY_STARTED, source=str(source.work_tree), commit=req.commit)
    try:
        with apply_lock(source.git_dir):
            repair_stale(source_git_dir=str(source.git_dir), sink=sink, locked=True)
            pre = snapshot.take(source)
            try:
                plan = prepare(req, pre)
            except (ApplyRefused, journal.UnsafePath) as exc:
                sink.emit(EventKind.APPLY_REFUSED, message=exc.message)
                return ApplyOutcome(refused=True, error=exc.render(), pre=pre, post=pre)
            return _transact(req, plan, pre, sink)
    except Interrupted as exc:  # before the journal: nothing was changed
        return ApplyOutcome(refused=True, interrupted=True, error=exc.render())
    except CodeRunnerError as exc:  # the lock, a git failure before the journal
        sink.emit(EventKind.APPLY_REFUSED, message=exc.message)
        return ApplyOutcome(refused=True, error=exc.render())


def apply_lock(git_dir: Path) -> contextlib.AbstractContextManager[None]:
    """One apply (or repair) at a time per source."""
    return workspace.source_lock(Path(f"{git_dir}#apply"), timeout_s=LOCK_TIMEOUT_S)


def _transact(
    req: ApplyRequest, plan: Plan, pre: snapshot.SourceSnapshot, sink: EventSink
) -> ApplyOutcome:
    tx = Transaction(req, plan, sink)
    verdict: verify.Verdict | None = None
    error: str | None = None
    interrupted = False
    try:
        with tx:
            tx.write()
            verdict = tx.verify(pre)
            changed = tx.paths_changed_by_dod()
            if not verdict.passed or changed:
                error = (
                    f"the DoD failed in the source: {verdict.reason}"
                    if not verdict.passed
                    else f"the DoD in the source rewrote patched paths: {', '.join(changed)}"
                )
                if req.rollback:
                    tx.rollback(error)
                else:
                    tx.leave_applied()
            elif req.commit:
                tx.commit_now()
            else:
                tx.finish()
    except (Interrupted, KeyboardInterrupt) as exc:
        interrupted, error = True, f"interrupted ({exc or 'SIGINT'})"
    except CodeRunnerError as exc:
        error = exc.render()
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
    if tx.entered and tx.journal.is_open:
        error = (error or "") + (
            f"; the source may be half-applied: run `code-runner gc` to repair it from "
            f"{tx.journal.path}"
        )
    post = snapshot.take(req.source)
    unexpected = _unexpected(pre, post, tx)
    outcome = ApplyOutcome(
        applied=tx.applied,
        dod_passed=verdict.passed if verdict is not None else None,
        commit=tx.commit,
        rolled_back=tx.rolled_back,
        error=error,
        interrupted=interrupted,
        plan=plan,
        verdict=verdict,
        byproducts=tuple(tx.byproducts),
        unexpected=tuple(unexpected),
        pre=pre,
        post=post,
    )
    sink.emit(
        EventKind.APPLY_FINISHED,
        applied=outcome.applied,
        dod_passed=outcome.dod_passed,
        commit=outcome.commit,
        rolled_back=outcome.rolled_back,
        error=outcome.error,
        unexpected=list(unexpected),
    )
    return outcome


def _without(snap: snapshot.SourceSnapshot, paths: set[str]) -> snapshot.SourceSnapshot:
    return dataclasses.replace(
        snap,
        status=tuple(line for line in snap.status if line[3:] not in paths),
        untracked={p: v for p, v in snap.untracked.items() if p not in paths},
        tracked_dirty={p: v for p, v in snap.tracked_dirty.items() if p not in paths},
    )


def _unexpected(
    pre: snapshot.SourceSnapshot, post: snapshot.SourceSnapshot, tx: Transaction
) -> list[str]:
    """What changed in the source beyond what this apply may change. Empty is the goal."""
    if not tx.applied or tx.rolled_back:
        found = snapshot.differences(pre, post)
        wrong = journal.differing(tx.journal, "before") if tx.applied else []
        return found + [f"{p} was not restored to its prior bytes" for p in wrong]
    paths = set(tx.plan.paths)
    expected = _without(pre, paths)
    if tx.commit is not None:
        refs = dict(pre.refs)
        if tx.plan.branch:
            refs[tx.plan.branch] = tx.commit
        expected = dataclasses.replace(
            expected,
            head=tx.commit,
            head_ref=pre.head_ref if tx.plan.branch else tx.commit,
            refs=refs,
            git_files={**pre.git_files, "index": post.git_files.get("index", "")},
        )
    found = snapshot.differences(expected, _without(post, paths))
    if tx.commit is not None and post.status != pre.status:
        gained = sorted(set(post.status) - set(pre.status))
        lost = sorted(set(pre.status) - set(post.status))
        found.append(f"git status after the commit differs: gained {gained}, lost {lost}")
    return found


# --- repair of an apply whose process died --------------------------------------------------


@dataclass(frozen=True)
class Repair:
    journal: str
    run_id: str
    source: str
    phase: str
    action: str  # "rolled back", "finished the commit", "closed", "needs you", "would repair"
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def repair(path: Path, *, sink: EventSink | None = None, dry_run: bool = False) -> Repair:
    """Bring a dead apply's source back to a whole state: the commit landed -> finish it,
    otherwise -> put every journaled path back. Paths someone changed since are left alone
    and reported."""
    j = Journal.load(path)
    base = {"journal": str(path), "run_id": j.run_id, "source": j.work_tree, "phase": str(j.phase)}
    if not j.is_open:
        return Repair(**base, action="closed")
    if dry_run:
        return Repair(**base, action="would repair")
    from code_runner.cleanup import kill_run_processes  # cleanup imports this module

    kill_run_processes(j.run_id)  # a DoD still running must not write while we restore
    others = journal.foreign(j)
    if others:
        note = "paths changed by someone else since: " + ", ".join(others)
        return Repair(**base, action="needs you", detail=note + f"; prior copies: {j.prior_dir}")
    source = gitx.Repo(Path(j.git_dir), Path(j.work_tree))
    source = gitx.Repo(source.git_dir, source.work_tree, gitx.filter_overrides(source))
    head = gitx.head_commit(source)
    committed = False
    if j.phase is Phase.COMMITTING and head is not None and head != j.head_before:
        parent = source.out("rev-parse", "--verify", "--quiet", f"{head}^1", check=False)
        tree = source.out("rev-parse", "--verify", "--quiet", f"{head}^{{tree}}", check=False)
        committed = parent == j.head_before and tree == j.tree
    if committed:
        assert head is not None
        update_index(source, head, tuple(e.path for e in j.entries))
        j.commit = head
        j.move_to(Phase.REPAIRED, f"repair: the commit {head} had landed; index updated")
        action = "finished the commit"
    else:
        kept = journal.restore(j)
        wrong = journal.differing(j, "before")
        if wrong:
            return Repair(**base, action="needs you", detail=f"could not restore: {wrong}")
        j.move_to(Phase.REPAIRED, "repair: rolled back from the journal")
        action = "rolled back" + (f" (kept non-empty dirs {kept})" if kept else "")
    journal.unregister(j.run_id)
    if sink is not None:
        sink.emit(EventKind.APPLY_REPAIRED, journal=str(path), action=action, phase=base["phase"])
    _note_repair_in_result(j, action)
    return Repair(**base, action=action)


def _note_repair_in_result(j: Journal, action: str) -> None:
    """Record the repair in the run's events and result (when the result exists)."""
    record = RecordPaths(j.path.parent, j.task_id)
    fsx.append_jsonl(
        record.events,
        {"ts": utc_now(), "run_id": j.run_id, "kind": EventKind.APPLY_REPAIRED.value,
         "journal": str(j.path), "action": action},
    )  # fmt: skip
    try:
        result = json.loads(record.result.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(result, dict):
        return
    rolled_back = action.startswith("rolled back")
    result.update(
        source_rollback_applied=rolled_back or bool(result.get("source_rollback_applied")),
        source_commit=j.commit if not rolled_back else result.get("source_commit"),
        source_apply_error=(result.get("source_apply_error") or "the apply was interrupted")
        + f"; repaired from the journal: {action}",
    )
    fsx.atomic_write_json(record.result, result)


def repair_stale(
    *,
    source_git_dir: str | None = None,
    sink: EventSink | None = None,
    dry_run: bool = False,
    locked: bool = False,
) -> list[Repair]:
    """Repair every registered apply whose process is gone (for one source, or all).

    `locked`: the caller already holds the apply lock of `source_git_dir`.
    """
    done: list[Repair] = []
    for pointer, data in journal.registered():
        if source_git_dir is not None and data.get("git_dir") != source_git_dir:
            continue
        if workspace.lease_is_live(data):
            continue
        path = Path(data["journal"])
        if not path.exists():
            if not dry_run:
                pointer.unlink(missing_ok=True)
            continue
        try:
            if locked or dry_run:
                done.append(repair(path, sink=sink, dry_run=dry_run))
            else:
                with apply_lock(Path(str(data.get("git_dir")))):
                    done.append(repair(path, sink=sink))
        except CodeRunnerError as exc:
            done.append(
                Repair(str(path), str(data.get("run_id")), "", "?", "needs you", exc.render())
            )
            continue
        if done[-1].action == "closed" and not dry_run:
            pointer.unlink(missing_ok=True)
    return done


__all__ = [
    "TRAILERS",
    "ApplyOutcome",
    "ApplyRequest",
    "Identity",
    "PathChange",
    "Plan",
    "Repair",
    "Transaction",
    "apply_patch",
    "commit_identity",
    "commit_message",
    "commit_title",
    "prepare",
    "repair",
    "repair_stale",
    "update_index",
]

"""The journaled change of the source: write, verify, then commit, finish or roll back.

Leaving the `with` block by an exception (a git failure, a signal) rolls back, unless a
commit had already landed, in which case it is finished. Every step is one event.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import code_runner.apply.fs as fs
import code_runner.apply.journal as journal
from code_runner import files, verify, workspace
from code_runner.apply.commit import commit_landed, commit_message, update_index
from code_runner.apply.dod_sandbox import source_wrapper
from code_runner.apply.fs import Kind
from code_runner.apply.journal import Journal, Phase
from code_runner.apply.plan import ApplyRequest, Plan, common_dir, index_with_patch
from code_runner.apply.repair import repair
from code_runner.errors import ApplyRefused, CodeRunnerError
from code_runner.events import EventKind, EventSink
from code_runner.repo import git, snapshot


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
            pid_started=workspace.process_start(os.getpid()),
            record_dir=str(req.record.output_dir),
        )
        self.entered = False
        self.rollback_error: str | None = None  # a rollback that failed; gc retries it
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
        prior_dir.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # state dir
        if prior_dir.exists():
            files.force_rmtree(prior_dir)
        for entry in self.plan.entries:  # prior bytes first: the journal points at them
            if entry.saved is not None:
                self._save_prior(entry)
        self.journal.save()  # durable, before the first byte of the source changes
        journal.register(self.journal)  # how `gc` finds it if this process dies
        self.entered = True
        self.sink.emit(
            EventKind.APPLY_JOURNALED,
            journal=str(self.journal.path),
            paths=list(self.plan.paths),
            head=self.plan.head,
            base=self.plan.base,
            head_moved=self.plan.head_moved,  # and the patch applies on it: prepare checked
        )
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None and self.journal.is_open:
            if self.journal.phase is Phase.COMMITTING and self._commit_landed():
                self._finish_commit()
            else:
                try:
                    self.rollback(f"{type(exc).__name__}: {exc}")
                except Exception as failed:  # reported; the journal stays open for `gc`
                    self.rollback_error = f"{type(failed).__name__}: {failed}"
        if not self.journal.is_open:
            journal.unregister(self.req.run_id)

    def _save_prior(self, entry: journal.Entry) -> None:
        """Copy the path's prior bytes, in pieces, beside the journal; they must still be the
        bytes the plan checked against HEAD."""
        assert entry.saved is not None
        digest = hashlib.sha256()
        chunks = fs.hashed(fs.file_chunks(self.root, entry.path), digest)
        files.atomic_write_chunks(self.journal.prior_dir / entry.saved, chunks, mode=0o600)
        if digest.hexdigest() != entry.before.sha256:
            raise ApplyRefused(
                f"{entry.path} changed in the source since the apply was planned.",
                fix="leave the source alone while an apply runs, then apply again.",
            )

    # -- steps --

    def write(self) -> None:
        """Every path to its target state: deletions, then emptied dirs, then files."""
        root, plan = self.root, self.plan
        for entry in plan.entries:
            if entry.after.kind is Kind.MISSING:
                fs.remove_file(root, entry.path)
        written = {e.path for e in plan.entries if e.after.kind is Kind.FILE}
        needed = set(fs.ancestors(sorted(written)))
        for d in sorted(plan.dirs, key=lambda d: -d.path.count("/")):
            if d.path not in needed:
                fs.remove_dir_if_empty(root, d.path)
        for index, entry in enumerate(plan.entries):
            if entry.after.kind is Kind.FILE:
                fs.put_file(
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
        """The same DoD, in the source. Untracked files it leaves are moved to the record.

        It runs in the OS sandbox (the repo read-write at its own path, its git dir
        read-only, no file changing owner) unless the user chose otherwise; HOME and TMPDIR
        are fresh and empty either way.
        """
        dod = self.req.dod
        walls = self.req.sandbox
        self.sink.emit(
            EventKind.DOD_STARTED, label="source", command=dod.command, sandbox=walls.to_dict()
        )
        with contextlib.ExitStack() as stack:
            scratch = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="code-runner-source-dod-")
            )
            home, tmp = Path(scratch) / "home", Path(scratch) / "tmp"
            home.mkdir()
            tmp.mkdir()
            env = {**self.req.env, "HOME": str(home), "TMPDIR": str(tmp)}
            name = f"apply-{self.req.run_id[:60]}-{self.journal.token}"
            runs_as: dict[str, object] = {}
            wrap = stack.enter_context(
                source_wrapper(
                    walls,
                    self.root,
                    self.req.source.git_dir,
                    env,
                    name,
                    self._untouched(),
                    said=runs_as.update,
                )
            )
            verdict = verify.run_dod(
                dod,
                cwd=self.root,
                env={**env, "GIT_OPTIONAL_LOCKS": "0"},
                log_path=self.req.record.verifier_log,
                label="source",
                wrap_argv=wrap,
            )
        self.sink.emit(
            EventKind.DOD_FINISHED,
            label="source",
            passed=verdict.passed,
            exit_code=verdict.exit_code,
            reason=verdict.reason,
            **({"runs_as": runs_as} if runs_as else {}),
        )
        self._move_byproducts(pre)
        return verdict

    def _untouched(self) -> list[Path]:
        """The source's tracked files the patch leaves alone: read-only for the DoD."""
        ours = set(self.plan.paths)
        return [
            self.root / p
            for p in (git.decode_path(f) for f in self.req.source.z("ls-files", "-z"))
            if p not in ours
        ]

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
                    fs.remove_dir_if_empty(self.root, parent.as_posix())
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
        message = req.message or commit_message(req.title, req.task_id, req.run_id)
        self.journal.move_to(Phase.COMMITTING)
        with tempfile.TemporaryDirectory(prefix="code-runner-commit-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **plan.identity.env()}
            problem = index_with_patch(source, plan.head, req.patch, env)
            if problem:
                raise CodeRunnerError(f"the patch no longer applies on HEAD: {problem}")
            tree = source.out("write-tree", env=env)
            if tree != plan.tree:
                raise CodeRunnerError(f"the commit tree {tree} is not the planned {plan.tree}")
            self._check_objects(tree)
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

    def _check_objects(self, tree: str) -> None:
        """Every blob the commit names holds exactly the verified bytes: each object is read
        back in pieces, hashed from its content (its blob id and its sha256), and compared
        with the digest of the bytes the DoD judged."""
        source = self.req.source
        after = {e.path: e.after for e in self.plan.entries if e.after.kind is Kind.FILE}
        with tempfile.TemporaryDirectory(prefix="code-runner-objects-") as tmp:
            for path, wanted in after.items():
                oid = source.out("rev-parse", "--verify", "--end-of-options", f"{tree}:{path}")
                body = Path(tmp) / "blob"
                with body.open("wb") as f:
                    source.run("cat-file", "blob", oid, stdout_file=f)
                sha, blob_id = fs.digest_file(body, "sha256" if len(oid) == 64 else "sha1")
                if blob_id != oid or sha != wanted.sha256:
                    raise CodeRunnerError(
                        f"the object for {path} ({oid}) does not hold the verified bytes; "
                        "nothing was committed"
                    )
                on_disk, _ = fs.read_state(self.root, path)
                if on_disk.sha256 != wanted.sha256:
                    raise CodeRunnerError(f"{path} changed after the DoD; nothing was committed")

    def _commit_with_hooks(self, env: dict[str, str], message: str) -> str:
        """`git commit` with the source's own hooks, then prove the hooks changed nothing."""
        source, plan = self.req.source, self.plan
        configured = source.run("config", "--local", "--get", "core.hooksPath", check=False)
        hooks = configured.stdout.decode().strip()
        hooks_dir = Path(hooks) if hooks else common_dir(source) / "hooks"
        if not hooks_dir.is_absolute():
            hooks_dir = self.root / hooks_dir
        hooked = dataclasses.replace(
            source, overrides=(*source.overrides, "-c", f"core.hooksPath={hooks_dir}")
        )
        result = hooked.run(
            "commit", "--quiet", "--cleanup=verbatim", "-F", "-",
            input_bytes=message.encode(), env=env, check=False,
        )  # fmt: skip
        head = git.head_commit(source)
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
        landed = commit_landed(self.req.source, self.plan.head, self.plan.tree)
        if landed is not None:
            self.commit = landed
        return landed is not None

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

"""The runner-owned bare repository of a plan, in the state dir.

Its objects are fetched (copied) from the source, never borrowed through alternates, so the
user's `git gc --prune=now` cannot break a plan. Item workspaces are cloned from it; the
runner builds each item's commit in it from the verified patch in a private index; and an
export fetches from it into the source and moves one branch by compare-and-swap. The
source is only read, except by an export, which writes objects (a pack made here and
indexed there: no fetch, so no transport the source's config could redirect) and that one
ref.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from code_runner.apply.commit import GitIdentity, commit_identity
from code_runner.errors import GitError, UsageError
from code_runner.plans.lock import crash_point, plans_dir
from code_runner.plans.outcome import Commit
from code_runner.repo import git

RUNNER_IDENTITY = GitIdentity("code-runner", "code-runner@localhost")
ZERO = "0" * 40


def attempt_ref(attempt_id: str) -> str:
    return f"refs/code-runner/attempts/{attempt_id}"


@dataclass(frozen=True)
class RunnerRepo:
    plan_id: str
    git_dir: Path

    @property
    def repo(self) -> git.Repo:
        return git.Repo(git_dir=self.git_dir, work_tree=None)

    @property
    def clone_source(self) -> git.Repo:
        """The repo item workspaces are cloned from: the bare repo with an empty work tree
        (no file is ever checked out there; the workspace code wants a work tree path)."""
        tree = self.git_dir.with_suffix(".tree")
        tree.mkdir(exist_ok=True)
        return git.Repo(git_dir=self.git_dir, work_tree=tree)

    def has(self, sha: str) -> bool:
        found = self.repo.run("cat-file", "-e", f"{sha}^{{commit}}", check=False)
        return found.ok

    def tree_of(self, sha: str) -> str:
        return self.repo.out("rev-parse", f"{sha}^{{tree}}")

    def build_commit(
        self, *, parent: str, patch: Path, message: str, identity: GitIdentity, ref: str
    ) -> Commit:
        """The verified patch file onto `parent` in a private index (git reads the file
        itself, so no patch is ever held in memory); the commit under `ref`."""
        index = self.git_dir / f"index-{os.getpid()}"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            self.repo.run("read-tree", parent, env=env)
            with patch.open("rb") as patch_file:
                self.repo.run("apply", "--cached", "--binary", "-", stdin_file=patch_file, env=env)
            tree = self.repo.out("write-tree", env=env)
        finally:
            with contextlib.suppress(FileNotFoundError):
                index.unlink()
        sha = self.repo.out(
            "commit-tree",
            tree,
            "-p",
            parent,
            "-F",
            "-",
            input_bytes=message.encode("utf-8"),
            env=identity.env(),
        )
        self.repo.run("update-ref", ref, sha, ZERO)
        return Commit(sha=sha, tree=tree, ref=ref)

    def export_branch(
        self, source: git.Repo, *, branch: str, sha: str, ref: str, owned: set[str], base: str
    ) -> str | None:
        """Point `refs/heads/<branch>` of the source at `sha` by compare-and-swap.

        Returns the branch's old value (None when new). Refused when the branch is checked
        out, or holds a commit the ledger does not own.
        """
        full = f"refs/heads/{branch}"
        bad = source.run("check-ref-format", full, check=False)
        # what `git branch` refuses too: an option-like name, and HEAD
        if not bad.ok or branch.startswith("-") or branch == "HEAD":
            raise UsageError(f"{branch!r} is not a branch name.", fix="choose another --branch.")
        head = source.run("symbolic-ref", "--quiet", "HEAD", check=False).stdout.decode().strip()
        if head == full:
            raise UsageError(
                f"the branch {branch} is checked out in {source.work_tree}.",
                fix="export to another branch (HEAD, index and work tree are never touched).",
            )
        found = source.run("rev-parse", "--verify", "--quiet", full, check=False)
        old = found.stdout.decode().strip() if found.ok else None
        if old is not None:
            self._check_owned(source, old, owned, base, branch)
        self.copy_objects(source, sha, base)
        crash_point(branch, "export-copied")
        source.run("update-ref", full, sha, old or ZERO)
        if source.out("rev-parse", "--verify", full) != sha:  # read back
            raise GitError(
                ["update-ref", full], 1, f"{full} does not point at {sha} after the update"
            )
        return old

    def copy_objects(self, source: git.Repo, sha: str, base: str) -> None:
        """The objects of `sha` the source lacks, as one pack, through plumbing only.

        Not `git fetch`: a fetch reads the source's own config, whose `url.*.insteadOf`
        and `protocol.*.allow` can turn the runner repo's path into a command it runs.
        `pack-objects` here and `index-pack` there run no transport, hook or helper.
        """
        revs = f"{sha}\n" + (f"^{base}\n" if _has_commit(source, base) else "")
        with tempfile.TemporaryFile() as pack:
            self.repo.run(
                "pack-objects", "--revs", "--stdout", "--quiet",
                input_bytes=revs.encode(), stdout_file=pack,
            )  # fmt: skip
            pack.seek(0)
            source.run("index-pack", "--stdin", stdin_file=pack)
        if not _has_commit(source, sha):
            raise GitError(["index-pack"], 1, f"the source lacks {sha} after the copy")

    def _check_owned(
        self, source: git.Repo, old: str, owned: set[str], base: str, branch: str
    ) -> None:
        listed = source.run("rev-list", old, f"^{base}", check=False)
        commits = listed.stdout.decode().split() if listed.ok else [old]
        foreign = [c for c in commits if c not in owned]
        if foreign or (old not in owned and old != base):
            raise UsageError(
                f"the branch {branch} holds {len(foreign) or 1} commit(s) this plan did not"
                f" make (e.g. {(foreign or [old])[0][:12]}).",
                fix="export to a new branch name, or delete that branch yourself first.",
            )


def _has_commit(repo: git.Repo, sha: str) -> bool:
    return repo.run("cat-file", "-e", f"{sha}^{{commit}}", check=False).ok


def runner_repo(plan_id: str) -> RunnerRepo:
    return RunnerRepo(plan_id, plans_dir() / "repos" / f"{plan_id}.git")


def ensure_runner_repo(plan_id: str, source: git.Repo, base: str) -> RunnerRepo:
    """The plan's bare repo, made on first use, holding (a copy of) the base commit."""
    found = runner_repo(plan_id)
    if not (found.git_dir / "HEAD").exists():
        found.git_dir.mkdir(parents=True, exist_ok=True)
        found.repo.run("init", "--quiet", "--bare", "--template=")
    if not found.has(base):
        found.repo.run(
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            str(source.git_dir),
            f"+{base}:refs/code-runner/base",
        )
    return found


def item_identity(source: git.Repo) -> GitIdentity:
    """Who runner commits are by: the source's configured identity, else code-runner."""
    return commit_identity(source, None) or RUNNER_IDENTITY

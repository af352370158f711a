"""Where a workspace's parts live (`WorkspacePaths`): a frozen value the audit and the tree
operations work on, below the `Workspace` object that owns the live state."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code_runner import proc
from code_runner.repo import git
from code_runner.workspace.env import command_env, empty_scratch
from code_runner.workspace.owner import as_user_argv, give_back
from code_runner.workspace.python_env import SHIM_DIR_NAME, ProjectEnv


@dataclass(frozen=True)
class WorkspacePaths:
    run_id: str
    root: Path
    source_dir: Path
    base: str
    project: ProjectEnv | None = field(default=None, compare=False)
    owner: tuple[int, int] | None = None  # (uid, gid) the work tree's files are written as
    overlay: bool = False  # the work tree is an overlay over a cached checkout (`overlay`)

    @property
    def work_tree(self) -> Path:
        return self.root / "wt"

    @property
    def git_dir(self) -> Path:
        return self.root / "git"

    @property
    def home_dir(self) -> Path:
        """A private HOME and TMPDIR for commands, so nothing lands in the user's."""
        return self.root / "home"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def repo(self) -> git.Repo:
        return git.Repo(git_dir=self.git_dir, work_tree=self.work_tree)

    def write(self, *args: str, **kwargs: Any) -> proc.Captured:
        """A git command that writes files into the work tree, as the tree's owner when it
        has one (so no walk has to re-own them); the git dir stays root's."""
        prefix = as_user_argv(self.owner) if self.owner is not None else None
        if self.owner is None or prefix is None:
            return self.repo.run(*args, **kwargs)
        try:
            return self.repo.run(*args, prefix=prefix, **kwargs)
        finally:
            give_back(self.git_dir, self.owner[0])

    def env(self) -> dict[str, str]:
        """The environment for tool commands and the DoD in this workspace: the project's
        environment, with its editable install resolving to this work tree."""
        env = command_env(run_id=self.run_id, home_dir=self.home_dir, tmp_dir=self.tmp_dir)
        if self.project is None:
            return env
        return self.project.overlay(env, self.work_tree, self.git_dir / SHIM_DIR_NAME)

    def source_env(self) -> dict[str, str]:
        """The same environment for a DoD run in the source itself (the apply step)."""
        env = command_env(run_id=self.run_id, home_dir=self.home_dir, tmp_dir=self.tmp_dir)
        return env if self.project is None else self.project.overlay(env)

    def empty_scratch(self) -> None:
        """Empty the commands' HOME and TMPDIR (before a DoD run without the sandbox)."""
        empty_scratch(self.home_dir, self.tmp_dir)

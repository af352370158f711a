"""The `Workspace`: a disposable checkout made from a `clone --shared` into the state dir.

A linked `git worktree` would share the source's git dir (refs, config, hooks); a clone
shares only read-only objects. A workspace that fails half-way is removed at once, and one
that is released leaves nothing behind."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from code_runner import dirs
from code_runner.files import force_rmtree
from code_runner.repo import git
from code_runner.workspace.env import command_env, empty_scratch
from code_runner.workspace.lease import source_lock, write_lease


@dataclass(frozen=True)
class Workspace:
    run_id: str
    root: Path
    source_dir: Path
    base: str

    @property
    def work_tree(self) -> Path:
        return self.root / "wt"

    @property
    def git_dir(self) -> Path:
        return self.root / "git"

    def env(self) -> dict[str, str]:
        """The environment for tool commands and the DoD in this workspace."""
        return command_env(run_id=self.run_id, home_dir=self.home_dir, tmp_dir=self.tmp_dir)

    def empty_scratch(self) -> None:
        """Empty the commands' HOME and TMPDIR (before a DoD run without the sandbox)."""
        empty_scratch(self.home_dir, self.tmp_dir)

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


def create(
    source: git.Repo, base: str, *, run_id: str, output_dir: Path | None = None
) -> Workspace:
    """Make a disposable checkout of `source` at `base`. The source is only read."""
    assert source.work_tree is not None
    root = dirs.workspaces_dir() / run_id
    root.mkdir(parents=True, exist_ok=False)
    try:
        ws = Workspace(run_id=run_id, root=root, source_dir=source.work_tree, base=base)
        write_lease(root, run_id, source.work_tree, output_dir)
        ws.home_dir.mkdir()
        ws.tmp_dir.mkdir()
        with source_lock(source.git_dir):
            git.clone_shared(source, git_dir=ws.git_dir, work_tree=ws.work_tree)
        ws.repo.run("checkout", "--quiet", "--no-recurse-submodules", "--detach", base)
    except BaseException:
        # A half-made workspace must not wait for `gc`: nothing else knows it exists.
        force_rmtree(root)
        raise
    return ws


def release(ws: Workspace) -> bool:
    """Remove the workspace and its git dir. True when nothing is left."""
    if ws.root.exists():
        force_rmtree(ws.root)
    return not ws.root.exists()

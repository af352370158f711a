"""The profile for a DoD in the user's own repo (the apply step): the same walls as a run's.

The repo is bound read-write at its own path and its git dir read-only; nothing in it changes
owner. A runner that is not root runs the DoD as itself (it owns what it may write). A root
runner runs it as a fresh uid of its own, which sees the repo through an id-mapped view
(`idmap`): the owner's files are that uid's, and what it creates is the owner's on disk, as
it would be had the owner run the tests; every root-only file elsewhere stays out of its
reach. Where no view can be made (the errno is in the posture), the DoD runs as the owner
inside the same namespaces, every capability dropped. Either way no DoD may make a set-ID
file (`setid`). Tracked files the patch does not touch can be bound read-only onto
themselves: the DoD may add byproducts, never rewrite the user's other files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from code_runner.sandbox.cgroups import CgroupSupport
from code_runner.sandbox.limits import ResourceLimits
from code_runner.sandbox.profile import Programs, SandboxUser
from code_runner.sandbox.session import Session


@dataclass(frozen=True)
class SourceTree:
    """The user's repo as a sandbox sees it: its work tree is its own source."""

    work_tree: Path
    git_dir: Path

    @property
    def source_dir(self) -> Path:
        return self.work_tree


def repo_owner(work_tree: Path) -> SandboxUser:
    """The uid and gid that own the repo's work tree (never followed through a symlink)."""
    st = os.lstat(work_tree)
    return SandboxUser(uid=st.st_uid, gid=st.st_gid)


def source_session(
    work_tree: Path,
    git_dir: Path,
    *,
    programs: Programs,
    env: Mapping[str, str],
    limits: ResourceLimits,
    cpu_s: int,
    cgroups: CgroupSupport | None,
    name: str,
    frozen: Sequence[Path] = (),
) -> Session:
    """A session around the user's repo that keeps every file's owner. `frozen` files (the
    tracked files the patch does not touch) are bound read-only onto themselves."""
    return Session(
        SourceTree(work_tree, git_dir),
        programs=programs,
        env=env,
        network=False,
        limits=limits,
        cpu_s=cpu_s,
        cgroups=cgroups,
        name=name,
        owner=repo_owner(work_tree),
        frozen=frozen,
    )

"""Who owns a workspace's files: a root runner writes them as the sandbox's uid.

git runs with the owner as its effective uid, so what it creates is the owner's, and root as
its real uid with the file-access capabilities, so it reads and writes where root can (the
source's objects, a git dir under a 0700 home) as before. What it wrote into the git dir
(the index, HEAD's log) is given back to root: the sandbox's uid owns the work tree, never
the git state.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from code_runner import proc

_CAPS = "+dac_override,+dac_read_search,+fowner"


def as_user_argv(owner: tuple[int, int]) -> list[str] | None:
    """The prefix that runs a program as `owner` (see above), or None where it cannot."""
    setpriv = _setpriv()
    if setpriv is None:
        return None
    uid, gid = owner
    return [
        setpriv,
        f"--euid={uid}",
        f"--egid={gid}",
        "--clear-groups",
        f"--inh-caps={_CAPS}",
        f"--ambient-caps={_CAPS}",
    ]


@functools.cache
def _setpriv() -> str | None:
    """`setpriv`, if it can run a program as another uid with the capabilities above here."""
    found = shutil.which("setpriv")
    if found is None or os.geteuid() != 0:
        return None
    probe = [found, "--euid=65534", "--egid=65534", "--clear-groups"]
    probe += [f"--inh-caps={_CAPS}", f"--ambient-caps={_CAPS}", "true"]
    done = proc.capture(probe, cwd="/", env={"PATH": os.environ.get("PATH", "")}, timeout_s=30)
    return found if done.ok else None


def give_back(git_dir: Path, uid: int) -> None:
    """Every entry of `git_dir` that `uid` owns becomes root's again."""
    for here, dirnames, filenames in os.walk(git_dir):
        for name in (*dirnames, *filenames):
            path = os.path.join(here, name)
            if os.lstat(path).st_uid == uid:
                os.chown(path, 0, 0, follow_symlinks=False)
    if git_dir.stat().st_uid == uid:
        os.chown(git_dir, 0, 0)

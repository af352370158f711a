"""A command that sees some paths read-only and everything else as it is: `read_only_argv`.

An agent CLI that brings its own tools (Claude Code's Bash has no OS sandbox) still must not
change a named skill. `read_only_argv` starts it under bubblewrap in a mount namespace of
its own where each given path is a read-only bind mount over itself, with every capability
dropped: writing, chmod and deleting fail with EROFS, the mount cannot be moved or renamed
(EBUSY), and without CAP_SYS_ADMIN it cannot be remounted. Nothing else changes: the same
uid, files, network (the loopback to a model server included) and processes, so the CLI
works as before. A runner that is not root gets the same view through an unprivileged user
namespace.

`read_only_view` checks once per process that this works here: it mounts a scratch file
read-only and tries to write it.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from code_runner import proc
from code_runner.sandbox.profile import Programs

READ_ONLY_FIX = (
    "install bubblewrap (`apt-get install bubblewrap`); a runner that is not root also needs "
    "unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`)"
)


@dataclass(frozen=True)
class ReadOnlyView:
    """Whether `read_only_argv` works here: the bwrap to use, or why not."""

    bwrap: str | None
    problem: str | None = None


def read_only_argv(bwrap: str, argv: Sequence[str], paths: Sequence[Path]) -> list[str]:
    """`argv` in a mount namespace where each of `paths` is read-only, no capability kept."""
    binds: list[str] = []
    for path in paths:
        binds += ["--ro-bind", str(path), str(path)]
    return [
        bwrap,
        "--dev-bind",
        "/",
        "/",
        *binds,
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--",
        *argv,
    ]


@functools.cache
def read_only_view() -> ReadOnlyView:
    """Does a read-only bind hold here? Tried once per process on a scratch file."""
    programs = Programs.find()
    if programs is None:
        return ReadOnlyView(None, "bwrap is not installed")
    with tempfile.TemporaryDirectory(prefix="code-runner-ro-") as scratch:
        folder = Path(scratch) / "skill"
        folder.mkdir()
        target = folder / "SKILL.md"
        target.write_text("kept\n")
        attempt = f"printf x >> {target}; chmod 0666 {target}; rm -f {target}; true"
        argv = read_only_argv(programs.bwrap, ["/bin/sh", "-c", attempt], [folder])
        done = proc.capture(argv, cwd=scratch, env=dict(os.environ), timeout_s=20)
        if not done.ok:
            said = done.stderr.decode(errors="replace").strip()[:300]
            return ReadOnlyView(None, f"bwrap could not start ({said or done.exit_code})")
        if not target.is_file() or target.read_text() != "kept\n":
            return ReadOnlyView(None, "a read-only bind mount did not stop a write")
    return ReadOnlyView(programs.bwrap)

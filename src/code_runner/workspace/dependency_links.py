"""Without the sandbox, the source's `.venv` / `venv` / `node_modules` in the work tree.

The sandbox binds the source's dependency dirs into the work tree at the same relative
path (`sandbox.mounts.dependency_binds`), so a DoD written as `.venv/bin/python -m pytest`
finds the project's environment. A workspace without the sandbox gets the same dirs, chosen
by the same rules (only those that resolve inside the source tree and show no hidden path),
as symlinks to the source's: made only while the DoD runs (not the agent's commands), and
taken away before the audit, so they never reach the patch or count as the agent's change.
The editable install still resolves to the work tree (the `sitecustomize` shim maps every
import path under the source), so the DoD judges the workspace's code.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from code_runner.sandbox.mounts import dependency_binds, hidden_paths
from code_runner.sandbox.profile import Bind


def dependency_links(source_dir: Path, work_tree: Path) -> tuple[Bind, ...]:
    """The links to make (`dest` -> `source`): the binds the sandbox would make in the work
    tree for the source's dependency dirs. Decided once, from the source."""
    binds = dependency_binds(source_dir, work_tree, (), hidden_paths())
    return tuple(b for b in binds if b.dest.parent == work_tree)


@contextlib.contextmanager
def linked(links: Sequence[Bind]) -> Iterator[list[Path]]:
    """Each link made where its name is free in the work tree, for the duration; then each
    one still ours (a symlink to the same place) is removed. Yields the links made."""
    made: list[Bind] = []
    try:
        for link in links:
            try:
                os.symlink(link.source, link.dest, target_is_directory=True)
            except OSError:
                continue  # the name is taken (the checkout's own, or the agent's): leave it
            made.append(link)
        yield [link.dest for link in made]
    finally:
        for link in made:
            with contextlib.suppress(OSError):
                if os.path.islink(link.dest) and os.readlink(link.dest) == str(link.source):
                    os.unlink(link.dest)

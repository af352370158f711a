"""A command that sees some paths read-only: writes, chmod, deletes and renames fail with
every capability dropped (root too), while the rest of the host stays writable."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner import proc
from code_runner.sandbox import read_only_argv, read_only_view

pytestmark = pytest.mark.integration


def test_the_paths_are_read_only_and_nothing_else_is(tmp_path: Path) -> None:
    view = read_only_view()
    assert view.bwrap is not None, view.problem
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "f").write_text("same\n")
    script = (
        f"printf x >> {kept}/f; chmod 0666 {kept}/f; rm -f {kept}/f; mv {kept} {tmp_path}/gone; "
        f"mount -o remount,rw,bind {kept}; printf x >> {kept}/f; echo ok > {tmp_path}/free"
    )
    argv = read_only_argv(view.bwrap, ["/bin/sh", "-c", script], [kept])
    proc.capture(argv, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout_s=20)
    assert (kept / "f").read_text() == "same\n"
    assert (kept / "f").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "free").read_text() == "ok\n"


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory any uid can reach (pytest's own under /tmp is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="code-runner-ro-test-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_an_owner_that_is_not_root_cannot_change_them_either(open_dir: Path) -> None:
    """A runner that is not root owns the skill copies: without the mount it could chmod and
    delete them; inside it (an unprivileged user namespace) it cannot."""
    view = read_only_view()
    assert view.bwrap is not None, view.problem
    owner = 65534 if os.geteuid() == 0 else os.geteuid()
    kept = open_dir / "kept"
    kept.mkdir()
    target = kept / "f"
    target.write_text("same\n")
    target.chmod(0o444)
    for path in (open_dir, kept, target):
        os.chown(path, owner, owner)
    drop = ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups", "--"]
    as_owner = drop if os.geteuid() == 0 else []
    script = f"chmod 0644 {target}; printf x >> {target}; rm -f {target}; mv {kept} {kept}.x"
    inside = read_only_argv(view.bwrap, ["/bin/sh", "-c", script], [kept])
    env = {"PATH": "/usr/bin:/bin"}
    proc.capture([*as_owner, *inside], cwd=open_dir, env=env, timeout_s=20)
    assert target.read_text() == "same\n" and target.stat().st_mode & 0o777 == 0o444
    # the same attempt without the mount: the owner can (the check is real)
    proc.capture([*as_owner, "/bin/sh", "-c", script], cwd=open_dir, env=env, timeout_s=20)
    assert not target.exists()

"""Id-mapped views of a tree, on real mounts: the owner shown as a fresh uid, what that uid
writes kept the owner's, the view detached afterwards (and by gc when its runner died), and
a file system that cannot be id-mapped named with its errno."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from code_runner import sandbox
from code_runner.sandbox import idmap
from code_runner.sandbox.profile import SandboxUser

pytestmark = pytest.mark.integration

OWNER = SandboxUser(os.geteuid(), os.getegid())
SHOWN = SandboxUser(2_000_000_007, 2_000_000_007)


def _as_shown(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    drop = ["setpriv", f"--reuid={SHOWN.uid}", f"--regid={SHOWN.gid}", "--clear-groups", "--"]
    return subprocess.run([*drop, *argv], cwd=cwd, capture_output=True, text=True, check=False)


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "repo"
    tree.mkdir()
    (tree / "key").write_text("owner only\n")
    (tree / "key").chmod(0o600)
    return tree


def test_a_view_shows_the_owner_as_another_uid_and_keeps_its_writes_the_owners(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path)
    if os.geteuid() != 0:
        with pytest.raises(PermissionError):
            idmap.mount(tree, OWNER, SHOWN)
        return
    view = idmap.mount(tree, OWNER, SHOWN)
    try:
        seen = os.stat(view.path / "key")
        assert (seen.st_uid, seen.st_gid) == (SHOWN.uid, SHOWN.gid)
        done = _as_shown("sh", "-c", "cat key && mkdir d && echo y > d/new", cwd=view.path)
        assert done.returncode == 0 and done.stdout == "owner only\n", done.stderr
        made = os.stat(tree / "d" / "new")
        assert (made.st_uid, made.st_gid) == (OWNER.uid, OWNER.gid)
        refused = _as_shown("cat", "key", cwd=tree)
        assert refused.returncode != 0  # the tree itself, outside the view, stays the owner's
    finally:
        view.close()
    assert not view.path.exists()
    assert (tree / "key").read_text() == "owner only\n"


def test_gc_detaches_the_view_of_a_runner_that_died(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    if os.geteuid() != 0:
        assert idmap.remove_leftovers() == []
        return
    code = (
        "import sys; from pathlib import Path; from code_runner.sandbox import idmap; "
        "from code_runner.sandbox.profile import SandboxUser as U; "
        f"print(idmap.mount(Path(sys.argv[1]), U({OWNER.uid}, {OWNER.gid}), "
        f"U({SHOWN.uid}, {SHOWN.gid})).path)"
    )
    left = subprocess.run(
        [sys.executable, "-c", code, str(tree)], capture_output=True, text=True, check=True
    )
    path = Path(left.stdout.strip())
    assert (path / "key").exists()  # the runner died with its view attached
    assert idmap.remove_leftovers() == [path]
    assert not path.exists()
    assert (tree / "key").read_text() == "owner only\n"  # detached, never removed through


def test_a_file_system_without_id_mapped_mounts_is_named_with_its_errno() -> None:
    with pytest.raises(OSError) as caught:
        idmap.mount(Path("/proc/sys"), OWNER, SHOWN)
    assert caught.value.errno in (errno.EINVAL, errno.EPERM), caught.value
    assert not any(idmap.mounts_dir().iterdir())
    if os.geteuid() != 0 or not sandbox.probe().ok:
        return
    with sandbox.open_source_session(Path("/proc/sys"), Path("/proc/sys"), env={}, name="t") as s:
        how = s.tree_posture()["how"]
    assert "every capability dropped" in how and "errno 22" in how, how

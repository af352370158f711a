"""The only code that writes into a source repo: no symlink is ever followed, nothing torn."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from code_runner.apply import fs
from code_runner.apply.fs import FileState, Kind


def test_put_file_creates_directories_and_sets_the_mode(tmp_path: Path) -> None:
    fs.put_file(tmp_path, "a/b/c.bin", b"\0\1\2", 0o755, tmp_name=".t")
    target = tmp_path / "a/b/c.bin"
    assert target.read_bytes() == b"\0\1\2"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert not (tmp_path / "a/b/.t").exists()
    state, blob_id = fs.read_state(tmp_path, "a/b/c.bin", "sha1")
    assert state == FileState.of_bytes(b"\0\1\2", 0o755)
    assert blob_id == hashlib.sha1(b"blob 3\0\0\1\2").hexdigest()


def test_a_symlink_on_the_way_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "repo"
    root.mkdir()
    os.symlink(outside, root / "link")
    for action in (
        lambda: fs.put_file(root, "link/x", b"x", 0o644, tmp_name=".t"),
        lambda: fs.read_state(root, "link/x"),
        lambda: fs.remove_file(root, "link/x"),
        lambda: fs.ensure_dir(root, "link/d", 0o755),
    ):
        with pytest.raises(fs.UnsafePath):
            action()
    assert list(outside.iterdir()) == []


def test_a_symlink_as_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    root = tmp_path / "repo"
    root.mkdir()
    os.symlink(victim, root / "f")
    assert fs.read_state(root, "f")[0].kind is Kind.OTHER
    fs.put_file(root, "f", b"new\n", 0o644, tmp_name=".t")
    assert victim.read_text() == "keep\n"
    assert not (root / "f").is_symlink() and (root / "f").read_text() == "new\n"


def test_directories_are_never_removed_or_overwritten(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep").write_text("x")
    with pytest.raises(fs.UnsafePath):
        fs.remove_file(tmp_path, "d")
    with pytest.raises(fs.UnsafePath):
        fs.put_file(tmp_path, "d", b"x", 0o644, tmp_name=".t")
    assert fs.remove_dir_if_empty(tmp_path, "d") is False
    assert (tmp_path / "d" / "keep").exists()


@pytest.mark.parametrize("bad", ["", "../x", "a/../b", "/etc/passwd", "a//b", "./a"])
def test_paths_that_could_escape_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(fs.UnsafePath):
        fs.read_state(tmp_path, bad)


def test_ancestors_are_listed_shallowest_first() -> None:
    assert fs.ancestors(["a/b/c", "a/d", "e"]) == ["a", "a/b"]

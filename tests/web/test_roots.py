"""Roots: a URL names a path under a configured root, or nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from code_runner.web import OutsideRoots, Roots


def test_a_plain_relative_path_resolves_under_its_root(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    roots = Roots.of([tmp_path])
    assert roots.resolve(0, "a/b") == tmp_path.resolve() / "a" / "b"
    assert roots.resolve(0, ".") == tmp_path.resolve()
    key = roots.key_of(tmp_path.resolve() / "a" / "b")
    assert key is not None and key.url_part == "0/a/b"


@pytest.mark.parametrize(
    "rel",
    ["..", "../x", "a/../../x", "a//b", "/etc", "a/./b", "a\\..\\x", "a\0b", "x" * 2000],
)
def test_anything_but_a_plain_path_is_refused(tmp_path: Path, rel: str) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(OutsideRoots):
        Roots.of([tmp_path]).resolve(0, rel)


def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.symlink("/etc", root / "out")
    with pytest.raises(OutsideRoots):
        Roots.of([root]).resolve(0, "out/passwd")


def test_an_unknown_root_number_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OutsideRoots):
        Roots.of([tmp_path]).resolve(1, "x")
    with pytest.raises(OutsideRoots):
        Roots.of([tmp_path]).resolve(-1, "x")

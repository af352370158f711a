"""`.git` in every spelling a file system git supports treats as `.git` (git's own
`is_ntfs_dotgit` and `is_hfs_dotgit`), and nothing that merely looks like it."""

from __future__ import annotations

import pytest

from code_runner.task.paths import is_dot_git, path_problem

DOT_GIT = [".git", ".GIT", ".git.", ".git ", ".git. .", ".git::$INDEX_ALLOCATION", ".git. :x",
           "git~1", "GIT~1", "git~1.", "git~1 ", "git~1::$DATA", "Git~1. :s", ".g\u200cit",
           "\ufeff.git"]  # fmt: skip
NOT_DOT_GIT = [".gitignore", ".github", ".gitx", "git~10", "git~1x", ".git~1", "x.git", "git",
               ".gıt", "ｇit~1"]  # fmt: skip


@pytest.mark.parametrize("name", DOT_GIT)
def test_every_spelling_of_dot_git_is_refused(name: str) -> None:
    assert is_dot_git(name)
    assert path_problem(f"src/{name}/config") is not None


@pytest.mark.parametrize("name", NOT_DOT_GIT)
def test_names_that_only_look_like_it_are_kept(name: str) -> None:
    assert not is_dot_git(name)

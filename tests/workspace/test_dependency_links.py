"""Without the sandbox, the source's dependency dirs are linked into the work tree for the
DoD, by the sandbox's own rules, and taken away after it."""

from __future__ import annotations

import os
from pathlib import Path

from code_runner.workspace.dependency_links import dependency_links, linked


def _trees(root: Path) -> tuple[Path, Path]:
    source, work_tree = root / "source", root / "wt"
    (source / ".venv" / "bin").mkdir(parents=True)
    (source / "node_modules").mkdir()
    work_tree.mkdir()
    return source, work_tree


def test_links_exist_while_it_lasts_and_are_gone_after(tmp_path: Path) -> None:
    source, work_tree = _trees(tmp_path)
    (work_tree / "node_modules").write_text("the checkout's own file\n")
    links = dependency_links(source, work_tree)
    with linked(links) as made:
        assert made == [work_tree / ".venv"]  # node_modules: the name is taken
        assert (work_tree / ".venv" / "bin").is_dir()
        assert os.readlink(work_tree / ".venv") == str(source / ".venv")
    assert not os.path.lexists(work_tree / ".venv")
    assert (work_tree / "node_modules").read_text() == "the checkout's own file\n"
    assert (source / ".venv" / "bin").is_dir()


def test_a_dependency_dir_that_leads_out_of_the_source_is_not_linked(tmp_path: Path) -> None:
    source, work_tree = _trees(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (source / "venv").symlink_to(elsewhere)
    assert [link.dest.name for link in dependency_links(source, work_tree)] == [
        ".venv",
        "node_modules",
    ]


def test_a_link_replaced_while_it_lasted_is_left_alone(tmp_path: Path) -> None:
    source, work_tree = _trees(tmp_path)
    with linked(dependency_links(source, work_tree)):
        (work_tree / ".venv").unlink()
        (work_tree / ".venv").mkdir()
    assert (work_tree / ".venv").is_dir() and not (work_tree / ".venv").is_symlink()

"""The per-node mirror cache: a shipped source is mirrored once per node, safely under
concurrent items, verified before each use, and cleaned when unused (real git repos)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from code_runner.batch.bundles import Shipment, cache_dir, checkout, clean, make_bundle
from code_runner.errors import EnvironmentProblem
from tests.helpers.git import git, make_repo

pytestmark = pytest.mark.integration


def source_repo(root: Path) -> Path:
    return make_repo(root / "source", {"calc.py": "def add(a, b):\n    return a - b\n"})


def test_concurrent_items_mirror_a_source_once_per_node(tmp_path: Path) -> None:
    shipment, data = make_bundle(source_repo(tmp_path), tmp_path / "bundles")
    reads: list[int] = []
    seen: list[tuple[Path, str]] = []
    start = threading.Barrier(4)

    def read() -> bytes:
        reads.append(1)
        return data

    def item() -> None:
        start.wait()
        with checkout(shipment, read) as repo:
            seen.append((repo, git(repo, "rev-parse", "HEAD").strip()))

    threads = [threading.Thread(target=item) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    with checkout(shipment, read) as repo:  # a later item: nothing fetched, nothing read
        seen.append((repo, git(repo, "rev-parse", "HEAD").strip()))
    assert len(reads) == 1
    assert set(seen) == {(seen[0][0], shipment.commit)}
    assert (seen[0][0] / "calc.py").read_text().endswith("return a - b\n")


def test_a_changed_tree_is_made_again_and_a_damaged_bundle_is_refused(tmp_path: Path) -> None:
    shipment, data = make_bundle(source_repo(tmp_path), tmp_path / "bundles")
    with checkout(shipment, lambda: data) as repo:
        (repo / "calc.py").write_text("changed by someone\n")
    with checkout(shipment, lambda: data) as repo:
        assert (repo / "calc.py").read_text().endswith("return a - b\n")
    other = Shipment("another-source", shipment.commit, "elsewhere")
    with pytest.raises(EnvironmentProblem, match="damaged"), checkout(other, lambda: data[:200]):
        pass


def _age(tree: Path) -> None:
    old = time.time() - 3 * 24 * 3600
    os.utime(tree.parent / "ready", (old, old))


def test_unused_trees_are_cleaned_and_a_tree_in_use_is_kept(tmp_path: Path) -> None:
    source = source_repo(tmp_path)
    first, first_data = make_bundle(source, tmp_path / "bundles")
    (source / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(source, "commit", "-qam", "fix")
    second, second_data = make_bundle(source, tmp_path / "bundles")
    assert first.key == second.key and first.commit != second.commit
    with checkout(second, lambda: second_data) as unused:
        pass
    with checkout(first, lambda: first_data) as in_use:
        _age(unused)
        _age(in_use)
        clean(keep_s=3600, every_s=0)
        assert in_use.exists()
        assert not unused.exists()
    clean(keep_s=3600, every_s=0)
    assert not in_use.exists()
    assert not (cache_dir() / first.key / "mirror.git").exists()

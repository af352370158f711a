"""Source repos shipped to other machines as git bundles, and unpacked once per node.

The driver bundles each source's refs and HEAD once per batch (`make_bundle`); the bytes go
through Ray's object store. A node unpacks a bundle into a clone in its state dir, keyed by
the bundle's hash, under a file lock, so concurrent items on one node clone it once
(`source_from_bundle`). Ray's `runtime_env` cannot do this: its `working_dir` drops `.git`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from pathlib import Path

from code_runner import dirs
from code_runner.repo import git


def make_bundle(source: Path, bundles_dir: Path) -> bytes:
    """The source's HEAD and refs as one `git bundle` file (kept in `bundles_dir`)."""
    repo = git.open_source(source)
    bundles_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(source).encode()).hexdigest()[:16]
    path = bundles_dir / f"{key}.bundle"
    repo.run("bundle", "create", "--quiet", str(path), "HEAD", "--all")
    return path.read_bytes()


def cache_dir() -> Path:
    return dirs.state_dir() / "batch-sources"


def source_from_bundle(data: bytes, label: str) -> Path:
    """A clone of the bundle's HEAD on this node (made once per bundle, under a lock)."""
    key = hashlib.sha256(data).hexdigest()[:24]
    root = cache_dir() / key
    repo_dir = root / "repo"
    ready = root / "ready"
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not ready.exists():
            shutil.rmtree(repo_dir, ignore_errors=True)
            bundle = root / "source.bundle"
            bundle.write_bytes(data)
            repo_dir.mkdir()
            repo = git.init(repo_dir)
            repo.run(
                "fetch", "--quiet", "--update-head-ok", str(bundle), "+refs/heads/*:refs/heads/*"
            )
            head = repo.out("bundle", "list-heads", str(bundle), "HEAD").split()[0]
            repo.run("checkout", "--quiet", "--detach", head)
            (root / "label").write_text(label)
            ready.write_text(head)
    finally:
        os.close(fd)
    return repo_dir

"""Source repos shipped to other machines as git bundles, and a per-node mirror cache of them.

The driver bundles each source's refs and HEAD once per batch (`make_bundle`) and names the
shipment by the source (`Shipment.key`) and its HEAD commit; the bytes go through Ray's
object store. On a node, `checkout` gives an item a checkout of that commit from the node's
cache (`<state dir>/batch-mirrors/<key>/`):

* a bare mirror of the source (`mirror.git`), made once per node and source, and fetched
  into only when a commit it lacks arrives (the bundle's bytes are not even read otherwise);
* a checkout per commit (`trees/<commit>/repo`, objects borrowed from the mirror).

Concurrent items on a node are safe: the mirror and its trees change only under the
source's lock (`mirror.lock`, exclusive), and an item holds its tree's lock shared while it
runs, so the cleaner never removes a tree in use. A bundle is verified (`git bundle verify`,
its HEAD against the shipment's commit) before it is fetched, and a tree before every use
(HEAD at the commit, no tracked file changed); one that fails is made again. Trees unused
for `KEEP_S`, and mirrors left with no tree, are removed by the next item on that node.
Ray's `runtime_env` cannot do this: its `working_dir` drops `.git`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from code_runner import dirs, files
from code_runner.errors import EnvironmentProblem
from code_runner.repo import git

KEEP_S = 24 * 3600.0  # a tree unused this long is removed
CLEAN_EVERY_S = 600.0  # how often a node looks for such trees
_LOCK = "mirror.lock"


@dataclass(frozen=True)
class Shipment:
    """What a node needs to know of a shipped source before it reads the bundle."""

    key: str  # the source, as the driver names it (its host and absolute path, hashed)
    commit: str  # the HEAD the items of this batch start from
    label: str  # the source's path on the driver, for people


def make_bundle(source: Path, bundles_dir: Path) -> tuple[Shipment, bytes]:
    """The source's HEAD and refs as one `git bundle` file (kept in `bundles_dir`)."""
    repo = git.open_source(source)
    bundles_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{socket.gethostname()}:{source}".encode()).hexdigest()[:24]
    path = bundles_dir / f"{key}.bundle"
    repo.run("bundle", "create", "--quiet", str(path), "HEAD", "--all")
    commit = repo.out("rev-parse", "--verify", "HEAD^{commit}")
    return Shipment(key, commit, str(source)), path.read_bytes()


def cache_dir() -> Path:
    return dirs.state_dir() / "batch-mirrors"


def _tree_ok(tree: Path, commit: str) -> bool:
    """The tree is at `commit` and no tracked file differs from it."""
    if not (tree / "ready").exists():
        return False
    repo = git.Repo(git_dir=tree / "repo" / ".git", work_tree=tree / "repo")
    head = repo.run("rev-parse", "--verify", "HEAD", check=False)
    if not head.ok or head.stdout.decode().strip() != commit:
        return False
    return repo.run("diff", "--quiet", "--no-ext-diff", "HEAD", check=False).exit_code == 0


def _remove(path: Path) -> None:
    """Remove a mirror or checkout of ours; what cannot go is rebuilt or cleaned later."""
    with contextlib.suppress(OSError):
        files.force_rmtree(path)


def _fetch(root: Path, shipment: Shipment, read_bundle: Callable[[], bytes]) -> git.Repo:
    """The source's mirror, holding `shipment.commit` (fetched from the bundle if it lacks it)."""
    mirror = git.Repo(git_dir=root / "mirror.git", work_tree=None)
    if not (mirror.git_dir / "HEAD").exists():
        _remove(mirror.git_dir)
        mirror.git_dir.mkdir()
        mirror.run("init", "--quiet", "--bare", "--template=")
    ref = f"refs/batch/{shipment.commit}"
    if mirror.run("rev-parse", "--verify", "--quiet", ref, check=False).ok:
        return mirror
    bundle = root / "incoming.bundle"
    bundle.write_bytes(read_bundle())
    try:
        for step in (
            ("bundle", "verify", "--quiet", str(bundle)),
            ("fetch", "--quiet", str(bundle), f"+HEAD:{ref}"),
        ):
            done = mirror.run(*step, check=False)
            if not done.ok:
                raise EnvironmentProblem(
                    f"the bundle of {shipment.label} is damaged (git {step[0]}: "
                    f"{done.stderr.decode(errors='replace').strip()[-300:]})",
                    fix="run the batch again; if it recurs, check the node's disk",
                )
        fetched = mirror.out("rev-parse", "--verify", f"{ref}^{{commit}}")
        if fetched != shipment.commit:
            mirror.run("update-ref", "-d", ref)
            raise EnvironmentProblem(
                f"the bundle of {shipment.label} holds HEAD {fetched}, not {shipment.commit}",
                fix="run the batch again (the source moved while it was bundled)",
            )
    finally:
        bundle.unlink(missing_ok=True)
    return mirror


def _check_out(mirror: git.Repo, tree: Path, commit: str) -> None:
    _remove(tree)
    repo_dir = tree / "repo"
    repo_dir.mkdir(parents=True)
    repo = git.init(repo_dir)
    alternates = repo.git_dir / "objects" / "info" / "alternates"
    alternates.write_text(f"{mirror.git_dir / 'objects'}\n")
    repo.run("checkout", "--quiet", "--detach", commit)
    (tree / "ready").write_text(commit)
    if not _tree_ok(tree, commit):
        raise EnvironmentProblem(
            f"the checkout of {commit} in {tree} did not verify",
            fix="run the batch again; if it recurs, check the node's disk",
        )


@contextlib.contextmanager
def checkout(shipment: Shipment, read_bundle: Callable[[], bytes]) -> Iterator[Path]:
    """A verified checkout of the shipment's commit on this node, held while in the block."""
    root = cache_dir() / shipment.key
    tree = root / "trees" / shipment.commit
    (root / "trees").mkdir(parents=True, exist_ok=True)
    with files.flocked(root / _LOCK):
        if not _tree_ok(tree, shipment.commit):
            _check_out(_fetch(root, shipment, read_bundle), tree, shipment.commit)
        (root / "label").write_text(shipment.label)
        held = files.open_lock(root / "trees" / f"{shipment.commit}.lock")
        files.wait_flock(held, shared=True)  # before the source lock goes: no cleaner slips in
        os.utime(tree / "ready")  # last used now
    try:
        clean(keep_s=KEEP_S, every_s=CLEAN_EVERY_S)
        yield tree / "repo"
    finally:
        os.close(held)


def _clean_source(root: Path, cutoff: float) -> None:
    with files.flocked(root / _LOCK):
        mirror = git.Repo(git_dir=root / "mirror.git", work_tree=None)
        for lock in sorted((root / "trees").glob("*.lock")):
            tree = lock.with_suffix("")
            fd = os.open(lock, os.O_RDWR)
            try:
                if not files.try_flock(fd):
                    continue  # an item is using it
                stamp = tree / "ready"
                if stamp.exists() and stamp.stat().st_mtime >= cutoff:
                    continue
                _remove(tree)
                if (mirror.git_dir / "HEAD").exists():
                    mirror.run("update-ref", "-d", f"refs/batch/{tree.name}", check=False)
                lock.unlink(missing_ok=True)
            finally:
                os.close(fd)
        if not any((root / "trees").glob("*.lock")):
            _remove(root / "mirror.git")


def clean(*, keep_s: float = KEEP_S, every_s: float = CLEAN_EVERY_S) -> None:
    """Remove trees unused for `keep_s` (none in use) and mirrors left without a tree; at
    most once every `every_s` on this node."""
    base = cache_dir()
    stamp = base / "last-clean"
    now = time.time()
    with contextlib.suppress(OSError):
        if now - stamp.stat().st_mtime < every_s:
            return
    base.mkdir(parents=True, exist_ok=True)
    stamp.touch()
    os.utime(stamp, (now, now))
    for root in sorted(p for p in base.iterdir() if p.is_dir()):
        with contextlib.suppress(OSError):
            _clean_source(root, now - keep_s)

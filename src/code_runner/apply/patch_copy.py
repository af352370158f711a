"""The patch an apply hands to git: a private copy, its digest checked while it is copied.

The record's patch file is sealed, but its path is not a safe thing to give git: a swap
after the check would apply bytes nobody verified. So the patch is copied, in pieces, into
a fresh directory in the state dir that only the runner can write (0700, the file 0600),
hashed on the way, and git only ever reads that copy. The directory is also the apply's
private scratch space (the target content of each patched file); it is removed after.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from code_runner import dirs, files
from code_runner.errors import RecordError

PATCH_NAME = "verified.patch"


@contextlib.contextmanager
def private_patch(chunks: Iterable[bytes], *, sha256: str | None, name: str) -> Iterator[Path]:
    """A private copy of the patch in `chunks`; `RecordError` when its digest is not `sha256`."""
    root = dirs.state_dir() / "apply-patch"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    private = Path(tempfile.mkdtemp(prefix=f"{name[:60]}-", dir=root))  # 0700
    try:
        path = private / PATCH_NAME
        digest = hashlib.sha256()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(path, flags, 0o600), "wb") as f:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
        if sha256 is not None and digest.hexdigest() != sha256:
            raise RecordError(
                f"the patch does not match the digest recorded in result.json (recorded "
                f"{sha256[:16]}…, file {digest.hexdigest()[:16]}…): it was changed after the run.",
                fix="re-run the task to get a patch the runner verified; never apply an "
                "edited one.",
            )
        yield path
    finally:
        files.force_rmtree(private)


def is_blank(path: Path) -> bool:
    """True when the file holds nothing but whitespace (read in pieces)."""
    return all(not chunk.strip() for chunk in files.read_chunks(path))

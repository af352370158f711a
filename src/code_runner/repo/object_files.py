"""Whether one of git's object files still holds together by its own hash, read once.

A pack, its index and the other files under `objects/` end with a hash of every byte before
them (git's trailer); a loose object's name is the hash of its inflated bytes. Git
freshening a file (a `utime`) leaves it so; a write into its bytes does not.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from typing import BinaryIO

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


# files under objects/ that end with a hash of all the bytes before it (git's trailer)
_TRAILED = (".pack", ".idx", ".rev", ".bitmap", ".mtimes", "multi-pack-index", "commit-graph")
_CHUNK = 1024 * 1024


def self_consistent(name: str, dir_fd: int) -> bool:
    """Whether a large object file still checks against its own trailing hash (sha1 or
    sha256): git freshening a pack leaves it so; a write into its bytes does not. A file
    with no trailer to check (a large loose object) is checked as zlib data of its name."""
    try:
        fd = os.open(name, _FLAGS, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            if name.endswith(_TRAILED):
                return _trailer_holds(f)
            return _loose_holds(f, name)
    except (OSError, ValueError, zlib.error):
        return False
    finally:
        os.close(fd)


def _trailer_holds(f: BinaryIO) -> bool:
    size = os.fstat(f.fileno()).st_size
    for algorithm, width in (("sha1", 20), ("sha256", 32)):
        if size < width:
            continue
        digest, left = hashlib.new(algorithm), size - width
        f.seek(0)
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                return False
            digest.update(chunk)
            left -= len(chunk)
        if digest.digest() == f.read(width):
            return True
    return False


def _loose_holds(f: BinaryIO, name: str) -> bool:
    """A loose object: its inflated bytes hash to its name (the file's dir holds the rest)."""
    inflate = zlib.decompressobj()
    digests = [hashlib.sha1(), hashlib.sha256()]  # noqa: S324 - git's object names
    while chunk := f.read(_CHUNK):
        data = inflate.decompress(chunk)
        for digest in digests:
            digest.update(data)
    tail = inflate.flush()
    for digest in digests:
        digest.update(tail)
    return any(d.hexdigest().endswith(name) for d in digests)


__all__ = ["self_consistent"]

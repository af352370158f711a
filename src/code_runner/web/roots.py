"""The directories the dashboard may read, and the one way a URL becomes a path in them.

A run is named in a URL by the number of its root and its path relative to that root. A
path is refused unless it is plain (no empty, `.` or `..` part, no NUL, no backslash) and,
with every symlink resolved, still lies inside the root it names: no URL reads outside.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAX_RELATIVE_CHARS = 1024


class OutsideRoots(LookupError):
    """A URL named a path the dashboard may not read."""


@dataclass(frozen=True)
class RunKey:
    """A run as a URL names it: the root's number and the path inside it."""

    root: int
    rel: str

    @property
    def url_part(self) -> str:
        return f"{self.root}/{self.rel}"


@dataclass(frozen=True)
class Roots:
    """The configured roots, resolved once when the server starts."""

    dirs: tuple[Path, ...]

    @classmethod
    def of(cls, paths: list[Path]) -> Roots:
        return cls(tuple(Path(os.path.realpath(p)) for p in paths))

    def resolve(self, root: int, rel: str) -> Path:
        """The real path `rel` names under root number `root`; `OutsideRoots` if none may."""
        if not 0 <= root < len(self.dirs):
            raise OutsideRoots(f"no root number {root}")
        base = self.dirs[root]
        if not rel or rel == ".":
            return base
        if len(rel) > MAX_RELATIVE_CHARS or "\0" in rel or "\\" in rel or rel.startswith("/"):
            raise OutsideRoots("not a plain relative path")
        parts = rel.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise OutsideRoots("not a plain relative path")
        found = Path(os.path.realpath(base.joinpath(*parts)))
        if found != base and not found.is_relative_to(base):
            raise OutsideRoots("outside the root")
        return found

    def key_of(self, path: Path) -> RunKey | None:
        """The URL name of `path` (already resolved), or None when no root holds it."""
        for number, base in enumerate(self.dirs):
            if path == base:
                return RunKey(number, ".")
            if path.is_relative_to(base):
                return RunKey(number, path.relative_to(base).as_posix())
        return None


def open_file(path: Path) -> BinaryIO:
    """Open a record file for reading, never through a symlink (OSError if it is one).

    Every folder the dashboard reads in has been resolved under a root, so only the file's
    own name could still point elsewhere; `O_NOFOLLOW` closes that."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    if not os.path.isfile(path) or os.path.islink(path):
        handle.close()
        raise OSError(f"{path} is not a regular file")
    return handle


def is_plain_file(path: Path) -> bool:
    """True for a regular file that is not a symlink (what the record readers may open)."""
    return path.is_file() and not path.is_symlink()


__all__ = ["MAX_RELATIVE_CHARS", "OutsideRoots", "Roots", "RunKey", "is_plain_file", "open_file"]

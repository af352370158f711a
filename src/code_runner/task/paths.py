"""What an agent may touch: repo path rules and the write allowlist.

Path rules are git's own (applied on every OS, since a patch made here may be applied on a
case-insensitive or NTFS file system later) plus a few of ours: no control, bidi or
zero-width characters, nothing over-long. The allowlist is segment-aware: `src` matches
`src` and `src/x.py`, never `src_evil/x.py`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_PATH_BYTES = 4096


MAX_SEGMENT_BYTES = 255


# Characters HFS+ ignores when comparing names, plus bidi controls: a name that contains
# one can impersonate another (".g\u200cit" is ".git" on a Mac).
_INVISIBLE = frozenset(
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u206a\u206b\u206c\u206d\u206e\u206f\u2066\u2067\u2068\u2069\u061c\u2060\ufeff"
)


_FORBIDDEN_NAMES = frozenset({".gitmodules"})


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) in {"Cc", "Cf"} or ch in _INVISIBLE


def is_dot_git(segment: str) -> bool:
    """True when a path segment means `.git` to some file system git supports."""
    if segment.isascii():  # fast path: the audit asks this of every name in the tree
        return _DOT_GIT.match(segment.lower()) is not None
    name = "".join(ch for ch in segment if ch not in _INVISIBLE).casefold()
    return _DOT_GIT.match(name) is not None


# `.git` or its NTFS short name, then any dots and spaces (which NTFS drops), then the end or
# an NTFS stream (`:...`): git's own `is_ntfs_dotgit`.
_DOT_GIT = re.compile(r"(?:\.git|git~1)[ .]*(?::.*)?\Z", re.DOTALL)


def path_problem(path: str) -> str | None:  # noqa: C901 - one rule per way a path is unsafe
    """Why `path` is not an acceptable repo-relative path, or None when it is.

    A single trailing slash is allowed (it marks a directory in the allowlist).
    """
    if not isinstance(path, str) or path == "":
        return "is empty"
    if "\0" in path:
        return "contains a NUL byte"
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path):
        return "is absolute; use a path relative to the repository root"
    if path.startswith("~"):
        return "starts with `~`; use a path relative to the repository root"
    if "\\" in path:
        return "contains a backslash; use `/` between directories"
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        return f"is longer than {MAX_PATH_BYTES} bytes"
    bad = [ch for ch in path if _is_control(ch)]
    if bad:
        return f"contains a control, bidi or zero-width character ({bad[0]!a})"
    body = path[:-1] if path.endswith("/") else path
    for segment in body.split("/"):
        if segment == "":
            return "has an empty segment (`//` or a leading/trailing slash)"
        if segment in {".", ".."}:
            return f"contains a `{segment}` segment"
        if is_dot_git(segment):
            return f"names git's own directory ({segment!r})"
        if segment.casefold() in _FORBIDDEN_NAMES:
            return f"names {segment!r}, which only the runner may change"
        if len(segment.encode("utf-8", "surrogateescape")) > MAX_SEGMENT_BYTES:
            return f"has a segment longer than {MAX_SEGMENT_BYTES} bytes"
    return None


def case_collisions(paths: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs of distinct paths that are the same file on a case-insensitive file system."""
    seen: dict[str, str] = {}
    clashes: list[tuple[str, str]] = []
    for path in sorted(set(paths)):
        key = unicodedata.normalize("NFC", path).casefold()
        if key in seen:
            clashes.append((seen[key], path))
        else:
            seen[key] = path
    return clashes


@dataclass(frozen=True)
class Allowlist:
    """The paths an agent may change: exact files, or directories (every path beneath)."""

    entries: tuple[str, ...]

    @classmethod
    def parse(cls, entries: Sequence[str]) -> Allowlist:
        """Normalise entries; raise ValueError naming every bad one."""
        problems = []
        normalised: list[str] = []
        for entry in entries:
            problem = path_problem(entry)
            if problem:
                problems.append(f"{entry!r} {problem}")
                continue
            normalised.append(entry.rstrip("/"))
        if not entries:
            problems.append("is empty; list at least one file or directory the agent may change")
        if problems:
            raise ValueError("; ".join(problems))
        return cls(entries=tuple(dict.fromkeys(normalised)))

    def allows(self, path: str) -> bool:
        if path_problem(path) is not None:
            return False
        clean = path.rstrip("/")
        return any(clean == entry or clean.startswith(entry + "/") for entry in self.entries)

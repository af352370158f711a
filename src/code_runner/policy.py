"""What an agent may touch: repo path rules, the write allowlist, and command rules.

Path rules are git's own (applied on every OS, since a patch made here may be applied on a
case-insensitive or NTFS file system later) plus a few of ours: no control, bidi or
zero-width characters, nothing over-long. The allowlist is segment-aware: `src` matches
`src` and `src/x.py`, never `src_evil/x.py`.

Command rules are the fallback for when no OS sandbox is available: they block the obvious
destructive patterns by name (whole-command patterns here, per-program rules in
`command_rules`). They are a speed bump, not a wall; the audit and the
source snapshot are what catch a determined agent.
"""

from __future__ import annotations

import os
import re
import shlex
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from code_runner.command_rules import check_words

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
        lower = segment.lower()
        return lower.rstrip(" .") == ".git" or lower.startswith(".git:") or lower == "git~1"
    name = "".join(ch for ch in segment if ch not in _INVISIBLE).casefold()
    if name.rstrip(" .") == ".git":
        return True
    return bool(name.startswith(".git:") or name == "git~1")


def path_problem(path: str) -> str | None:
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


@dataclass(frozen=True)
class CommandBlock:
    """A command refused by a named rule."""

    rule: str
    reason: str


_GIT_WRITES = (
    "add|am|apply|bisect|branch|checkout|cherry-pick|clean|clone|commit|config|fetch|"
    "filter-branch|filter-repo|gc|init|merge|mv|notes|prune|pull|push|rebase|reflog|remote|"
    "repack|replace|reset|restore|revert|rm|stash|submodule|switch|symbolic-ref|tag|"
    "update-index|update-ref|worktree|maintenance|fast-import|read-tree|write-tree|"
    "commit-tree|hash-object|checkout-index|pack-refs"
)

_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "git_other_repo",
        re.compile(
            r"(?:\bgit\b[^;&|\n]*\s(?:-C|--git-dir|--work-tree)\b)"
            r"|\bGIT_(?:DIR|WORK_TREE|INDEX_FILE|OBJECT_DIRECTORY|COMMON_DIR|CONFIG\w*)\s*="
        ),
        "pointing git at another repository or git dir is not allowed",
    ),
    (
        "git_config_override",
        re.compile(r"\bgit(?:\s+--?[\w-]+(?:=\S+)?)*\s+(?:-c\s*\S|--config-env|--exec-path)"),
        "git -c / --config-env / --exec-path can make git run programs; they are not allowed",
    ),
    (
        "git_write",
        re.compile(r"\bgit\s+(?:-[-\w.=]+(?:\s+[\w.=/:-]+)?\s+)*(?:" + _GIT_WRITES + r")\b"),
        "the runner owns git: diffs, staging and commits are made by the runner, not the agent",
    ),
    (
        "rm_recursive",
        re.compile(r"\brm\s+(?:-\w*[rR]\w*|--recursive)\b"),
        "recursive deletion is not allowed; delete single files with `rm FILE`",
    ),
    ("dd_write", re.compile(r"\bdd\b[^;&|\n]*\bof="), "writing with dd is not allowed"),
    ("truncate", re.compile(r"\btruncate\b"), "truncate is not allowed"),
    ("shred", re.compile(r"\bshred\b"), "shred is not allowed"),
    ("mkfs", re.compile(r"\bmkfs(?:\.\w+)?\b"), "creating file systems is not allowed"),
    ("chmod_recursive", re.compile(r"\bch(?:mod|own)\s+-\w*R"), "recursive chmod/chown"),
    (
        "source_env",
        re.compile(r"\bCODE_RUNNER_SOURCE_CWD\b"),
        "commands may not refer to the source repository",
    ),
)

_REDIRECT = re.compile(r"(?:^|[^<>0-9])&?\d?>>?[|&]?\s*([^\s;&|<>()]+)")
_SED_INPLACE = re.compile(r"\bsed\b((?:\s+\S+)*)")


def _outside(target: str, workspace_dir: Path) -> bool:
    if target.startswith(("$", "`")):
        return True
    if target in {"/dev/null", "/dev/stdout", "/dev/stderr"}:
        return False
    expanded = os.path.expanduser(target)
    resolved = Path(os.path.normpath(workspace_dir / expanded))
    try:
        resolved.relative_to(workspace_dir)
    except ValueError:
        return True
    return False


def check_command(command: str, *, source_dir: Path, workspace_dir: Path) -> CommandBlock | None:
    """The first rule `command` breaks, or None. Used when no OS sandbox is in force."""
    if "\0" in command:
        return CommandBlock("nul_byte", "the command contains a NUL byte")
    for name, pattern, reason in _RULES:
        if pattern.search(command):
            return CommandBlock(name, reason)
    source_forms = {str(source_dir), os.path.realpath(source_dir)}
    for form in source_forms:
        if form and form != "/" and form in command:
            return CommandBlock("source_path", f"commands may not refer to the source ({form})")
    for match in _REDIRECT.finditer(command):
        if any(is_dot_git(part) for part in match.group(1).strip("'\"").split("/")):
            return CommandBlock(
                "git_dir_path", f"output may not go to git's own files ({match.group(1)})"
            )
        if _outside(match.group(1), workspace_dir):
            return CommandBlock(
                "redirect_outside_workspace",
                f"output may only be redirected to files inside the workspace ({match.group(1)})",
            )
    for match in _SED_INPLACE.finditer(command):
        try:
            words = shlex.split(match.group(1))
        except ValueError:
            words = match.group(1).split()
        if any(w == "--in-place" or re.match(r"^-[a-zA-Z]*i", w) for w in words):
            targets = [w for w in words if not w.startswith("-")][1:]
            if any(_outside(t, workspace_dir) for t in targets):
                return CommandBlock("sed_inplace_outside", "sed -i outside the workspace")
    found = check_words(command, workspace_dir=workspace_dir)
    return CommandBlock(*found) if found else None

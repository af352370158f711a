"""The commit the runner makes in the source: its identity, its one-line title, its trailers,
and the user's index entries for the committed paths (and only those).
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from code_runner.errors import ApplyRefused, UsageError
from code_runner.repo import git

TITLE_MAX_CHARS = 72

TRAILERS = ("Code-Runner-Task", "Code-Runner-Run", "Code-Runner-DoD")

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class GitIdentity:
    """Who a commit is by: from the source's git config, or `--author "Name <email>"`."""

    name: str
    email: str

    @classmethod
    def parse(cls, text: str) -> GitIdentity:
        match = re.fullmatch(r"\s*([^<>]*?)\s*<([^<>\s]+@[^<>\s]+)>\s*", text)
        if match is None or not match.group(1) or _has_control(text):
            raise UsageError(
                f"--author {text!r} is not `Name <email>`.",
                fix='pass --author "Your Name <you@example.com>".',
            )
        return cls(match.group(1), match.group(2))

    def env(self) -> dict[str, str]:
        return {
            "GIT_AUTHOR_NAME": self.name,
            "GIT_AUTHOR_EMAIL": self.email,
            "GIT_COMMITTER_NAME": self.name,
            "GIT_COMMITTER_EMAIL": self.email,
        }

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"} for ch in text)


def commit_title(title: str, task_id: str) -> str:
    """One line a task title (or an agent) cannot use to forge trailers or hide text.

    Line breaks collapse to spaces; control, format (bidi, zero-width), separator,
    surrogate, private-use and unassigned characters are dropped; runs of whitespace become
    one space.
    """
    kept = []
    for ch in title:
        category = unicodedata.category(ch)
        if ch.isspace() or category in {"Zl", "Zp"}:
            kept.append(" ")
        elif category in {"Cc", "Cf", "Cs", "Co", "Cn"}:
            continue
        else:
            kept.append(ch)
    text = " ".join("".join(kept).split())
    if len(text) > TITLE_MAX_CHARS:
        text = text[: TITLE_MAX_CHARS - 1].rstrip() + "…"
    return text or f"code-runner task {task_id}"


def commit_message(title: str, task_id: str, run_id: str) -> str:
    for label, value in (("task id", task_id), ("run id", run_id)):
        if not _SAFE_ID.fullmatch(value):
            raise ApplyRefused(
                f"the {label} {value!r} cannot go into a commit trailer.",
                fix="use a record written by code-runner (ids are letters, digits, '.', '_', '-').",
            )
    return (
        f"{commit_title(title, task_id)}\n\n"
        f"Code-Runner-Task: {task_id}\nCode-Runner-Run: {run_id}\nCode-Runner-DoD: passed\n"
    )


def _config_value(source: git.Repo, key: str) -> str | None:
    """`key` as `git commit` in the source would see it: repo config, then the user's."""
    home = Path(os.environ.get("HOME", "/nonexistent"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    attempts: list[tuple[str, ...]] = [("config", "--local", "--get", key)]
    for path in (home / ".gitconfig", xdg / "git" / "config"):
        if path.is_file():
            attempts.append(("config", "--file", str(path), "--includes", "--get", key))
    for args in attempts:
        result = source.run(*args, check=False)
        value = result.stdout.decode("utf-8", "replace").strip()
        if result.ok and value:
            return value
    return None


def commit_identity(source: git.Repo, author: GitIdentity | None) -> GitIdentity | None:
    """`author` when given, else user.name/user.email from the source's git config."""
    if author is not None:
        return author
    name, email = _config_value(source, "user.name"), _config_value(source, "user.email")
    if not name or not email or _has_control(name + email) or "<" in name + email:
        return None
    return GitIdentity(name, email.strip("<>"))


def update_index(source: git.Repo, commit: str, paths: tuple[str, ...]) -> None:
    """Point the user's index entries for `paths` (and only those) at `commit`."""
    lines = source.run(
        "ls-tree", "-z", "--full-tree", commit, "--", *paths, env={"GIT_LITERAL_PATHSPECS": "1"}
    ).stdout
    present: dict[str, bytes] = {}
    for item in lines.split(b"\0"):
        if item:
            meta, _, name = item.partition(b"\t")
            mode, _type, oid = meta.split()
            present[git.decode_path(name)] = mode + b" " + oid
    zero = b"0 " + b"0" * len(commit)
    info = b"".join(
        present.get(p, zero) + b"\t" + p.encode("utf-8", "surrogateescape") + b"\0" for p in paths
    )
    source.run("update-index", "-z", "--index-info", input_bytes=info)


def commit_landed(source: git.Repo, head_before: str, tree: str) -> str | None:
    """HEAD, when it is a commit on top of `head_before` holding exactly `tree`; else None.

    How a transaction or a repair tells whether its commit made it before something broke.
    """
    head = git.head_commit(source)
    if head is None or head == head_before:
        return None
    parent = source.run("rev-parse", "--verify", "--quiet", f"{head}^1", check=False)
    got = source.run("rev-parse", "--verify", "--quiet", f"{head}^{{tree}}", check=False)
    if parent.stdout.decode().strip() == head_before and got.stdout.decode().strip() == tree:
        return head
    return None

"""The command policy for when no OS sandbox is in force: a speed bump, not a wall.

`check_command` matches whole-command patterns (git writes, `rm -r`, redirects), then the
word-level rules: they split the command line into simple commands, skip variable assignments and
wrappers (`env`, `nohup`, `timeout 5`, `xargs`...), and judge the program and its operands:
privilege and system changes are refused outright, and writers (`cp`, `mv`, `tee`, `touch`,
`chmod`, `find -delete`, `sed -i`/`perl -i`...) may only name paths inside the workspace.
Like the rest of the policy this is a speed bump for when no OS sandbox is in force, not a
wall: the audit and the source snapshot still judge what actually happened.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from code_runner.task.paths import is_dot_git

_SPLIT = re.compile(r"\|\||&&|[;&|\n(){}]|\$\(|`")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = frozenset(
    {"env", "nohup", "xargs", "time", "nice", "ionice", "timeout", "stdbuf", "command"}
    | {"builtin", "exec", "then", "do", "else", "!"}
)
_PRIVILEGE = frozenset(
    {"sudo", "su", "doas", "pkexec", "setpriv", "unshare", "nsenter", "chroot", "capsh"}
)
_SYSTEM = frozenset(
    {"shutdown", "reboot", "halt", "poweroff", "systemctl", "service", "crontab", "at"}
    | {"mount", "umount", "swapon", "swapoff", "modprobe", "insmod", "rmmod", "sysctl"}
    | {"iptables", "nft", "chattr", "useradd", "userdel", "usermod", "passwd", "chpasswd"}
)
_KILLERS = frozenset({"pkill", "killall", "killall5"})
_DEST_LAST = frozenset({"cp", "install", "rsync", "ln", "scp"})
_LINK_FLAGS = re.compile(r"^-(?:[a-zA-Z]*[sl][a-zA-Z]*|-symbolic-link|-link)$")
_ALL_OPERANDS = frozenset(
    {"mv", "tee", "touch", "mkdir", "rm", "rmdir", "unlink", "mkfifo", "mknod", "truncate"}
    | {"shred", "chmod", "chown", "chgrp", "setfacl"}
)
_FIRST_IS_MODE = frozenset({"chmod", "chown", "chgrp", "setfacl"})
_SAFE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


def outside(target: str, workspace_dir: Path) -> bool:
    """True when `target` may name something outside the workspace (unknowns count)."""
    if target.startswith(("$", "`")) or "$(" in target:
        return True
    if target in _SAFE_TARGETS:
        return False
    expanded = os.path.expanduser(target)
    resolved = Path(os.path.normpath(workspace_dir / expanded))
    return not (resolved == workspace_dir or workspace_dir in resolved.parents)


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:
        return segment.split()


def _program(words: list[str]) -> tuple[str, list[str]]:
    """The program a simple command runs, past assignments and wrappers, and its args."""
    index = 0
    while index < len(words):
        word = words[index]
        if _ASSIGNMENT.match(word):
            index += 1
            continue
        if os.path.basename(word) in _WRAPPERS:
            index += 1
            while index < len(words) and (
                words[index].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?", words[index])
            ):
                index += 1
            continue
        return os.path.basename(word), words[index + 1 :]
    return "", []


def _operands(args: list[str]) -> list[str]:
    found: list[str] = []
    only_operands = False
    for arg in args:
        if not only_operands and arg == "--":
            only_operands = True
        elif only_operands or not arg.startswith("-"):
            found.append(arg)
    return found


def _inplace(name: str, args: list[str]) -> bool:
    if name == "sed":
        return any(
            a == "--in-place" or a.startswith("--in-place=") or _short_flag(a, "i") for a in args
        )
    return name == "perl" and any(_short_flag(a, "i") for a in args)


def _short_flag(arg: str, flag: str) -> bool:
    return bool(re.match(r"^-[a-zA-Z]*" + flag, arg)) and not arg.startswith("--")


def _targets(name: str, args: list[str]) -> list[str]:
    """The operands a writer would create, change or remove."""
    operands = _operands(args)
    if name in _DEST_LAST:
        return operands[-1:]
    if name in _ALL_OPERANDS:
        return operands[1:] if name in _FIRST_IS_MODE else operands
    if name in ("sed", "perl") and _inplace(name, args):
        scripted = any(a in ("-e", "--expression", "-f", "--file") for a in args)
        return operands if scripted else operands[1:]
    if name == "find" and any(a in ("-delete", "-exec", "-execdir", "-ok") for a in args):
        starts: list[str] = []
        for arg in args:
            if arg.startswith(("-", "(", "!")):
                break
            starts.append(arg)
        return starts
    if name in ("cd", "pushd"):
        return operands[:1] or ["~"]
    return []


def check_words(command: str, *, workspace_dir: Path) -> tuple[str, str] | None:
    """(rule, reason) for the first simple command a word-level rule refuses, else None."""
    for segment in _SPLIT.split(command):
        name, args = _program(_words(segment))
        if not name:
            continue
        if name in _PRIVILEGE:
            return "privilege", f"`{name}` changes privileges or namespaces; it is not allowed"
        if name in _SYSTEM:
            return "system_change", f"`{name}` changes the machine, not the workspace"
        if name in _KILLERS or (name == "kill" and "-1" in args):
            return "kill_all", "signalling processes by name or all of them (-1) is not allowed"
        found = _links_out(name, args, workspace_dir) or _names_git(name, args)
        if found:
            return found
        for target in _targets(name, args):
            if outside(target, workspace_dir):
                rule = (
                    "cd_outside_workspace" if name in ("cd", "pushd") else "write_outside_workspace"
                )
                return rule, f"`{name}` may only name paths inside the workspace ({target})"
    return None


def _links_out(name: str, args: list[str], workspace_dir: Path) -> tuple[str, str] | None:
    """`ln` (or `cp -s`/`cp -l`) to something outside: a later write would go through it."""
    linking = name == "ln" or (name == "cp" and any(_LINK_FLAGS.match(a) for a in args))
    if not linking:
        return None
    for source in _operands(args)[:-1]:
        if outside(source, workspace_dir):
            return (
                "link_outside_workspace",
                f"`{name}` may not link to paths outside the workspace ({source})",
            )
    return None


def _names_git(name: str, args: list[str]) -> tuple[str, str] | None:
    """A writer naming `.git` (the pointer, in any spelling) among its paths."""

    if name in ("cd", "pushd"):
        return None
    paths = _operands(args) if name in ("ln", "cp", "mv") else _targets(name, args)
    for path in paths:
        if any(is_dot_git(part) for part in path.split("/")):
            return "git_dir_path", f"`{name}` may not touch git's own files ({path})"
    return None


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


def check_command(command: str, *, source_dir: Path, workspace_dir: Path) -> CommandBlock | None:  # noqa: C901 - the policy's rules in order
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
        if outside(match.group(1), workspace_dir):
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
            if any(outside(t, workspace_dir) for t in targets):
                return CommandBlock("sed_inplace_outside", "sed -i outside the workspace")
    found = check_words(command, workspace_dir=workspace_dir)
    return CommandBlock(*found) if found else None

"""`cmd` checks: one command line turned into an argv without a shell, and who may approve it.

The tokenizer is deliberately smaller than a shell: only a space separates arguments, `'…'`
and `"…"` quote literally (no escapes at all), and every character a shell would give a
meaning to is refused outside quotes. Nothing is expanded. An argv runs only when the
*user* approved exactly that list of strings, by `--allow-cmd` or in their own config file
(`[plans] allowed_commands`); a plan, or the repository it is about (its `code-runner.toml`
included), can never approve a command.
"""

from __future__ import annotations

import json
import os
import tomllib
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from code_runner.config import CONFIG_ENV, user_config_path
from code_runner.errors import SpecError, UsageError
from code_runner.problems import clip

SHELL_CHARACTERS = frozenset(";&|<>$`()*?[]{}!#~")
_QUOTES = "'\""


class CommandSyntax(ValueError):
    """A `cmd` text the tokenizer refuses; the message says what to change."""


def tokenize(text: str) -> list[str]:  # noqa: C901 - a quote-aware scanner, a branch per character class
    """The argv a `cmd` text stands for; `CommandSyntax` when it is not one."""
    for ch in text:
        if ch == "\\":
            raise CommandSyntax("contains a backslash; no escapes exist, quote the part instead")
        if ch in "\n\r":
            raise CommandSyntax("contains a newline; a check is one command on one line")
        if ch == "\t":
            raise CommandSyntax("contains a tab; separate arguments with single spaces")
        if unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"}:
            raise CommandSyntax(f"contains a control or invisible character ({ch!a})")
    argv: list[str] = []
    current: list[str] = []
    started = False  # an argument begun (`""` is an empty argument)
    quote: str | None = None
    for index, ch in enumerate(text):
        if quote is not None:
            if ch == quote:
                quote = None
            else:
                current.append(ch)
        elif ch in _QUOTES:
            quote = ch
            started = True
        elif ch == " ":
            if started:
                argv.append("".join(current))
                current, started = [], False
        elif ch in SHELL_CHARACTERS:
            raise CommandSyntax(
                f"has {ch!r} outside quotes (column {index + 1}); commands run without a "
                "shell, so quote it if it is a literal argument"
            )
        else:
            current.append(ch)
            started = True
    if quote is not None:
        raise CommandSyntax(f"has an unclosed {quote} quote")
    if started:
        argv.append("".join(current))
    if not argv:
        raise CommandSyntax("is empty; write a program and its arguments")
    if argv[0] == "":
        raise CommandSyntax("names an empty program")
    return argv


def show_argv(argv: Sequence[str]) -> str:
    return json.dumps(list(argv), ensure_ascii=False)


@dataclass(frozen=True)
class Approvals:
    """The argv lists the user approved, and where each came from."""

    entries: tuple[tuple[str, ...], ...]
    origins: tuple[str, ...]

    def approves(self, argv: Sequence[str]) -> bool:
        return tuple(argv) in self.entries

    def to_dict(self) -> dict[str, object]:
        return {"approved": [list(entry) for entry in self.entries], "from": list(self.origins)}


def parse_allow_cmd(values: Iterable[str]) -> list[tuple[str, ...]]:
    """`--allow-cmd '["python","-m","pytest"]'` values; UsageError naming each bad one."""
    entries: list[tuple[str, ...]] = []
    problems: list[str] = []
    for value in values:
        try:
            entries.append(_argv_entry(json.loads(value)))
        except (ValueError, TypeError) as exc:
            problems.append(f"--allow-cmd {clip(value)}: {exc}")
    if problems:
        raise UsageError(
            "\n".join(problems),
            fix="give each --allow-cmd as a JSON list of strings, "
            'e.g. \'["python","-m","pytest"]\'',
        )
    return entries


def _argv_entry(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("is not a non-empty JSON list of strings")
    if not all(isinstance(part, str) for part in value) or value[0] == "":
        raise ValueError("every element must be a string and the program must not be empty")
    return tuple(value)


def user_approvals(allow_cmd: Iterable[str] = ()) -> Approvals:
    """`--allow-cmd` entries plus `[plans] allowed_commands` of the user's own config.

    The user's config is `$CODE_RUNNER_CONFIG` when set, else the file in
    `$XDG_CONFIG_HOME/code-runner/`; a repository's `code-runner.toml` is never read here.
    """
    entries = parse_allow_cmd(allow_cmd)
    origins = ["--allow-cmd"] if entries else []
    path = Path(os.environ[CONFIG_ENV]).expanduser() if os.environ.get(CONFIG_ENV) else None
    path = path or user_config_path()
    configured = _configured(path)
    if configured:
        origins.append(str(path))
    return Approvals(tuple(dict.fromkeys([*entries, *configured])), tuple(origins))


def _configured(path: Path) -> list[tuple[str, ...]]:
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(str(path), [f"the file cannot be read: {clip(str(exc), 200)}"]) from None
    table = data.get("plans", {})
    raw = table.get("allowed_commands", []) if isinstance(table, dict) else None
    if not isinstance(raw, list):
        raise SpecError(str(path), ["`plans.allowed_commands`: must be a list of argv lists"])
    entries: list[tuple[str, ...]] = []
    problems: list[str] = []
    for index, value in enumerate(raw):
        try:
            entries.append(_argv_entry(value))
        except ValueError as exc:
            problems.append(f"`plans.allowed_commands[{index}]`: {exc}")
    if problems:
        raise SpecError(str(path), problems)
    return entries

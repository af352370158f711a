"""A patch as a person reads it: files, hunks and lines, syntax-highlighted, with old and
new line numbers for the unified and the side-by-side view.

Highlighting is Pygments' (its HTML escapes every character it is given); a line is
highlighted alone, with the lexer the file's name suggests, and a patch too large to show
is cut with a note instead of slowing the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from code_runner.web.text import clean

MAX_LINES = 20_000
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_FORMATTER = HtmlFormatter(nowrap=True)


@dataclass(frozen=True)
class Line:
    kind: str  # "add", "del", "ctx", "hunk", "meta"
    old_no: int | None
    new_no: int | None
    html: Markup


@dataclass
class FileDiff:
    path: str
    lines: list[Line] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    binary: bool = False


@dataclass(frozen=True)
class Row:
    """One row of the side-by-side view: the old side, the new side (either may be empty)."""

    left: Line | None
    right: Line | None


def _lexer(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _code(text: str, lexer: Lexer) -> Markup:
    return Markup(highlight(clean(text), lexer, _FORMATTER).rstrip("\n"))  # noqa: S704 - Pygments escapes


def _path_of(header: str) -> str:
    parts = header.split(" b/", 1)
    return clean(parts[1] if len(parts) == 2 else header.removeprefix("diff --git "))


def parse(patch: str) -> tuple[list[FileDiff], bool]:
    """The files of a unified git diff, and whether it was cut at `MAX_LINES`."""
    found: list[FileDiff] = []
    current: FileDiff | None = None
    lexer: Lexer = TextLexer()
    old_no = new_no = 0
    in_hunk = False
    lines = patch.splitlines()
    for raw in lines[:MAX_LINES]:
        if raw.startswith("diff --git "):
            current = FileDiff(_path_of(raw))
            lexer = _lexer(current.path)
            found.append(current)
            in_hunk = False
            continue
        if current is None:
            continue
        if raw.startswith("@@"):
            m = _HUNK.match(raw)
            old_no, new_no = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
            in_hunk = True
            current.lines.append(Line("hunk", None, None, escape(clean(raw))))
        elif not in_hunk:
            current.binary = current.binary or raw.startswith(("GIT binary patch", "Binary files"))
        elif raw.startswith("+"):
            current.lines.append(Line("add", None, new_no, _code(raw[1:], lexer)))
            current.added += 1
            new_no += 1
        elif raw.startswith("-"):
            current.lines.append(Line("del", old_no, None, _code(raw[1:], lexer)))
            current.removed += 1
            old_no += 1
        elif raw.startswith(" "):
            current.lines.append(Line("ctx", old_no, new_no, _code(raw[1:], lexer)))
            old_no += 1
            new_no += 1
    return found, len(lines) > MAX_LINES


def side_by_side(diff: FileDiff) -> list[Row]:
    """Removed lines beside the added lines that replace them; context on both sides."""
    rows: list[Row] = []
    dels: list[Line] = []
    adds: list[Line] = []

    def flush() -> None:
        for i in range(max(len(dels), len(adds))):
            rows.append(Row(dels[i] if i < len(dels) else None, adds[i] if i < len(adds) else None))
        dels.clear()
        adds.clear()

    for line in diff.lines:
        if line.kind == "del":
            dels.append(line)
        elif line.kind == "add":
            adds.append(line)
        else:
            flush()
            rows.append(Row(line, line))
    flush()
    return rows


__all__ = ["MAX_LINES", "FileDiff", "Line", "Row", "parse", "side_by_side"]

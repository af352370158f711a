"""Text helpers for the file tools: line splitting, numbering, splicing, and log-safe forms.

Only `\\n` ends a line (as for sed, rg and git), so line numbers the agent sees agree with
every other tool it may run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

from code_runner.problems import clip

EVENT_TEXT_CHARS = 200
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split_lines(text: str) -> list[str]:
    """Lines with their `\\n` kept; only `\\n` ends a line (as for sed, rg and git)."""
    return _LINE.findall(text)


def is_binary(data: bytes) -> bool:
    if b"\0" in data:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def shown_path(path: str) -> str:
    """A path as it may appear in a message: escaped, and not 4 KiB long."""
    text = ascii(path)[1:-1] if not path.isprintable() else path
    return _keep(text, 160, "...")


def number_lines(lines: Sequence[str], first: int, width: int, max_chars: int) -> list[str]:
    out = []
    for offset, line in enumerate(lines):
        body = line.removesuffix("\n").removesuffix("\r")
        out.append(f"{first + offset:>{width}}| {clip_line(body, max_chars)}")
    return out


def tail(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return "[...]" + text[-max_chars:]


def clip_line(line: str, max_chars: int) -> str:
    """The first `max_chars` of a line, then a note of how long it was."""
    return _keep(line, max_chars, f" [... line cut at {max_chars} of {len(line)} chars]")


def _keep(text: str, keep: int, marker: str) -> str:
    """`text` if it has at most `keep` characters, else its first `keep` and `marker`."""
    return clip(text, keep + len(marker), marker=marker) if len(text) > keep else text


def splice(lines: list[str], start_line: int, end_line: int, content: str) -> list[str]:
    """`lines` with start_line..end_line replaced by `content`, keeping line endings sane."""
    crlf = bool(lines) and lines[0].endswith("\r\n")
    newline = "\r\n" if crlf else "\n"
    if crlf:
        content = re.sub(r"(?<!\r)\n", "\r\n", content)
    prefix = list(lines[: start_line - 1])
    suffix = lines[end_line:]
    new = split_lines(content)
    ended_with_newline = not lines or lines[-1].endswith("\n")
    if new and not new[-1].endswith("\n") and (suffix or ended_with_newline):
        new[-1] += newline
    if prefix and not prefix[-1].endswith("\n") and (new or suffix):
        prefix[-1] += newline
    return prefix + new + suffix


def count_lines(lines: int) -> str:
    return f"{lines} line" if lines == 1 else f"{lines} lines"


def loggable(args: object) -> object:
    """Arguments as recorded in events: long strings cut, so a 1 MiB write stays small."""
    if isinstance(args, Mapping):
        return {str(key): loggable(value) for key, value in args.items()}
    if isinstance(args, str):
        return _keep(args, EVENT_TEXT_CHARS, f"... [{len(args)} chars]")
    if isinstance(args, list | tuple):
        return [loggable(item) for item in args[:20]]
    if args is None or isinstance(args, bool | int | float):
        return args
    return loggable(repr(args))


def summary(content: str) -> str:
    return _keep(content.split("\n", 1)[0], EVENT_TEXT_CHARS, "...")


def details(data: Mapping[str, object]) -> dict[str, object]:
    """The small scalar parts of a result's data, for the event log."""
    return {
        key: value
        for key, value in data.items()
        if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 100)
    }

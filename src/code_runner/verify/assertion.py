"""The DoD's assertion grammar and the `DefinitionOfDone` model that carries it.

The whole string is one assertion:

    exit_code == N          exit code is N (0..255)
    exit_code != N          exit code is not N
    contains:TEXT           stdout or stderr contains TEXT (case-sensitive)
    stdout_regex:RE         re.search(RE, stdout), MULTILINE
    stderr_regex:RE         re.search(RE, stderr), MULTILINE
    json_has_keys:a,b.c     stdout (or its last non-empty line) is a JSON object with these keys
    anything else           case-insensitive substring of stdout + stderr

A near-miss (`exitcode == 0`, `contain:x`) is refused with a "did you mean", not read as a
substring that would never match.
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from code_runner.problems import clip, encodable


class AssertionKind(StrEnum):
    EXIT_CODE_EQ = "exit_code_eq"
    EXIT_CODE_NE = "exit_code_ne"
    CONTAINS = "contains"
    STDOUT_REGEX = "stdout_regex"
    STDERR_REGEX = "stderr_regex"
    JSON_HAS_KEYS = "json_has_keys"
    SUBSTRING = "substring"


_PREFIXES: dict[str, AssertionKind] = {
    "contains:": AssertionKind.CONTAINS,
    "stdout_regex:": AssertionKind.STDOUT_REGEX,
    "stderr_regex:": AssertionKind.STDERR_REGEX,
    "json_has_keys:": AssertionKind.JSON_HAS_KEYS,
}


_EXIT_RE = re.compile(r"^\s*exit_code\s*(==|!=)\s*([+-]?\d+)\s*$")


_WORD_COLON_RE = re.compile(r"^([A-Za-z][A-Za-z _-]{2,20}):")

# what people write for an exit-code check: `exit code == 0`, `exitcode=0`, `returncode: 0`
_EXIT_NEAR_RE = re.compile(
    r"^\s*(exit[\s_-]*code|exit[\s_-]*status|return[\s_-]*code|rc)\s*(==|!=|=|:|is)?\s*([+-]?\d+)\s*$",
    re.IGNORECASE,
)


_GRAMMAR_HINT = (
    "use `exit_code == N`, `exit_code != N`, `contains:TEXT`, `stdout_regex:RE`, "
    "`stderr_regex:RE`, `json_has_keys:a,b`, or plain text to find in the output"
)


@dataclass(frozen=True)
class Assertion:
    """One parsed assertion. `value` is an int (exit-code kinds), a str, or a key tuple."""

    kind: AssertionKind
    raw: str
    value: int | str | tuple[str, ...]

    def describe(self) -> str:
        """What must be true, in words, for a log line or a dry-run."""
        match self.kind:
            case AssertionKind.EXIT_CODE_EQ:
                return f"exit code is {self.value}"
            case AssertionKind.EXIT_CODE_NE:
                return f"exit code is not {self.value}"
            case AssertionKind.CONTAINS:
                return f"exit 0 and stdout or stderr contains {quote(self.value)}"
            case AssertionKind.STDOUT_REGEX:
                return f"exit 0 and stdout matches /{self.value}/"
            case AssertionKind.STDERR_REGEX:
                return f"exit 0 and stderr matches /{self.value}/"
            case AssertionKind.JSON_HAS_KEYS:
                assert isinstance(self.value, tuple)
                return f"exit 0 and stdout is a JSON object with keys {', '.join(self.value)}"
            case AssertionKind.SUBSTRING:
                return f"exit 0 and the output contains {quote(self.value)} (any case)"


def quote(value: object, limit: int = 80) -> str:
    return repr(clip(str(value), limit))


def parse_assertion(text: str) -> Assertion:
    """Parse an assertion string; raise ValueError saying what is wrong and how to write it.

    A string that starts with `exit_code` but is malformed is an error rather than a plain
    substring: `exit_code = 0` silently searching the output for that text would pass or fail
    for the wrong reason. Likewise a near-miss prefix (`stdout_regx:`) is refused.
    """
    if not isinstance(text, str):
        raise ValueError(f"must be a string; {_GRAMMAR_HINT}")
    if text.strip() == "":
        raise ValueError(f"is empty; {_GRAMMAR_HINT}")
    if text.lstrip().startswith("exit_code") and _EXIT_RE.match(text):
        return _parse_exit(text)
    for prefix, kind in _PREFIXES.items():
        if text.startswith(prefix):
            return _parse_prefixed(text, prefix, kind)
    _refuse_near_miss(text)
    if text.lstrip().startswith("exit_code"):
        return _parse_exit(text)
    return Assertion(AssertionKind.SUBSTRING, text, text.strip())


def _refuse_near_miss(text: str) -> None:
    """A mistyped form (`exit code == 0`, `exit_code=0`, `stdout-regex:`) would be read as
    text to find in the output and pass or fail for the wrong reason: refuse it."""
    exit_like = _EXIT_NEAR_RE.match(text)
    if exit_like:
        op = "!=" if exit_like.group(2) == "!=" else "=="
        raise ValueError(
            f"{quote(text)} is not an assertion this code-runner knows; "
            f"did you mean `exit_code {op} {int(exit_like.group(3))}`?"
        )
    near = _WORD_COLON_RE.match(text)
    if near is None:
        return
    word = re.sub(r"[\s-]+", "_", near.group(1).strip().lower())
    names = [p[:-1] for p in _PREFIXES]
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.8)
    if close:
        raise ValueError(
            f"unknown assertion form '{near.group(1)}:'; did you mean '{close[0]}:'? "
            "(plain text to find in the output must not look like a form)"
        )


def _parse_exit(text: str) -> Assertion:
    match = _EXIT_RE.match(text)
    if not match:
        raise ValueError(
            f"{quote(text)} is not a valid exit-code assertion; "
            "write `exit_code == N` or `exit_code != N` with N from 0 to 255"
        )
    number = int(match.group(2))
    if not 0 <= number <= 255:
        raise ValueError(f"exit code {number} is out of range; use N from 0 to 255")
    kind = AssertionKind.EXIT_CODE_EQ if match.group(1) == "==" else AssertionKind.EXIT_CODE_NE
    return Assertion(kind, text, number)


def _parse_prefixed(text: str, prefix: str, kind: AssertionKind) -> Assertion:
    body = text[len(prefix) :]
    name = prefix[:-1]
    if body.strip() == "":
        raise ValueError(f"`{prefix}` needs something after the colon; {_GRAMMAR_HINT}")
    if kind in (AssertionKind.STDOUT_REGEX, AssertionKind.STDERR_REGEX):
        try:
            re.compile(body, re.MULTILINE)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ValueError(
                f"{name} {quote(body)} is not a valid Python regular expression ({exc}); "
                "fix the pattern (escape literal characters with a backslash)"
            ) from None
        return Assertion(kind, text, body)
    if kind is AssertionKind.JSON_HAS_KEYS:
        keys = tuple(k.strip() for k in body.split(","))
        for key in keys:
            if key == "" or any(part == "" for part in key.split(".")):
                raise ValueError(
                    f"json_has_keys {quote(body)} has an empty key; "
                    "list keys separated by commas, with dots for nesting (a,b.c)"
                )
        return Assertion(kind, text, tuple(dict.fromkeys(keys)))
    return Assertion(kind, text, body)


MAX_DOD_TIMEOUT_S = 86_400.0


def _command(value: str) -> str:
    encodable(value)
    if "\0" in value:
        raise ValueError("contains a NUL byte; remove it")
    if value.strip() == "":
        raise ValueError("is empty; give the shell command that proves the task is done")
    return value


def _assertion(value: str) -> str:
    encodable(value)
    parse_assertion(value)
    return value


Text = Annotated[str, Field(strict=True), AfterValidator(encodable)]

MAX_ARGVS = 50


def show_argvs(argvs: tuple[tuple[str, ...], ...]) -> str:
    """The readable form of an argv list: each word quoted, `&&` between commands. Only for
    people and records; it is never given to a shell."""
    return " && ".join(" ".join(shlex.quote(word) for word in argv) for argv in argvs)


def _argvs(value: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
    if not value:
        raise ValueError("is empty; give at least one command as a list of words")
    if len(value) > MAX_ARGVS:
        raise ValueError(f"has {len(value)} commands; at most {MAX_ARGVS}")
    for number, argv in enumerate(value, 1):
        if not argv or argv[0] == "":
            raise ValueError(f"command {number} names no program; start it with the program")
        for word in argv:
            encodable(word)
            if "\0" in word:
                raise ValueError(f"command {number} has a NUL byte in {clip(word, 40)!r}")
    return value


class DefinitionOfDone(BaseModel):
    """A deterministic command and an assertion about its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: Annotated[Text, AfterValidator(_command)] = Field(
        description="Shell command (run with bash) that proves the task is done, "
        "e.g. 'python -m pytest tests/test_auth.py -q'. With `argv`, leave it out: it is "
        "then only the readable form of the argv list.",
    )
    argv: (
        Annotated[
            tuple[Annotated[tuple[Annotated[str, Field(strict=True)], ...], Field()], ...],
            AfterValidator(_argvs),
        ]
        | None
    ) = Field(
        default=None,
        description="Instead of a shell command: programs with their literal arguments, "
        "run in order WITHOUT a shell (nothing is expanded, quoted or redirected); the "
        "first that fails ends the DoD, and the assertion judges the last one run with the "
        "output of all, e.g. [['python', '-m', 'pytest', '-q']].",
    )
    assertion: Annotated[Text, AfterValidator(_assertion)] = Field(
        description="What must be true of the command's result: 'exit_code == N', "
        "'exit_code != N', 'contains:TEXT', 'stdout_regex:RE', 'stderr_regex:RE', "
        "'json_has_keys:a,b.c', or plain text (case-insensitive substring of the output). "
        "Every form except the exit-code ones also requires exit code 0.",
    )
    timeout_s: Annotated[float, Field(strict=True, allow_inf_nan=False)] = Field(
        default=600.0,
        gt=0,
        le=MAX_DOD_TIMEOUT_S,
        description="Seconds the command may run before it is killed (counts as a failure).",
    )

    @model_validator(mode="before")
    @classmethod
    def _readable_command(cls, data: object) -> object:
        """With `argv`, `command` is its readable form (given or not, it must say the same)."""
        if not isinstance(data, dict) or data.get("argv") is None:
            return data
        try:
            shown = show_argvs(tuple(tuple(argv) for argv in data["argv"]))
        except (TypeError, ValueError):
            return data  # the field's own validation says what is wrong
        given = data.get("command")
        if given is not None and given != shown:
            raise ValueError(
                "give either `command` (a shell command) or `argv` (commands without a "
                "shell), not both"
            )
        return {**data, "command": shown}

    @property
    def parsed_assertion(self) -> Assertion:
        return parse_assertion(self.assertion)

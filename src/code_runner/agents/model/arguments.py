"""A model's tool-call arguments: parsed strictly, then repaired only where that is safe.

Safe repairs keep the model's meaning: a Markdown code fence around the JSON, trailing
commas, the same object sent twice (a known gateway bug), a Python-style literal
(`{'path': 'a.py', 'x': True}`). Anything else, and in particular a truncated object, is
not guessed at: it goes back to the model as an INVALID_ARGS tool error.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"^```[A-Za-z]*\s*(.*?)\s*```$", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


@dataclass(frozen=True)
class ParsedArguments:
    value: dict[str, Any] | None  # None: could not be parsed
    problem: str | None = None  # why not, for the model
    repair: str | None = None  # what was repaired, for the record


def parse_arguments(text: str) -> ParsedArguments:
    stripped = text.strip()
    if stripped == "":
        return ParsedArguments({})  # a call with no arguments
    try:
        return _object(json.loads(stripped), None)
    except json.JSONDecodeError as exc:
        strict_error = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    for name, repair in _REPAIRS:
        candidate = repair(stripped)
        if candidate is not None:
            return _object(candidate, name)
    return ParsedArguments(
        None,
        problem=f"the arguments are not valid JSON ({strict_error}); send one JSON object "
        "with the fields the tool's schema lists",
    )


def _object(value: object, repair: str | None) -> ParsedArguments:
    if not isinstance(value, dict):
        return ParsedArguments(
            None, problem=f"the arguments must be a JSON object, not {type(value).__name__}"
        )
    return ParsedArguments(value, repair=repair)


def _fence(text: str) -> object | None:
    match = _FENCE.match(text)
    return _loads(match.group(1)) if match else None


def _trailing_commas(text: str) -> object | None:
    fixed = _TRAILING_COMMA.sub(r"\1", text)
    return _loads(fixed) if fixed != text else None


def _repeated(text: str) -> object | None:
    """`{...}{...}` where every object is the same: take one."""
    decoder = json.JSONDecoder()
    values: list[object] = []
    index = 0
    while index < len(text):
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            return None
        values.append(value)
        index = end
        while index < len(text) and text[index].isspace():
            index += 1
    if len(values) > 1 and all(v == values[0] for v in values):
        first: object = values[0]
        return first
    return None


def _python_literal(text: str) -> object | None:
    if not text.startswith("{"):
        return None
    try:
        value: object = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    try:
        json.dumps(value)  # only JSON-representable values (no sets, tuples as keys...)
    except (TypeError, ValueError):
        return None
    return value


def _loads(text: str) -> object | None:
    try:
        value: object = json.loads(text)
        return value
    except json.JSONDecodeError:
        return None


_REPAIRS = (
    ("code fence", _fence),
    ("trailing comma", _trailing_commas),
    ("repeated object", _repeated),
    ("python literal", _python_literal),
)

__all__ = ["ParsedArguments", "parse_arguments"]

"""A plan file read as a strict subset of JSON and YAML: the same data whichever is used.

YAML is powerful enough to hide things from a reader (an anchor repeating a block, a merge
key pulling fields from elsewhere, a tag building an object, `no` meaning false), so a plan
may use none of it. The YAML text goes through PyYAML's safe parser event by event (anchors,
aliases, tags, extra documents and depth are refused there, before any node exists), then
the composed node tree is converted by hand: plain scalars stay strings except the exact
JSON literals and JSON-grammar numbers, and anything YAML would silently re-type is refused.
JSON gets the same rules (duplicate keys, non-finite numbers, depth).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from code_runner import problems as inputs

MAX_PLAN_BYTES = 1024 * 1024
MAX_DEPTH = 50
MAX_NUMBER_CHARS = 40

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_JSON_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_LITERALS: dict[str, object] = {"null": None, "true": True, "false": False}
_STR_TAG = "tag:yaml.org,2002:str"
_RETYPED = {
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:bool": "true or false",
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:merge": "a merge key",
}


class DocumentProblem(Exception):
    """The text is not in the plan subset; the message says where and what to write."""


def read_plan_document(path: Path) -> tuple[object, list[str]]:
    """(data, []) or (None, problems) for a plan file. Never raises.

    `.json` is JSON; `.yaml`/`.yml` is YAML; anything else is JSON when it parses as JSON,
    else YAML (JSON is valid YAML, so both readings agree on it).
    """
    text, unreadable = inputs.read_text_file(
        path, what="a plan", max_bytes=MAX_PLAN_BYTES, too_big_hint="split the plan"
    )
    if text is None:
        return None, unreadable
    return parse_plan_text(text, path.suffix.lower())


def parse_plan_text(text: str, suffix: str = "") -> tuple[object, list[str]]:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PLAN_BYTES:
        return None, [f"the plan is over {MAX_PLAN_BYTES} bytes; split the plan"]
    try:
        if suffix == ".json" or (suffix not in {".yaml", ".yml"} and _looks_like_json(text)):
            data = parse_json(text)
        else:
            data = parse_yaml(text)
    except DocumentProblem as exc:
        return None, [str(exc)]
    if data is None:
        return None, ["the file is empty; write a plan (see `code-runner plan schema`)"]
    return data, []


def _looks_like_json(text: str) -> bool:
    return text.lstrip().startswith(("{", "["))


# --- JSON -------------------------------------------------------------------------------


def parse_json(text: str) -> object:  # noqa: C901 - one refusal per JSON feature outside the subset
    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in items:
            if key in out:
                raise DocumentProblem(
                    f"duplicate key {inputs.short(key)}; keep only one (neither wins)"
                )
            out[key] = value
        return out

    def constant(name: str) -> object:
        raise DocumentProblem(f"{name} is not a number a plan may hold; write a finite number")

    def integer(spelled: str) -> int:
        if len(spelled) > MAX_NUMBER_CHARS:
            raise DocumentProblem(f"{inputs.clip(spelled)} is too long a number")
        return int(spelled)

    def floating(spelled: str) -> float:
        value = float(spelled)
        if not math.isfinite(value):
            raise DocumentProblem(f"{inputs.clip(spelled)} is too large; write a finite number")
        return value

    try:
        data = json.loads(
            text,
            object_pairs_hook=pairs,
            parse_constant=constant,
            parse_float=floating,
            parse_int=integer,
        )
    except json.JSONDecodeError as exc:
        raise DocumentProblem(
            f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise DocumentProblem(f"nested deeper than {MAX_DEPTH} levels; flatten it") from None
    except ValueError as exc:
        raise DocumentProblem(f"JSON cannot be read: {inputs.first_line(exc)}") from None
    _check_depth(data)
    return data


def _check_depth(data: object) -> None:
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth + 1 > MAX_DEPTH:
                raise DocumentProblem(f"nested deeper than {MAX_DEPTH} levels; flatten it")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


# --- YAML -------------------------------------------------------------------------------


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"


def parse_yaml(text: str) -> object:
    try:
        _check_events(text)
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = exc.problem or exc.context or "invalid YAML"
        raise DocumentProblem(f"YAML syntax error at {_where(mark)}: {what}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise DocumentProblem(f"YAML cannot be read: {inputs.first_line(exc)}") from None
    except RecursionError:
        raise DocumentProblem(f"nested deeper than {MAX_DEPTH} levels; flatten it") from None
    return None if node is None else _convert(node)


def _check_events(text: str) -> None:  # noqa: C901 - one refusal per YAML event outside the subset
    """Refuse every YAML feature outside the subset before a node is composed."""
    depth = 0
    documents = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        where = _where(event.start_mark)
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise DocumentProblem(f"a second YAML document at {where}; a plan is one document")
            if event.explicit and (event.version or event.tags):
                raise DocumentProblem(f"a YAML directive at {where}; remove it")
        if isinstance(event, yaml.AliasEvent):
            raise DocumentProblem(
                f"an alias (*{inputs.clip(str(event.anchor))}) at {where}; "
                "aliases are not allowed in a plan: write the value out"
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise DocumentProblem(
                f"an anchor (&{inputs.clip(str(anchor))}) at {where}; "
                "anchors are not allowed in a plan: remove it"
            )
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise DocumentProblem(
                f"a tag ({inputs.clip(str(tag))}) at {where}; "
                "tags are not allowed in a plan: remove it"
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise DocumentProblem(f"nested deeper than {MAX_DEPTH} levels at {where}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _convert(node: yaml.Node) -> object:
    if isinstance(node, yaml.MappingNode):
        out: dict[str, object] = {}
        for key_node, value_node in node.value:
            key = _key(key_node)
            if key in out:
                raise DocumentProblem(
                    f"duplicate key {inputs.short(key)} at {_where(key_node.start_mark)}; "
                    "keep only one (neither wins)"
                )
            out[key] = _convert(value_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(child) for child in node.value]
    assert isinstance(node, yaml.ScalarNode)
    return _scalar(node)


def _key(node: yaml.Node) -> str:
    where = _where(node.start_mark)
    if not isinstance(node, yaml.ScalarNode):
        raise DocumentProblem(f"a complex key at {where}; keys are plain field names")
    if node.style is None and node.tag == "tag:yaml.org,2002:merge":
        raise DocumentProblem(f"a merge key (<<) at {where}; write the fields out")
    value = _scalar(node)
    if not isinstance(value, str):
        raise DocumentProblem(
            f"the key {inputs.short(node.value)} at {where} is not a string; quote it"
        )
    return value


def _scalar(node: yaml.ScalarNode) -> object:
    text = str(node.value)
    if node.style is not None:  # quoted or block: always a string
        return text
    where = _where(node.start_mark)
    if text == "":
        raise DocumentProblem(f"an empty value at {where}; write null, [] or a quoted string")
    if text in _LITERALS:
        return _LITERALS[text]
    if _JSON_NUMBER.fullmatch(text):
        return _number(text, where)
    retyped = _RETYPED.get(node.tag) if node.tag != _STR_TAG else None
    if retyped:
        raise DocumentProblem(
            f"{inputs.short(text)} at {where} would be read as {retyped} by YAML; "
            "quote it if it is text, or write it as in JSON (null, true, false, 12, 1.5)"
        )
    return text


def _number(text: str, where: str) -> int | float:
    if len(text) > MAX_NUMBER_CHARS:
        raise DocumentProblem(f"{inputs.clip(text)} at {where} is too long a number")
    if _JSON_INT.fullmatch(text):
        return int(text)
    value = float(text)
    if not math.isfinite(value):
        raise DocumentProblem(f"{inputs.clip(text)} at {where} is too large; write a finite number")
    return value

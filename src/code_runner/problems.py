"""Problems with what a user handed in, said in one line each, and the files they come in.

Every input code-runner reads (a task spec, `code-runner.toml`, an exec spec, a scripted
agent's script, a model's tool arguments, a record file read back) can be wrong or hostile.
This module is the one place that turns such input into problems a person can act on:

- `read_mapping_file` reads a JSON, YAML or TOML file with a size cap, UTF-8 checked and
  duplicate keys refused (the last one would silently win), and never raises;
- `anchored_path` reads a path written in such a file relative to the file's directory, so
  the file means the same thing wherever it is run from;
- `describe` turns one pydantic error into one line (the field, what is wrong, what to do),
  with a "did you mean" for unknown fields and bounded quotes of the bad value; `unknown`
  words any other unknown name (a table, a kind, a backend) the same way;
- `short`, `clip` and `one_line` keep messages bounded and on one line.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import reprlib
import stat
import tomllib
from collections.abc import Callable, Hashable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, AliasChoices, BaseModel, Field, ValidationError
from pydantic_core import ErrorDetails

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


_SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}


def encodable(value: str) -> str:
    """Refuse lone surrogates: they cannot be written to the UTF-8 run record."""
    bad = _SURROGATE_RE.search(value)
    if bad:
        raise ValueError(
            f"contains a character that cannot be written as UTF-8 ({bad.group()!a}); remove it"
        )
    return value


Text = Annotated[str, Field(strict=True), AfterValidator(encodable)]
"""A strict string that can be written to the UTF-8 run record."""


_EXPECTED: dict[str, str] = {
    "string_type": "a string",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "tuple_type": "a list",
    "list_type": "a list",
    "iterable_type": "a list",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
    "path_type": "a path (a string)",
    "enum": "one of the listed values",
}


_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = 4
_repr.maxdict = 4
_repr.maxlevel = 2


def short(value: object) -> str:
    """A bounded repr for messages: a 1 MiB string must not become a 1 MiB error."""
    try:
        return _repr.repr(value)
    except Exception:  # a hostile __repr__ must not turn a bad spec into a crash
        return f"<{type(value).__name__}>"


def show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    label = {int: "a whole number", float: "a number", str: "a string"}.get(type(value))
    if isinstance(value, Mapping):
        label = "a mapping"
    elif isinstance(value, list | tuple):
        label = "a list"
    return f"{label or type(value).__name__} {short(value)}"


def dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _field_key(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc if isinstance(p, str))


ModelAt = Callable[[tuple[int | str, ...]], type[BaseModel]]
"""The model whose fields live at a location (the loc of a field, minus the field)."""


def field_names(model: type[BaseModel]) -> list[str]:
    """The names a user writes for `model`'s fields: the first alias where there is one."""
    names = []
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
            name = alias.choices[0]
        elif isinstance(alias, str):
            name = alias
        names.append(name)
    return names


def did_you_mean(name: str, choices: Iterable[str]) -> str | None:
    """The one choice close enough to `name` to be what was meant, if any."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown(what: str, name: str, choices: Iterable[str], *, otherwise: str) -> str:
    """`unknown WHAT 'name'; did you mean 'x'?`, or `...; OTHERWISE` when nothing is close.

    Every unknown name a user can write (a field, a table, a kind, a backend) is worded so.
    """
    close = did_you_mean(name, choices)
    if close is not None:
        return f"unknown {what} '{clip(name)}'; did you mean '{close}'?"
    return f"unknown {what} '{clip(name)}'; {otherwise}"


def _unknown_field(loc: tuple[int | str, ...], at: tuple[int | str, ...], model_at: ModelAt) -> str:
    parent, name = loc[:-1], str(loc[-1])
    valid = field_names(model_at(parent))
    prefix = dotted((*at, *parent)) + "." if (at or parent) else ""
    close = did_you_mean(name, valid)
    if close:
        return f"unknown field '{prefix}{clip(name)}'; did you mean '{prefix}{close}'?"
    return f"unknown field '{prefix}{clip(name)}'; remove it (valid fields: {', '.join(valid)})"


def one_line(text: str) -> str:
    """A problem is one line even when it quotes a path with a newline in it."""
    return CONTROL_RE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def clip(text: str, limit: int = 60, *, marker: str = "...") -> str:
    """`text` if it has at most `limit` characters, else its start and `marker` in `limit`."""
    return text if len(text) <= limit else text[: max(limit - len(marker), 0)] + marker


def _description(loc: tuple[int | str, ...], model_at: ModelAt) -> str:
    fields = model_at(loc[:-1]).model_fields
    info = fields.get(str(loc[-1]))
    return (info.description or "") if info else ""


def _enum_choices(error: ErrorDetails) -> str:
    """Pydantic's "'a' or 'b'" as "one of: 'a', 'b'" (each enum field lists its own)."""
    listed = str((error.get("ctx") or {}).get("expected", ""))
    return "one of: " + listed.replace(" or ", ", ") if listed else _EXPECTED["enum"]


def describe(  # noqa: C901 - one sentence per pydantic error type
    error: ErrorDetails,
    *,
    model_at: ModelAt,
    fixes: Mapping[str, str] | None = None,
    at: tuple[int | str, ...] = (),
) -> str:
    """One pydantic error as one line: the field, what is wrong, what to do.

    `model_at` names the model at a location (for "did you mean" and field descriptions);
    `fixes` maps a dotted field name to what to do when its value is wrong; `at` is where the
    validated value sits in its file (`backends.local`), shown before every field name.
    """
    loc = tuple(error["loc"])
    kind = error["type"]
    value = error.get("input")
    field = dotted((*at, *loc))
    fix = (fixes or {}).get(_field_key(loc))
    if kind == "extra_forbidden" and loc:
        return _unknown_field(loc, at, model_at)
    if kind == "string_unicode":
        return f"{field}: contains a character that cannot be written as UTF-8; remove it"
    if kind == "invalid_key":
        return f"field names must be strings; got {show(value)}"
    if kind == "missing":
        described = _description(loc, model_at).rstrip(".")
        if described:
            described = described[:1].lower() + described[1:]
            return f"{field}: is required but missing; add it ({described})"
        return f"{field}: is required but missing; add it"
    if kind == "value_error":
        ctx = error.get("ctx") or {}
        message = str(ctx.get("error", error["msg"]))
        return f"{field}: {message}" if field else message
    if kind in _EXPECTED:
        hint = fix or ""
        if kind == "string_type" and isinstance(value, int | float | bool):
            hint = "put it in quotes"
        expected = _enum_choices(error) if kind == "enum" else _EXPECTED[kind]
        line = f"{field}: expected {expected}, got {show(value)}"
        return f"{line}; {hint}" if hint else line
    message = error["msg"]
    if kind == "string_pattern_mismatch":
        message = "is not in the allowed form"
    elif kind == "string_too_short" and value == "":
        message = "is empty"
    message = message[:1].lower() + message[1:]
    line = f"{field}: {message} (got {show(value)})" if field else f"{message} (got {show(value)})"
    return f"{line}; {fix}" if fix else line


def describe_all(
    exc: ValidationError,
    *,
    model_at: ModelAt,
    fixes: Mapping[str, str] | None = None,
    at: tuple[int | str, ...] = (),
) -> list[str]:
    """Every error of a validation as one line each, duplicates dropped, order kept."""
    lines = [
        one_line(describe(error, model_at=model_at, fixes=fixes, at=at))
        for error in exc.errors(include_url=False)
    ]
    return list(dict.fromkeys(lines))


def single_model(model: type[BaseModel]) -> ModelAt:
    """`model_at` for a flat model: every location belongs to it."""
    return lambda _parent: model


def read_text_file(
    path: Path, *, what: str, max_bytes: int, too_big_hint: str = ""
) -> tuple[str | None, list[str]]:
    """(UTF-8 text, []) or (None, fatal problems): the size cap and the UTF-8 check that every
    input file goes through before it is parsed. Never raises, and never blocks: a FIFO, a
    socket or a device is refused without being read (opened non-blocking, then checked)."""
    try:
        raw = _read_regular(path, what=what, max_bytes=max_bytes, too_big_hint=too_big_hint)
    except _Unreadable as exc:
        return None, [str(exc)]
    except FileNotFoundError:
        return None, ["the file does not exist; check the path"]
    except IsADirectoryError:
        return None, [f"is a directory; give the path of {what} (.json, .yaml or .toml)"]
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        return None, [f"the file cannot be read ({reason}); check the path and permissions"]
    try:
        return raw.decode("utf-8-sig"), []
    except UnicodeDecodeError as exc:
        return None, [
            f"the file is not UTF-8 text (bad byte at offset {exc.start}); save it as UTF-8"
        ]


class _Unreadable(Exception):
    pass


def _read_regular(path: Path, *, what: str, max_bytes: int, too_big_hint: str) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; `_Unreadable` saying why not."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(info.st_mode):
            raise _Unreadable(
                f"is not a regular file (a {_kind(info.st_mode)}); give the path of {what}"
                " saved as a file"
            )
        hint = f" ({too_big_hint})" if too_big_hint else ""
        if info.st_size > max_bytes:
            raise _Unreadable(
                f"the file is {info.st_size} bytes; {what} is at most {max_bytes} bytes{hint}"
            )
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:  # the file grew between stat and read
        raise _Unreadable(
            f"the file is over {max_bytes} bytes; {what} is at most {max_bytes} bytes"
        )
    return raw


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def read_mapping_file(
    path: Path,
    *,
    what: str,
    max_bytes: int,
    too_big_hint: str = "",
    empty_hint: str = "",
    empty_ok: bool = False,
    fmt: str | None = None,
) -> tuple[dict[Any, object] | None, list[str]]:
    """(mapping, problems to report) or (None, fatal problems). Never raises.

    The format is `fmt` ("json", "yaml" or "toml") or follows the suffix (.json, .yaml/.yml,
    .toml); any other suffix is tried as JSON, then YAML. Duplicate keys are problems, not a
    silent last-one-wins. An empty file is a problem unless `empty_ok` (then it is `{}`).
    """
    text, unreadable = read_text_file(
        path, what=what, max_bytes=max_bytes, too_big_hint=too_big_hint
    )
    if text is None:
        return None, unreadable
    fmt = fmt or _SUFFIXES.get(path.suffix.lower())
    duplicates: list[tuple[Any, str]] = []
    try:
        data = _parse(text, fmt, duplicates)
    except _SyntaxProblem as exc:
        return None, [str(exc)]
    if data is None:
        if empty_ok:
            return {}, []
        return None, [f"the file is empty; {empty_hint or f'write {what}'}"]
    if not isinstance(data, dict):
        return None, [f"the top level must be a mapping of field names to values, got {show(data)}"]
    problems = [
        f"duplicate key {short(key)}{where}; keep only one (the last one would silently win)"
        for key, where in dict.fromkeys(duplicates)
    ]
    return data, problems


def anchored_path(text: str, base_dir: Path | None, *, what: str = "a path") -> Path:
    """A path written in an input file: `~` expanded, relative to `base_dir` (the file's
    directory; the cwd when None), absolute and normalised without resolving symlinks (the
    user's spelling is kept). ValueError saying what to fix for an unusable one."""
    if text.strip() == "":
        raise ValueError(f"is empty; give {what}")
    if "\0" in text:
        raise ValueError("contains a NUL byte; remove it")
    encodable(text)
    anchor = base_dir if base_dir is not None else Path.cwd()
    # os.path.expanduser, not Path.expanduser: the latter raises for an unknown `~user`.
    expanded = os.path.expanduser(text)
    return Path(os.path.normpath(Path.cwd() / anchor / expanded))


class _SyntaxProblem(Exception):
    pass


def _parse(text: str, fmt: str | None, duplicates: list[tuple[Any, str]]) -> object:
    if fmt == "json":
        return _parse_json(text, duplicates)
    if fmt == "yaml":
        return _parse_yaml(text, duplicates)
    if fmt == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _SyntaxProblem(f"TOML syntax error: {exc}; fix the file") from None
    try:
        return _parse_json(text, duplicates)
    except _SyntaxProblem as json_problem:
        duplicates.clear()
        try:
            return _parse_yaml(text, duplicates)
        except _SyntaxProblem as yaml_problem:
            raise _SyntaxProblem(
                f"not valid JSON ({json_problem}) nor YAML ({yaml_problem}); fix the file "
                "or name it .json, .yaml or .toml"
            ) from None


def _parse_json(text: str, duplicates: list[tuple[Any, str]]) -> object:
    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in items:
            if key in out:
                duplicates.append((key, ""))
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise _SyntaxProblem(
            f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise _SyntaxProblem(f"JSON cannot be read: {exc}") from None


class _DuplicateKeyLoader(yaml.SafeLoader):
    """SafeLoader that records duplicate mapping keys instead of letting the last one win."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicate_keys: list[tuple[Any, str]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        self.duplicate_keys.append((key, f" (line {key_node.start_mark.line + 1})"))
                    seen.add(key)
                except TypeError:
                    continue
        return super().construct_mapping(node, deep=deep)


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _parse_yaml(text: str, duplicates: list[tuple[Any, str]]) -> object:
    try:
        loader = _DuplicateKeyLoader(text)  # the reader refuses some characters right here
    except yaml.YAMLError as exc:
        raise _SyntaxProblem(f"YAML cannot be read: {first_line(exc)}") from None
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "invalid YAML"
        raise _SyntaxProblem(f"YAML syntax error{where}: {what}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise _SyntaxProblem(f"YAML cannot be read: {first_line(exc)}") from None
    finally:
        loader.dispose()
    duplicates.extend(loader.duplicate_keys)
    return data

"""The task contract: what a run is asked to do, validated before anything is created.

A bad spec must cost the user one edit, not five: `load_spec` and `validate_spec_data`
collect every problem (file syntax, unknown or mistyped fields, unsafe paths, an output dir
inside the source, a cwd that is not a git repo) and raise one `SpecError` listing them
all, one line each, naming the field and what to do. Pydantic does the type work; its
errors are translated here, so a user never sees a traceback or a pydantic dump.

Paths in a spec file are resolved against the spec file's directory (not the caller's
cwd), so a spec means the same thing wherever it is run from; `~` is expanded and the
stored paths are absolute.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import reprlib
import tomllib
from collections.abc import Hashable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from code_runner import gitx, policy, verify
from code_runner.errors import CodeRunnerError, SpecError
from code_runner.sandbox import ResourceLimits, SandboxMode

MAX_SPEC_BYTES = 1024 * 1024
MAX_DOD_TIMEOUT_S = 86_400.0
MAX_RUN_TIMEOUT_S = 7 * 86_400.0
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
BACKEND_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]*(:.+)?$"
_BACKEND_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_SPEC_SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}


# --- field-level checks (raise ValueError; pydantic turns them into located errors) -----


def _encodable(value: str) -> str:
    """Refuse lone surrogates: they cannot be written to the UTF-8 run record."""
    bad = _SURROGATE_RE.search(value)
    if bad:
        raise ValueError(
            f"contains a character that cannot be written as UTF-8 ({bad.group()!a}); remove it"
        )
    return value


def _non_blank(value: str) -> str:
    if value.strip() == "":
        raise ValueError("is blank; write some text")
    return value


def _repo_path(value: str) -> str:
    _encodable(value)
    problem = policy.path_problem(value)
    if problem:
        raise ValueError(f"{_short(value)} {problem}")
    return value


def _dedupe_paths(entries: tuple[str, ...]) -> tuple[str, ...]:
    """Drop trailing slashes and repeats; order is kept so the record reads like the spec."""
    return tuple(dict.fromkeys(entry.rstrip("/") for entry in entries))


def _non_empty_allowlist(entries: tuple[str, ...]) -> tuple[str, ...]:
    if not entries:
        raise ValueError(
            "is empty; list at least one repo-relative file or directory the agent may "
            'change, e.g. ["src/app.py"]'
        )
    return entries


def _backend(value: str) -> str:
    _encodable(value)
    name, colon, arg = value.partition(":")
    if not _BACKEND_NAME_RE.match(name) or (colon and arg.strip() == ""):
        raise ValueError(
            f"{_short(value)} is not a backend; write NAME or NAME:ARG, "
            "e.g. 'scripted:demo.json' or 'openai:gpt-4o-mini'"
        )
    if _CONTROL_RE.search(value):
        raise ValueError("contains a control character; remove it")
    return value


def _command(value: str) -> str:
    _encodable(value)
    if "\0" in value:
        raise ValueError("contains a NUL byte; remove it")
    if value.strip() == "":
        raise ValueError("is empty; give the shell command that proves the task is done")
    return value


def _assertion(value: str) -> str:
    _encodable(value)
    verify.parse_assertion(value)
    return value


def _base(value: str) -> str:
    _encodable(value)
    if value == "" or value.startswith("-") or any(ch.isspace() for ch in value):
        raise ValueError(
            f"{_short(value)} is not a commit-ish; use a branch, tag or commit hash "
            "(no spaces, not starting with '-'), or omit base for the source HEAD"
        )
    if _CONTROL_RE.search(value) or len(value) > 256:
        raise ValueError("is not a commit-ish; use a branch, tag or commit hash")
    return value


def _absolute_path(value: object, base_dir: Path | None) -> object:
    """Expand `~` and anchor a relative path at `base_dir`; leave non-path values alone."""
    if not isinstance(value, str | os.PathLike):
        return value
    text = os.fspath(value)
    if not isinstance(text, str):
        return value
    if text.strip() == "":
        raise ValueError("is empty; give a directory path")
    if "\0" in text:
        raise ValueError("contains a NUL byte; remove it")
    _encodable(text)
    anchor = base_dir if base_dir is not None else Path.cwd()
    # os.path.expanduser, not Path.expanduser: the latter raises for an unknown `~user`.
    expanded = os.path.expanduser(text)
    return _absolute(anchor / expanded)


def _absolute(path: Path) -> Path:
    """Absolute and normalised, without resolving symlinks (the user's spelling is kept)."""
    return Path(os.path.normpath(Path.cwd() / path))


def _context_base_dir(info: ValidationInfo) -> Path | None:
    context = info.context
    if isinstance(context, Mapping):
        base = context.get("base_dir")
        if isinstance(base, Path):
            return base
    return None


Text = Annotated[str, Field(strict=True), AfterValidator(_encodable)]
RepoPath = Annotated[str, Field(strict=True), AfterValidator(_repo_path)]
StrictBool = Annotated[bool, Field(strict=True)]


class DirtyWorktreePolicy(StrEnum):
    """How uncommitted source changes are treated. Only isolation exists: the agent works
    in a disposable checkout of a commit, so the user's uncommitted work is never touched."""

    ISOLATED_WORKTREE = "isolated_worktree"


class DefinitionOfDone(BaseModel):
    """A deterministic command and an assertion about its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: Annotated[Text, AfterValidator(_command)] = Field(
        description="Shell command (run with bash) that proves the task is done, "
        "e.g. 'python -m pytest tests/test_auth.py -q'.",
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

    @property
    def parsed_assertion(self) -> verify.Assertion:
        return verify.parse_assertion(self.assertion)


class TaskSpec(BaseModel):
    """A bounded code task: what to change, where it may change, and how done is proven."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: Annotated[str, Field(strict=True)] = Field(
        pattern=TASK_ID_PATTERN,
        description="Identifier of this run; prefixes every file of the run record "
        "(letters, digits, '.', '_', '-'; at most 128 characters).",
    )
    title: Annotated[Text, AfterValidator(_non_blank)] = Field(
        min_length=1, max_length=200, description="One-line human-readable title."
    )
    prompt: Annotated[Text, AfterValidator(_non_blank)] = Field(
        min_length=1, description="Concrete implementation instruction for the agent."
    )
    backend: Annotated[Text, AfterValidator(_backend)] = Field(
        json_schema_extra={"pattern": BACKEND_PATTERN},
        description="The one agent backend for this run, as NAME or NAME:ARG "
        "(e.g. 'scripted:demo.json', 'openai:gpt-4o-mini').",
    )
    cwd: Path = Field(
        description="The source git repository. Relative paths are resolved against the "
        "spec file's directory. It is never changed by a run (except by the apply step).",
    )
    output_dir: Path = Field(
        description="Directory for the run record; must be outside the source repository. "
        "Relative paths are resolved against the spec file's directory.",
    )
    allowlist: Annotated[
        tuple[RepoPath, ...],
        AfterValidator(_dedupe_paths),
        AfterValidator(_non_empty_allowlist),
    ] = Field(
        json_schema_extra={"minItems": 1},
        description="Repo-relative files or directories the agent may change (a directory "
        "covers everything beneath it; 'src' does not cover 'src_evil').",
    )
    definition_of_done: DefinitionOfDone = Field(
        description="How the runner decides the task is done."
    )
    max_rounds: Annotated[int, Field(strict=True)] = Field(
        default=5, ge=1, le=20, description="Agent rounds before giving up (1 to 20)."
    )
    read_context: Annotated[tuple[RepoPath, ...], AfterValidator(_dedupe_paths)] = Field(
        default=(), description="Extra repo-relative files shown to the agent, read-only."
    )
    dirty_worktree_policy: DirtyWorktreePolicy = Field(
        default=DirtyWorktreePolicy.ISOLATED_WORKTREE,
        description="How uncommitted source changes are treated; only 'isolated_worktree'.",
    )
    apply_to_source: StrictBool = Field(
        default=False,
        description="After the DoD passes in the workspace, apply the patch to the source, "
        "re-run the DoD there, and roll back on failure.",
    )
    commit_on_success: StrictBool = Field(
        default=False,
        description="With apply_to_source: commit the allowlisted paths when the source "
        "DoD passes.",
    )
    rollback_on_failure: StrictBool = Field(
        default=True,
        description="With apply_to_source: restore the allowlisted source paths if the "
        "apply or the source DoD fails.",
    )
    timeout_s: Annotated[float, Field(strict=True, allow_inf_nan=False)] = Field(
        default=3600.0,
        gt=0,
        le=MAX_RUN_TIMEOUT_S,
        description="Wall-clock seconds for the whole run (at most 7 days).",
    )
    base: Annotated[Text, AfterValidator(_base)] | None = Field(
        default=None,
        description="Commit-ish the workspace starts from; default: the source HEAD.",
    )
    sandbox: SandboxMode = Field(
        default=SandboxMode.AUTO,
        description="OS sandbox (bubblewrap) for agent commands and the DoD: 'auto' uses it "
        "when the probe passes and otherwise runs under the command policy (result.json says "
        "which, and why); 'required' fails preflight without it; 'off' never uses it.",
    )
    network: StrictBool = Field(
        default=False,
        description="Let sandboxed commands use the network. Without the sandbox, commands "
        "are not kept off the network.",
    )
    limits: ResourceLimits = Field(
        default_factory=ResourceLimits,
        description="Resource limits of sandboxed commands: memory_mb, processes, "
        "file_size_mb, cpu_s (per process; default: timeout_s), tmp_mb.",
    )

    @field_validator("sandbox", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false

    @field_validator("cwd", "output_dir", mode="before")
    @classmethod
    def _anchor_path(cls, value: object, info: ValidationInfo) -> object:
        return _absolute_path(value, _context_base_dir(info))

    @model_validator(mode="after")
    def _cross_fields(self) -> TaskSpec:
        problems = _cross_field_problems(self.model_dump())
        if problems:
            raise ValueError(problems[0])
        return self

    @property
    def allowlist_policy(self) -> policy.Allowlist:
        return policy.Allowlist.parse(self.allowlist)


def _cross_field_problems(data: Mapping[Any, object]) -> list[str]:
    """Rules between fields, checked on raw data too so they are reported with the rest."""
    problems = []
    if data.get("commit_on_success") is True and data.get("apply_to_source") is not True:
        problems.append(
            "commit_on_success: needs apply_to_source: true (a commit is made only in the "
            "source, after the patch is applied there); set apply_to_source to true or "
            "commit_on_success to false"
        )
    return problems


# --- error translation ----------------------------------------------------------------

_FIX: dict[str, str] = {
    "task_id": "use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or "
    "digit (it prefixes the run record's file names)",
    "title": "give a one-line title of 1 to 200 characters",
    "prompt": "give the agent a concrete instruction",
    "max_rounds": "use a whole number from 1 to 20",
    "timeout_s": f"use a number of seconds above 0 and at most {MAX_RUN_TIMEOUT_S:.0f} (7 days)",
    "definition_of_done.timeout_s": "use a number of seconds above 0 and at most "
    f"{MAX_DOD_TIMEOUT_S:.0f} (1 day)",
    "dirty_worktree_policy": "use 'isolated_worktree' (the only supported policy)",
    "allowlist": 'write a list of repo-relative paths, e.g. ["src/app.py", "tests/"]',
    "read_context": 'write a list of repo-relative paths, e.g. ["docs/api.md"]',
    "definition_of_done": "write a mapping with `command` and `assertion` "
    "(and optionally `timeout_s`)",
    "sandbox": "use 'auto', 'required' or 'off'",
    "network": "use true or false",
    "limits": "write a mapping of memory_mb, processes, file_size_mb, cpu_s, tmp_mb",
}

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
    "enum": "one of: " + ", ".join(repr(p.value) for p in DirtyWorktreePolicy),
}

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = 4
_repr.maxdict = 4
_repr.maxlevel = 2


def _short(value: object) -> str:
    """A bounded repr for messages: a 1 MiB string must not become a 1 MiB error."""
    try:
        return _repr.repr(value)
    except Exception:  # a hostile __repr__ must not turn a bad spec into a crash
        return f"<{type(value).__name__}>"


def _show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    label = {int: "a whole number", float: "a number", str: "a string"}.get(type(value))
    if isinstance(value, Mapping):
        label = "a mapping"
    elif isinstance(value, list | tuple):
        label = "a list"
    return f"{label or type(value).__name__} {_short(value)}"


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _field_key(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc if isinstance(p, str))


def _model_at(parent: tuple[int | str, ...]) -> type[BaseModel]:
    """The model whose fields live at `parent` (the loc of a field, minus the field)."""
    if parent == ("limits",):
        return ResourceLimits
    return DefinitionOfDone if parent == ("definition_of_done",) else TaskSpec


def _unknown_field(loc: tuple[int | str, ...]) -> str:
    parent, name = loc[:-1], str(loc[-1])
    valid = list(_model_at(parent).model_fields)
    prefix = _dotted(parent) + "." if parent else ""
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown field '{prefix}{_clip(name)}'; did you mean '{prefix}{close[0]}'?"
    return f"unknown field '{prefix}{_clip(name)}'; remove it (valid fields: {', '.join(valid)})"


def _one_line(text: str) -> str:
    """A problem is one line even when it quotes a path with a newline in it."""
    return _CONTROL_RE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _description(loc: tuple[int | str, ...]) -> str:
    fields = _model_at(loc[:-1]).model_fields
    info = fields.get(str(loc[-1]))
    return (info.description or "") if info else ""


def _enum_choices(error: ErrorDetails) -> str:
    """Pydantic's "'a' or 'b'" as "one of: 'a', 'b'" (each enum field lists its own)."""
    listed = str((error.get("ctx") or {}).get("expected", ""))
    return "one of: " + listed.replace(" or ", ", ") if listed else _EXPECTED["enum"]


def _problem(error: ErrorDetails) -> str:
    """One pydantic error as one line: the field, what is wrong, what to do."""
    loc = tuple(error["loc"])
    kind = error["type"]
    value = error.get("input")
    field = _dotted(loc)
    fix = _FIX.get(_field_key(loc))
    if kind == "extra_forbidden" and loc:
        return _unknown_field(loc)
    if kind == "string_unicode":
        return f"{field}: contains a character that cannot be written as UTF-8; remove it"
    if kind == "invalid_key":
        return f"field names must be strings; got {_show(value)}"
    if kind == "missing":
        described = _description(loc).rstrip(".")
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
        line = f"{field}: expected {expected}, got {_show(value)}"
        return f"{line}; {hint}" if hint else line
    message = error["msg"]
    if kind == "string_pattern_mismatch":
        message = "is not in the allowed form"
    elif kind == "string_too_short" and value == "":
        message = "is empty"
    message = message[:1].lower() + message[1:]
    line = f"{field}: {message} (got {_show(value)})"
    return f"{line}; {fix}" if fix else line


# --- environment checks ----------------------------------------------------------------


def _usable_path(value: object, base_dir: Path) -> Path | None:
    try:
        path = _absolute_path(value, base_dir)
    except ValueError:
        return None
    return path if isinstance(path, Path) else None


def _realpath(path: Path) -> Path | None:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return None


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _source_problems(data: Mapping[Any, object], base_dir: Path, check_repo: bool) -> list[str]:
    """Problems only the file system and git can reveal: not a repo, output inside it."""
    problems: list[str] = []
    cwd = _usable_path(data.get("cwd"), base_dir)
    output_dir = _usable_path(data.get("output_dir"), base_dir)
    roots: list[Path] = []
    if cwd is not None:
        real_cwd = _realpath(cwd)
        if real_cwd is not None:
            roots.append(real_cwd)
        if check_repo:
            problems.extend(_repo_problems(cwd, data.get("base"), roots))
    if output_dir is not None:
        problems.extend(_output_dir_problems(output_dir, roots))
    return problems


def _repo_problems(cwd: Path, base: object, roots: list[Path]) -> list[str]:
    try:
        repo = gitx.open_source(cwd)
    except CodeRunnerError as exc:
        message = exc.message.removeprefix("cwd ").rstrip(".")
        return [f"cwd: {message}; {exc.fix}" if exc.fix else f"cwd: {message}"]
    except (OSError, ValueError) as exc:
        return [f"cwd: {cwd} cannot be used as a git repository ({exc}); point cwd at one"]
    for root in (repo.work_tree, repo.git_dir):
        real = _realpath(root) if root is not None else None
        if real is not None:
            roots.append(real)
    if isinstance(base, str):
        try:
            _base(base)
        except ValueError:
            return []  # reported by the field check
        found = repo.run("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", check=False)
        if not found.ok:
            return [
                f"base: {_short(base)} is not a commit in the source repo; use a branch, "
                "tag or commit hash that exists there, or omit base for the source HEAD"
            ]
    elif base is None and gitx.head_commit(repo) is None:
        return [
            f"cwd: the source repo {repo.work_tree} has no commits yet; commit something "
            "first (the workspace starts from a commit)"
        ]
    return []


def _output_dir_problems(output_dir: Path, roots: list[Path]) -> list[str]:
    real = _realpath(output_dir)
    if real is None:
        return []
    for root in dict.fromkeys(roots):
        if not _is_within(real, root):
            continue
        if real == root:
            detail = f"it is {root}"
        elif real != output_dir:
            detail = f"it resolves to {real}, under {root}"
        else:
            detail = f"under {root}"
        return [
            f"output_dir: {output_dir} is inside the source repo ({detail}); choose a "
            "directory outside it"
        ]
    if output_dir.exists() and not output_dir.is_dir():
        return [f"output_dir: {output_dir} exists and is not a directory; choose a directory"]
    return []


# --- public API ------------------------------------------------------------------------


def validate_spec_data(
    data: Mapping[str, object], *, base_dir: Path, source: str, check_repo: bool = True
) -> TaskSpec:
    """Validate an already-parsed spec; raise SpecError listing every problem at once."""
    if not isinstance(data, Mapping):
        raise SpecError(
            source,
            [f"the top level must be a mapping of field names to values, got {_show(data)}"],
        )
    base_dir = _absolute(Path(base_dir))
    raw: dict[Any, object] = dict(data)
    problems: list[str] = []
    spec: TaskSpec | None = None
    try:
        spec = TaskSpec.model_validate(raw, context={"base_dir": base_dir})
    except ValidationError as exc:
        problems.extend(_problem(error) for error in exc.errors(include_url=False))
        problems.extend(_cross_field_problems(raw))
    problems.extend(_source_problems(raw, base_dir, check_repo))
    if problems or spec is None:
        lines = [_one_line(p) for p in problems] or ["the spec is not valid"]
        raise SpecError(source, list(dict.fromkeys(lines)))
    return spec


def load_spec(
    path: Path, *, overrides: Mapping[str, object] | None = None, check_repo: bool = True
) -> TaskSpec:
    """Read a JSON, YAML or TOML spec file, apply overrides, validate; SpecError on any problem.

    Overrides (from CLI flags) replace file values before validation; a None value means
    "flag not given" and is skipped; a dotted key ("definition_of_done.timeout_s") sets a
    nested field.
    """
    source = str(path)
    data, problems = _read_spec_file(Path(path))
    problems = [_one_line(p) for p in problems]
    if data is None:
        raise SpecError(source, problems)
    if overrides:
        data = _apply_overrides(data, overrides)
    base_dir = _absolute(Path(path)).parent
    try:
        spec = validate_spec_data(data, base_dir=base_dir, source=source, check_repo=check_repo)
    except SpecError as exc:
        raise SpecError(source, list(dict.fromkeys([*problems, *exc.problems]))) from None
    if problems:
        raise SpecError(source, problems)
    return spec


def _apply_overrides(data: dict[Any, object], overrides: Mapping[str, object]) -> dict[Any, object]:
    merged = dict(data)
    for key, value in overrides.items():
        if value is None:
            continue
        head, dot, tail = key.partition(".")
        if not dot:
            merged[key] = value
            continue
        nested = merged.get(head)
        if nested is None:
            merged[head] = {tail: value}
        elif isinstance(nested, Mapping):
            merged[head] = {**nested, tail: value}
    return merged


def _read_spec_file(path: Path) -> tuple[dict[Any, object] | None, list[str]]:
    """(mapping, non-fatal problems) or (None, fatal problems). Never raises."""
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            return None, [
                f"the file is {size} bytes; a task spec is at most {MAX_SPEC_BYTES} bytes "
                "(put long prompts in read_context files)"
            ]
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, ["the file does not exist; check the path"]
    except IsADirectoryError:
        return None, ["is a directory; give the path of a .json, .yaml or .toml spec file"]
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        return None, [f"the file cannot be read ({reason}); check the path and permissions"]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, [
            f"the file is not UTF-8 text (bad byte at offset {exc.start}); save it as UTF-8"
        ]
    fmt = _SPEC_SUFFIXES.get(path.suffix.lower())
    duplicates: list[tuple[Any, str]] = []
    try:
        data = _parse(text, fmt, duplicates)
    except _SyntaxProblem as exc:
        return None, [str(exc)]
    if data is None:
        return None, ["the file is empty; write the task spec fields (see `code-runner schema`)"]
    if not isinstance(data, dict):
        return None, [
            f"the top level must be a mapping of field names to values, got {_show(data)}"
        ]
    problems = [
        f"duplicate key {_short(key)}{where}; keep only one (the last one would silently win)"
        for key, where in dict.fromkeys(duplicates)
    ]
    return data, problems


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


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _parse_yaml(text: str, duplicates: list[tuple[Any, str]]) -> object:
    try:
        loader = _DuplicateKeyLoader(text)  # the reader refuses some characters right here
    except yaml.YAMLError as exc:
        raise _SyntaxProblem(f"YAML cannot be read: {_first_line(exc)}") from None
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "invalid YAML"
        raise _SyntaxProblem(f"YAML syntax error{where}: {what}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise _SyntaxProblem(f"YAML cannot be read: {_first_line(exc)}") from None
    finally:
        loader.dispose()
    duplicates.extend(loader.duplicate_keys)
    return data


def spec_json_schema() -> dict[str, object]:
    """The JSON Schema of the task contract, for `code-runner schema` and editors."""
    schema: dict[str, object] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **TaskSpec.model_json_schema(),
    }
    schema["title"] = "code-runner task spec"
    schema["description"] = (
        "A bounded code task for `code-runner run`: a prompt, the paths the agent may change "
        "(allowlist), and a deterministic definition of done. Relative cwd/output_dir are "
        "resolved against the spec file's directory."
    )
    return schema


def spec_to_request(spec: TaskSpec) -> dict[str, object]:
    """The spec as JSON-safe data for `{task_id}.request.json` (paths absolute, as validated)."""
    return spec.model_dump(mode="json")

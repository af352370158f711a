"""Reading a task spec: the file, CLI overrides, the model, then the source on disk.

A bad spec must cost the user one edit, not five: `load_spec` and `validate_spec_data`
collect every problem (file syntax, unknown or mistyped fields, unsafe paths, an output dir
inside the source, a cwd that is not a git repo) and raise one `SpecError` listing them
all, one line each, naming the field and what to do.

Paths in a spec file are resolved against the spec file's directory (not the caller's
cwd), so a spec means the same thing wherever it is run from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

import code_runner.task.paths as paths
from code_runner.errors import CodeRunnerError, SpecError
from code_runner.problems import describe_all, one_line, read_mapping_file, short, show
from code_runner.repo import git
from code_runner.sandbox import ResourceLimits
from code_runner.task.env import DodEnv
from code_runner.task.skills import skill_problems
from code_runner.task.spec import (
    MAX_RUN_TIMEOUT_S,
    TaskSpec,
    _absolute,
    _absolute_path,
    _base,
    _cross_field_problems,
)
from code_runner.verify.assertion import MAX_DOD_TIMEOUT_S, DefinitionOfDone

MAX_SPEC_BYTES = 1024 * 1024


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
    "skills": 'write a list of skill folders, e.g. [".skills/review", "~/skills/tdd"]',
    "read_context": 'write a list of repo-relative paths, e.g. ["docs/api.md"]',
    "definition_of_done": "write a mapping with `command` and `assertion` "
    "(and optionally `timeout_s`)",
    "sandbox": "use 'auto', 'required' or 'off'",
    "on_scope": "use 'warn' (report a write outside the allowlist) or 'stop' (end the round)",
    "network": "use true or false",
    "limits": "write a mapping of memory_mb, processes, file_size_mb, cpu_s, tmp_mb, disk_mb",
}


def _model_at(parent: tuple[int | str, ...]) -> type[BaseModel]:
    """The model whose fields live at `parent` (the loc of a field, minus the field)."""
    if parent == ("limits",):
        return ResourceLimits
    if parent == ("env",):
        return DodEnv
    return DefinitionOfDone if parent == ("definition_of_done",) else TaskSpec


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
            problems.extend(_skills_problems(data.get("skills"), cwd))
    if output_dir is not None:
        problems.extend(_output_dir_problems(output_dir, roots))
    return problems


def _skills_problems(entries: object, cwd: Path) -> list[str]:
    """Each named skill read and checked (SKILL.md, its front matter, the size bound)."""
    if not isinstance(entries, list | tuple) or not all(isinstance(e, str) for e in entries):
        return []  # reported by the field check
    usable = [e for e in entries if e.startswith(("/", "~")) or not paths.path_problem(e)]
    return skill_problems(usable, cwd)


def _repo_problems(cwd: Path, base: object, roots: list[Path]) -> list[str]:
    try:
        repo = git.open_source(cwd)
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
                f"base: {short(base)} is not a commit in the source repo; use a branch, "
                "tag or commit hash that exists there, or omit base for the source HEAD"
            ]
    elif base is None and git.head_commit(repo) is None:
        return [
            f"cwd: the source repo {repo.work_tree} has no commits yet; commit something "
            "first (the workspace starts from a commit)"
        ]
    return []


def output_dir_problems(output_dir: Path, repo: git.Repo) -> list[str]:
    """An output directory inside `repo` (its work tree or git dir), or not a directory."""
    roots = [_realpath(root) for root in (repo.work_tree, repo.git_dir) if root is not None]
    return _output_dir_problems(output_dir, [root for root in roots if root is not None])


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


def validate_spec_data(
    data: Mapping[str, object], *, base_dir: Path, source: str, check_repo: bool = True
) -> TaskSpec:
    """Validate an already-parsed spec; raise SpecError listing every problem at once."""
    if not isinstance(data, Mapping):
        raise SpecError(
            source,
            [f"the top level must be a mapping of field names to values, got {show(data)}"],
        )
    base_dir = _absolute(Path(base_dir))
    raw: dict[Any, object] = dict(data)
    problems: list[str] = []
    spec: TaskSpec | None = None
    try:
        spec = TaskSpec.model_validate(raw, context={"base_dir": base_dir})
    except ValidationError as exc:
        problems.extend(describe_all(exc, model_at=_model_at, fixes=_FIX))
        problems.extend(_cross_field_problems(raw))
    problems.extend(_source_problems(raw, base_dir, check_repo))
    if problems or spec is None:
        lines = [one_line(p) for p in problems] or ["the spec is not valid"]
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
    data, problems = read_mapping_file(
        Path(path),
        what="a task spec",
        max_bytes=MAX_SPEC_BYTES,
        too_big_hint="put long prompts in read_context files",
        empty_hint="write the task spec fields (see `code-runner schema`)",
    )
    problems = [one_line(p) for p in problems]
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

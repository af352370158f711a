"""The task contract: what a run is asked to do, validated before anything is created.

A bad spec must cost the user one edit, not five: `load_spec` and `validate_spec_data`
collect every problem (file syntax, unknown or mistyped fields, unsafe paths, an output dir
inside the source, a cwd that is not a git repo) and raise one `SpecError` listing them
all, one line each, naming the field and what to do. Pydantic does the type work; its
errors are translated here, so a user never sees a traceback or a pydantic dump.

Paths in a spec file are resolved against the spec file's directory (not the caller's
cwd), so a spec means the same thing wherever it is run from; `~` is expanded and the
stored paths are absolute."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

import code_runner.task.paths as paths
from code_runner.problems import CONTROL_RE, Text, anchored_path, encodable, short
from code_runner.sandbox import ResourceLimits, SandboxMode
from code_runner.task.env import DodEnv
from code_runner.task.skills import MAX_SKILLS
from code_runner.verify.assertion import DefinitionOfDone

MAX_RUN_TIMEOUT_S = 7 * 86_400.0


TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


BACKEND_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]*(:.+)?$"


_BACKEND_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


def _non_blank(value: str) -> str:
    if value.strip() == "":
        raise ValueError("is blank; write some text")
    return value


def _repo_path(value: str) -> str:
    encodable(value)
    problem = paths.path_problem(value)
    if problem:
        raise ValueError(f"{short(value)} {problem}")
    return value


def _dedupe_paths(entries: tuple[str, ...]) -> tuple[str, ...]:
    """Drop trailing slashes and repeats; order is kept so the record reads like the spec."""
    return tuple(dict.fromkeys(entry.rstrip("/") for entry in entries))


def _skill_path(value: str) -> str:
    encodable(value)
    if value.startswith(("/", "~")):
        if CONTROL_RE.search(value) or "\x00" in value:
            raise ValueError("contains a control character; remove it")
        return value
    return _repo_path(value)


def _few_skills(entries: tuple[str, ...]) -> tuple[str, ...]:
    if len(entries) > MAX_SKILLS:
        raise ValueError(f"names {len(entries)} skills; name at most {MAX_SKILLS}")
    return entries


def _non_empty_allowlist(entries: tuple[str, ...]) -> tuple[str, ...]:
    if not entries:
        raise ValueError(
            "is empty; list at least one repo-relative file or directory the agent may "
            'change, e.g. ["src/app.py"]'
        )
    return entries


def _backend(value: str) -> str:
    encodable(value)
    name, colon, arg = value.partition(":")
    if not _BACKEND_NAME_RE.match(name) or (colon and arg.strip() == ""):
        raise ValueError(
            f"{short(value)} is not a backend; write NAME or NAME:ARG, "
            "e.g. 'scripted:demo.json' or 'openai:gpt-4o-mini'"
        )
    if CONTROL_RE.search(value):
        raise ValueError("contains a control character; remove it")
    return value


def _base(value: str) -> str:
    encodable(value)
    if value == "" or value.startswith("-") or any(ch.isspace() for ch in value):
        raise ValueError(
            f"{short(value)} is not a commit-ish; use a branch, tag or commit hash "
            "(no spaces, not starting with '-'), or omit base for the source HEAD"
        )
    if CONTROL_RE.search(value) or len(value) > 256:
        raise ValueError("is not a commit-ish; use a branch, tag or commit hash")
    return value


def _absolute_path(value: object, base_dir: Path | None) -> object:
    """Expand `~` and anchor a relative path at `base_dir`; leave non-path values alone."""
    if not isinstance(value, str | os.PathLike):
        return value
    text = os.fspath(value)
    if not isinstance(text, str):
        return value
    return anchored_path(text, base_dir, what="a directory path")


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


RepoPath = Annotated[str, Field(strict=True), AfterValidator(_repo_path)]
SkillPath = Annotated[str, Field(strict=True), AfterValidator(_skill_path)]


StrictBool = Annotated[bool, Field(strict=True)]


class ScopePolicy(StrEnum):
    """What a write outside the owned paths does while an agent CLI works: `warn` reports
    it at once (a `scope_expansion` event); `stop` also ends the round. Either way the
    audit drops the write."""

    WARN = "warn"
    STOP = "stop"


class DirtyWorktreePolicy(StrEnum):
    """How uncommitted source changes are treated. Only isolation exists: the agent works
    in a disposable checkout of a commit, so the user's uncommitted work is never touched."""

    ISOLATED_WORKTREE = "isolated_worktree"


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
    skills: Annotated[
        tuple[SkillPath, ...], AfterValidator(_dedupe_paths), AfterValidator(_few_skills)
    ] = Field(
        default=(),
        description="Skill folders (each with a SKILL.md whose front matter gives name and "
        "description) that an agent CLI loads, read-only: a repo-relative folder of the source, "
        "or an absolute or ~ path of your own.",
    )
    on_scope: ScopePolicy = Field(
        default=ScopePolicy.WARN,
        description="Agent CLIs: a write outside the allowlist seen during a round is a "
        "scope_expansion event at once; 'stop' also ends the round, 'warn' lets it go on "
        "(the audit drops the write either way).",
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
    env: DodEnv = Field(
        default_factory=DodEnv,
        description="What the DoD and commands run with: python (a path or 'auto'), "
        "path_prepend (directories first on PATH), vars (a value '$NAME' takes the user's NAME).",
    )
    limits: ResourceLimits = Field(
        default_factory=ResourceLimits,
        description="Resource limits of sandboxed commands: memory_mb, processes, "
        "file_size_mb, cpu_s (per process; default: timeout_s), tmp_mb, disk_mb (the run's "
        "workspace, in total).",
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
    def allowlist_policy(self) -> paths.Allowlist:
        return paths.Allowlist.parse(self.allowlist)


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

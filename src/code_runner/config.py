"""Named backends and budget defaults: `code-runner.toml` in the source repo, else the user's
`$XDG_CONFIG_HOME/code-runner/config.toml`, else the built-ins.

    [budget]                      # defaults for every model backend
    turns_per_round = 40
    cost_per_run_usd = 2.0

    [backends.local]              # used by `backend: local` or `local:OTHER-MODEL`
    kind = "openai"               # the default; later kinds (agent CLIs) add their fields
    base_url = "http://127.0.0.1:8000/v1"
    model = "qwen2.5-coder"
    api_key_env = ""              # this server needs no key
    send_max_tokens = false
    price_in_per_mtok = 0.0
    price_out_per_mtok = 0.0

    [backends.local.budget]       # overrides [budget] for this backend only
    turns_per_round = 20

The first file found is the only one read; the built-in `openai` backend (base URL and
key from the SDK's own `OPENAI_BASE_URL` / `OPENAI_API_KEY`, model from `openai:MODEL`)
exists unless a file redefines it. A file is validated whole: every problem is reported
at once, as a `SpecError`, before anything runs.

A backend entry's `kind` picks its model: `ProviderSettings` holds what every kind that
talks to a model provider shares (endpoint, model, key variable, prices); a kind adds its
own fields in a subclass and one line in `BACKEND_KINDS`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from code_runner.errors import SpecError
from code_runner.problems import (
    describe_all,
    one_line,
    read_mapping_file,
    short,
    single_model,
    unknown,
)

REPO_CONFIG_NAME = "code-runner.toml"
CONFIG_ENV = "CODE_RUNNER_CONFIG"  # an explicit file wins over both places
_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]*$"

PositiveInt = Annotated[int, Field(strict=True, ge=1)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Price = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class BudgetConfig(BaseModel):
    """Limits of one run of a model backend. `None` means no limit (turns always have one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turns_per_round: PositiveInt = 50
    tokens_per_run: PositiveInt | None = None
    cost_per_run_usd: PositiveFloat | None = None
    round_wall_clock_s: PositiveFloat | None = None
    run_wall_clock_s: PositiveFloat | None = None


class ProviderSettings(BaseModel):
    """What every backend kind that talks to a model provider shares."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = "openai"
    base_url: str | None = Field(
        default=None, description="Endpoint; unset: the SDK's OPENAI_BASE_URL or its default."
    )
    model: str | None = Field(default=None, description="Model name; `NAME:MODEL` overrides.")
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description="Name of the environment variable holding the key; '' for no key.",
    )
    headers: dict[str, str] = Field(default_factory=dict)
    request_timeout_s: PositiveFloat = 120.0
    price_in_per_mtok: Price | None = None
    price_out_per_mtok: Price | None = None
    budget: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of [budget] for this backend."
    )

    @property
    def price_known(self) -> bool:
        return self.price_in_per_mtok is not None and self.price_out_per_mtok is not None

    def public(self) -> dict[str, Any]:
        """The settings as recorded in a transcript: names of variables, never values, and
        header names without their values (a gateway's token often travels in one)."""
        data = self.model_dump(mode="json")
        data["headers"] = {name: "(set)" for name in self.headers}
        return data


class OpenAIBackend(ProviderSettings):
    """`kind = "openai"`: the built-in tool loop over an OpenAI-compatible Chat Completions API."""

    kind: Literal["openai"] = "openai"
    extra_body: dict[str, Any] = Field(default_factory=dict)
    send_max_tokens: bool = True  # some gateways reject `max_tokens`
    max_tokens: PositiveInt | None = None
    tool_choice: Literal["auto", "required", "none"] | None = "auto"
    include_usage: bool = True  # ask for the usage chunk (`stream_options.include_usage`)
    retries: Annotated[int, Field(strict=True, ge=0, le=10)] = 3
    retry_backoff_s: Annotated[float, Field(ge=0, le=60, allow_inf_nan=False)] = 1.0
    max_retry_wait_s: Annotated[float, Field(ge=0, le=600, allow_inf_nan=False)] = 60.0
    # a longer SSE line ends the stream as malformed (it would otherwise grow without bound)
    max_stream_line_bytes: Annotated[int, Field(strict=True, ge=1024, le=1 << 30)] = 8 << 20
    # a larger answer (one turn's raw stream) ends the round with `agent_error`
    max_response_bytes: Annotated[int, Field(strict=True, ge=1024, le=1 << 30)] = 16 << 20


class AgentCliSettings(ProviderSettings):
    """What the agent CLI kinds share (`code_runner.agents.cli_agents.settings`); every
    field may also be given, or overridden, in the backend string as `key=value`."""

    bin: str | None = Field(default=None, description="The program; unset: the CLI's name.")
    retries: Annotated[int, Field(strict=True, ge=0, le=5)] | None = None
    idle_timeout_s: PositiveFloat | None = None
    timeout_s: PositiveFloat | None = None
    tmux: bool | None = None


class CodexCliBackend(AgentCliSettings):
    """`kind = "codex-cli"`: `codex exec`, hermetic, its provider from this entry."""

    kind: Literal["codex-cli"] = "codex-cli"
    sandbox: Literal["read-only", "workspace-write", "danger-full-access"] | None = None


class ClaudeCliBackend(AgentCliSettings):
    """`kind = "claude-cli"`: `claude -p`, hermetic; `base_url` is ANTHROPIC_BASE_URL."""

    kind: Literal["claude-cli"] = "claude-cli"
    api_key_env: str = "ANTHROPIC_API_KEY"
    max_turns: PositiveInt | None = None
    tools: list[str] | None = None


class CommandBackend(AgentCliSettings):
    """`kind = "command"`: any program; `command` is its argv (placeholders allowed)."""

    kind: Literal["command"] = "command"
    api_key_env: str = ""
    command: list[str] = Field(min_length=1)
    final_event: str | None = None


# kind -> settings model. A new kind (codex-cli, claude-cli, command) is one line here.
BACKEND_KINDS: dict[str, type[ProviderSettings]] = {
    "openai": OpenAIBackend,
    "codex-cli": CodexCliBackend,
    "claude-cli": ClaudeCliBackend,
    "command": CommandBackend,
}

BUILTIN_BACKENDS: dict[str, ProviderSettings] = {"openai": OpenAIBackend()}


@dataclass(frozen=True)
class Config:
    backends: Mapping[str, ProviderSettings]
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    source: Path | None = None  # the file read; None: built-ins only

    def budget_for(self, backend: ProviderSettings) -> BudgetConfig:
        """[budget] with the backend's own overrides applied (validated at load time)."""
        if not backend.budget:
            return self.budget
        return BudgetConfig.model_validate({**self.budget.model_dump(), **backend.budget})

    @property
    def origin(self) -> str:
        return str(self.source) if self.source else "built-in defaults"


def user_config_path() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "code-runner" / "config.toml"


def config_path(source_dir: Path | None) -> Path | None:
    """The one config file that applies: $CODE_RUNNER_CONFIG, the repo's, the user's, or none."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    candidates = [source_dir / REPO_CONFIG_NAME] if source_dir is not None else []
    candidates.append(user_config_path())
    return next((path for path in candidates if path.is_file()), None)


MAX_CONFIG_BYTES = 1024 * 1024
_TABLES = ("budget", "backends", "plans")  # [plans]: code_runner.plans


def load_config(source_dir: Path | None = None) -> Config:
    """Read and validate the config that applies to a run in `source_dir`."""
    path = config_path(source_dir)
    if path is None:
        return Config(backends=dict(BUILTIN_BACKENDS))
    data, problems = read_mapping_file(
        path, what="a code-runner config", max_bytes=MAX_CONFIG_BYTES, fmt="toml", empty_ok=True
    )
    if data is None:
        named = f"${CONFIG_ENV} names it; " if os.environ.get(CONFIG_ENV) else ""
        raise SpecError(str(path), problems, fix=f"{named}correct the file or its path.")
    return parse_config(data, source=path)


def parse_config(data: Mapping[str, Any], *, source: Path | None = None) -> Config:
    """Validate parsed TOML; SpecError listing every problem at once."""
    problems = [
        unknown(
            "table",
            str(key),
            _TABLES,
            otherwise="remove it (the tables are [budget], [backends.NAME] and [plans])",
        )
        for key in data
        if key not in _TABLES
    ]
    budget = BudgetConfig()
    raw_budget = data.get("budget", {})
    if isinstance(raw_budget, Mapping):
        try:
            budget = BudgetConfig.model_validate(raw_budget)
        except ValidationError as exc:
            problems += _problems(("budget",), BudgetConfig, exc)
    else:
        problems.append("budget: must be a table ([budget])")
    backends: dict[str, ProviderSettings] = dict(BUILTIN_BACKENDS)
    raw_backends = data.get("backends", {})
    if not isinstance(raw_backends, Mapping):
        problems.append("backends: must be tables ([backends.NAME])")
        raw_backends = {}
    for name, entry in raw_backends.items():
        problems += _backend_problems(name, entry, budget, backends)
    if problems:
        raise SpecError(
            str(source) if source else "config",
            [one_line(p) for p in problems],
            fix="correct the entries above (see `code-runner doctor` for the backends in use); "
            "nothing was run.",
        )
    return Config(backends=backends, budget=budget, source=source)


def _backend_problems(
    name: str, entry: object, budget: BudgetConfig, backends: dict[str, ProviderSettings]
) -> list[str]:
    """Validate `[backends.NAME]` into `backends`; the problems found."""
    where = f"backends.{name}"
    if not isinstance(entry, Mapping):
        return [f"{where}: must be a table ([{where}])"]
    if not _valid_name(name):
        return [f"{where}: a backend name is a letter then letters, digits, '.', '_' or '-'"]
    kind = entry.get("kind", "openai")
    model = BACKEND_KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        named = unknown(
            "kind",
            kind if isinstance(kind, str) else short(kind),
            BACKEND_KINDS,
            otherwise=f"the kinds are: {', '.join(BACKEND_KINDS)}",
        )
        return [f"{where}.kind: {named}"]
    problems: list[str] = []
    try:
        backends[name] = model.model_validate(dict(entry))
    except ValidationError as exc:
        problems += _problems(("backends", name), model, exc)
    overrides = entry.get("budget", {})
    if isinstance(overrides, Mapping):
        try:
            BudgetConfig.model_validate({**budget.model_dump(), **overrides})
        except ValidationError as exc:
            problems += _problems(("backends", name, "budget"), BudgetConfig, exc)
    return problems


def _valid_name(name: object) -> bool:
    return isinstance(name, str) and re.match(_NAME_PATTERN, name) is not None


def _problems(at: tuple[str, ...], model: type[BaseModel], exc: ValidationError) -> list[str]:
    return describe_all(exc, model_at=single_model(model), at=at)


def resolve(config: Config, name: str, arg: str | None) -> ProviderSettings | None:
    """The settings `NAME[:MODEL]` names, with MODEL applied; None if NAME is not configured."""
    entry = config.backends.get(name)
    if entry is None:
        return None
    if arg:
        return entry.model_copy(update={"model": arg})
    return entry


__all__ = [
    "BACKEND_KINDS",
    "CONFIG_ENV",
    "REPO_CONFIG_NAME",
    "BudgetConfig",
    "Config",
    "OpenAIBackend",
    "ProviderSettings",
    "config_path",
    "load_config",
    "parse_config",
    "resolve",
    "user_config_path",
]

"""Named backends and budget defaults: the user's `$XDG_CONFIG_HOME/code-runner/config.toml`
(or `$CODE_RUNNER_CONFIG`), over `code-runner.toml` in the source repo, over the built-ins.

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

The user's file wins every name clash (a backend, a [budget] key). A repo's file is
untrusted until the user trusts that exact file (`code-runner trust`, which records its
sha256 under [trust] in the user's file; a changed file needs trusting again). Untrusted,
it may name models, prices and budgets, but not what runs or where keys go: no agent-CLI or
command kind, no `bin`, `command`, `base_url`, `api_key_env` or `headers` (see
`repo_config`). `$CODE_RUNNER_CONFIG` names the user's file and then no repo file is read.
The built-in `openai` backend (base URL and key from the SDK's own `OPENAI_BASE_URL` /
`OPENAI_API_KEY`, model from `openai:MODEL`) exists unless a file redefines it. A file is
validated whole: every problem is reported at once, as a `SpecError`, before anything runs.

A backend entry's `kind` picks its model: `ProviderSettings` holds what every kind that
talks to a model provider shares (endpoint, model, key variable, prices); a kind adds its
own fields in a subclass and one line in `BACKEND_KINDS`.
"""

from __future__ import annotations

import hashlib
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
    auth: Literal["key", "inherit"] | None = None  # inherit: the user's own CLI login file
    no_progress_s: PositiveFloat | None = None
    repeat_failures: Annotated[int, Field(strict=True, ge=2, le=1000)] | None = None


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
    source: Path | None = None  # the user's file, else the repo's; None: built-ins only
    sources: tuple[Path, ...] = ()  # every file read, the user's first

    def budget_for(self, backend: ProviderSettings) -> BudgetConfig:
        """[budget] with the backend's own overrides applied (validated at load time)."""
        if not backend.budget:
            return self.budget
        return BudgetConfig.model_validate({**self.budget.model_dump(), **backend.budget})

    @property
    def origin(self) -> str:
        if self.sources:
            return " over ".join(str(path) for path in self.sources)
        return str(self.source) if self.source else "built-in defaults"


def user_config_path() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "code-runner" / "config.toml"


def user_config_file() -> Path:
    """The user's own (trusted) file: $CODE_RUNNER_CONFIG, else the one under XDG_CONFIG_HOME."""
    explicit = os.environ.get(CONFIG_ENV)
    return Path(explicit).expanduser() if explicit else user_config_path()


def config_path(source_dir: Path | None) -> Path | None:
    """The file that decides first: $CODE_RUNNER_CONFIG, the user's, the repo's, or none."""
    user = user_config_file()
    if os.environ.get(CONFIG_ENV) or user.is_file():
        return user
    repo = source_dir / REPO_CONFIG_NAME if source_dir is not None else None
    return repo if repo is not None and repo.is_file() else None


MAX_CONFIG_BYTES = 1024 * 1024
_TABLES = ("budget", "backends", "plans", "trust")  # [plans]: code_runner.plans
TRUST_TABLE = "trust"
# what only a trusted file may set: what runs, where it connects, which secrets it sends
NEEDS_TRUST = ("bin", "command", "base_url", "api_key_env", "headers")
UNTRUSTED_KINDS = ("openai",)


@dataclass(frozen=True)
class RepoConfig:
    """A source repo's `code-runner.toml` and whether the user trusts this exact content."""

    path: Path
    sha256: str
    trusted: bool
    asks: tuple[str, ...]  # what it sets that needs trust, e.g. "backends.x.base_url = '...'"
    shadowed: tuple[str, ...] = ()  # its backend names the user's config overrides

    def describe(self) -> str:
        state = "trusted" if self.trusted else "untrusted"
        asks = "; ".join(self.asks) if self.asks else "nothing that needs trust"
        shadowed = (
            f"; the user's config overrides its backend(s) {', '.join(self.shadowed)}"
            if self.shadowed
            else ""
        )
        return f"{self.path} ({state}, sha256 {self.sha256[:12]}) asks for: {asks}{shadowed}"


def read_toml(path: Path) -> tuple[dict[str, Any], bytes]:
    data, problems = read_mapping_file(
        path, what="a code-runner config", max_bytes=MAX_CONFIG_BYTES, fmt="toml", empty_ok=True
    )
    if data is None:
        named = f"${CONFIG_ENV} names it; " if os.environ.get(CONFIG_ENV) else ""
        raise SpecError(str(path), problems, fix=f"{named}correct the file or its path.")
    return dict(data), path.read_bytes()


def _untrusted(repo: RepoConfig, user_path: Path, data: Mapping[str, Any]) -> SpecError:
    """The refusal of an untrusted repo file, with its other problems too (all at once)."""
    others: list[str] = []
    try:
        parse_config(data, source=repo.path)
    except SpecError as exc:
        others = list(exc.problems)
    return SpecError(
        str(repo.path),
        [f"untrusted, it may not set {ask}" for ask in repo.asks] + others,
        fix=f"read the file; if you trust this exact content, run `code-runner trust "
        f"{repo.path.parent}` (it records the file's sha256 in {user_path}; a changed file "
        "needs trusting again), or remove those entries. Nothing was run.",
    )


def trusted_digests(user_data: Mapping[str, Any] | None = None) -> dict[str, str]:
    """[trust] of the user's file: absolute repo-config path -> "sha256:HEX"."""
    if user_data is None:
        path = user_config_file()
        user_data = read_toml(path)[0] if path.is_file() else {}
    table = user_data.get(TRUST_TABLE, {})
    if not isinstance(table, Mapping):
        return {}
    return {str(k): str(v) for k, v in table.items() if isinstance(v, str)}


def digest(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def trust_key(path: Path) -> str:
    return str(path.resolve())


def asks(data: Mapping[str, Any]) -> list[str]:
    """What a repo file sets that only a trusted file may set."""
    asks = (
        [f"[{TRUST_TABLE}] (only the user's own config can trust)"] if TRUST_TABLE in data else []
    )
    raw = data.get("backends", {})
    for name, entry in raw.items() if isinstance(raw, Mapping) else ():
        if not isinstance(entry, Mapping):
            continue
        kind = entry.get("kind", "openai")
        if kind not in UNTRUSTED_KINDS:
            asks.append(f"backends.{name}.kind = {short(kind)} (runs a program)")
        for key in NEEDS_TRUST:
            if key in entry:
                asks.append(f"backends.{name}.{key} = {short(entry[key])}")
    return asks


def repo_config(
    source_dir: Path | None, user_data: Mapping[str, Any] | None = None
) -> RepoConfig | None:
    """The source repo's config file as the user's trust sees it; None if none is read."""
    if source_dir is None or os.environ.get(CONFIG_ENV):
        return None
    path = source_dir / REPO_CONFIG_NAME
    if not path.is_file():
        return None
    data, content = read_toml(path)
    sha = digest(content)
    trusted = trusted_digests(user_data).get(trust_key(path)) == sha
    user_names = _backend_names(user_data) if user_data is not None else set()
    raw = data.get("backends", {})
    names = set(raw) if isinstance(raw, Mapping) else set()
    return RepoConfig(path, sha, trusted, tuple(asks(data)), tuple(sorted(names & user_names)))


def _backend_names(data: Mapping[str, Any]) -> set[str]:
    raw = data.get("backends", {})
    return {str(name) for name in raw} if isinstance(raw, Mapping) else set()


def _merged(repo: Mapping[str, Any], user: Mapping[str, Any]) -> dict[str, Any]:
    """The repo's tables under the user's: the user's entry or key wins every clash."""
    merged: dict[str, Any] = {k: v for k, v in repo.items() if k != TRUST_TABLE}
    for table, value in user.items():
        below = merged.get(table)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[table] = {**below, **value}
        else:
            merged[table] = value
    return merged


def load_config(source_dir: Path | None = None) -> Config:
    """Read and validate the config that applies to a run in `source_dir`.

    An untrusted repo file that asks for what needs trust is refused (SpecError naming
    `code-runner trust`); nothing it chose is used or contacted.
    """
    user_path = user_config_file()
    user_data: dict[str, Any] = {}
    sources: list[Path] = []
    if os.environ.get(CONFIG_ENV) or user_path.is_file():
        user_data = read_toml(user_path)[0]
        sources.append(user_path)
    repo = repo_config(source_dir, user_data)
    data = user_data
    if repo is not None:
        repo_data = read_toml(repo.path)[0]
        if not repo.trusted and repo.asks:
            raise _untrusted(repo, user_path, repo_data)
        parse_config(user_data, source=user_path)  # each file's problems named by its path
        parse_config(repo_data, source=repo.path)
        data = _merged(repo_data, user_data)
        sources.append(repo.path)
    if not sources:
        return Config(backends=dict(BUILTIN_BACKENDS))
    return parse_config(data, source=sources[0], sources=tuple(sources))


def parse_config(
    data: Mapping[str, Any], *, source: Path | None = None, sources: tuple[Path, ...] = ()
) -> Config:
    """Validate parsed TOML; SpecError listing every problem at once."""
    problems = [
        unknown(
            "table",
            str(key),
            _TABLES,
            otherwise="remove it (the tables are [budget], [backends.NAME], [plans], [trust])",
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
    return Config(backends=backends, budget=budget, source=source, sources=sources)


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
    "RepoConfig",
    "asks",
    "config_path",
    "digest",
    "load_config",
    "parse_config",
    "read_toml",
    "repo_config",
    "resolve",
    "trust_key",
    "trusted_digests",
    "user_config_file",
    "user_config_path",
]

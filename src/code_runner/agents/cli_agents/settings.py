"""How an agent CLI backend is configured: `NAME[:OPTIONS]`, a named config entry, env.

    codex-cli                                   defaults (OPENAI_API_KEY, codex on PATH)
    codex-cli:model=gpt-5 base_url=http://127.0.0.1:8000/v1 api_key_env=MY_KEY
    claude-cli:local                            [backends.local] of code-runner.toml
    claude-cli:backend=local max_turns=12 tools=Read,Edit,Bash tmux=true
    codex-cli:auth=inherit                      your own `codex login`, not a key
    command:idle_timeout_s=60 -- python3 my_agent.py {prompt_file}
    command:./agent.sh                          the prompt in $CODE_RUNNER_PROMPT_FILE

OPTIONS are space-separated `key=value` words (shell quoting applies). A single bare
word names a backend of the config (`code_runner.config`) when one has that name, whose
settings (`base_url`, `model`, `api_key_env`, ...) are the defaults the words then
override; otherwise it is the model (`codex-cli:gpt-5`, like `openai:MODEL`). A config
entry of kind `codex-cli`/`claude-cli`/`command` is also a backend name of its own. For
`command`, the words after `--` (or all words, without `--`) are the program and its
arguments, with `{prompt_file}`, `{prompt}`, `{workspace}` and `{round}` filled in.

Environment defaults: `CODE_RUNNER_CODEX_BIN`, `CODE_RUNNER_CLAUDE_BIN` (the program to
run), `CODE_RUNNER_TMUX=1` (supervise every CLI run in tmux), and
`CODE_RUNNER_CLI_IDLE_TIMEOUT_S`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner import tuning
from code_runner.errors import PreflightError, UsageError

DEFAULT_IDLE_TIMEOUT_S = 300.0
DEFAULT_MAX_TURNS = 40
DEFAULT_CLAUDE_TOOLS = ("Read", "Edit", "Write", "Glob", "Grep", "Bash")
CODEX_SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
AUTH_MODES = ("key", "inherit")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_KEY_RE = re.compile(r"^[a-z_]+=")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CliKind(StrEnum):
    CODEX = "codex-cli"
    CLAUDE = "claude-cli"
    COMMAND = "command"


_PROGRAMS = {CliKind.CODEX: "codex", CliKind.CLAUDE: "claude"}
_BIN_ENV = {CliKind.CODEX: "CODE_RUNNER_CODEX_BIN", CliKind.CLAUDE: "CODE_RUNNER_CLAUDE_BIN"}
_DEFAULT_KEY_ENV = {CliKind.CODEX: "OPENAI_API_KEY", CliKind.CLAUDE: "ANTHROPIC_API_KEY"}
TMUX_ENV = tuning.TMUX_ENV
IDLE_ENV = tuning.CLI_IDLE_TIMEOUT_ENV


@dataclass(frozen=True)
class CliSettings:
    """Everything one CLI backend needs; immutable, recorded in run.json (no secrets)."""

    kind: CliKind
    program: str  # a name on PATH or a path
    command: tuple[str, ...] = ()  # `command` only: the argv template after the program
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None  # the variable's NAME; None or '': no key
    config_backend: str | None = None  # the config entry the defaults came from
    max_turns: int = DEFAULT_MAX_TURNS
    tools: tuple[str, ...] = DEFAULT_CLAUDE_TOOLS
    sandbox: str = "workspace-write"
    retries: int = 0
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    timeout_s: float | None = None  # per round; None: what is left of the run
    grace_s: float = 2.0
    tmux: bool = False
    final_event: str | None = None  # `command`: a JSON line {"type": THIS} marks completion
    auth: str = "key"  # "key": $api_key_env; "inherit": the user's login file (`login`)
    interactive: bool = False  # claude-cli in tmux: the interactive UI (`interactive`)
    no_progress_s: float = 600.0  # output with no change to the tree this long: advisory
    repeat_failures: int = 3  # the same command failing this often: advisory

    def public(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["kind"] = self.kind.value
        data["command"] = list(self.command)
        data["tools"] = list(self.tools)
        return data


_OPTION_KEYS = {
    "backend": "config entry whose base_url/model/api_key_env are the defaults",
    "model": "model name",
    "base_url": "the provider's base URL",
    "api_key_env": "name of the variable holding the API key ('' for none)",
    "bin": "the program to run (name on PATH or path)",
    "max_turns": "claude-cli: --max-turns",
    "tools": "claude-cli: comma-separated tools (Read,Edit,Write,Glob,Grep,Bash)",
    "sandbox": "codex-cli: " + " | ".join(CODEX_SANDBOXES),
    "retries": "model request retries of the CLI (0..5)",
    "idle_timeout_s": "seconds without output before the CLI is killed",
    "timeout_s": "seconds one round of the CLI may take",
    "tmux": "true to run the CLI in a tmux pane (attachable)",
    "final_event": "command: JSON `type` of the line that marks completion",
    "auth": "key (the api_key_env variable) | inherit (your own CLI login file)",
    "no_progress_s": "seconds of output with no change to the work tree before a "
    "no_progress event (advisory)",
    "repeat_failures": "times the same command may fail before a repeating_failure event",
}


def _usage(kind: CliKind, message: str) -> UsageError:
    keys = ", ".join(_OPTION_KEYS)
    return UsageError(
        f"backend {kind.value}: {message}.",
        fix=f"write `{kind.value}:key=value ...` with keys from: {keys} "
        + (
            "(then `-- PROGRAM ARGS`)"
            if kind is CliKind.COMMAND
            else "(or a single config backend name)"
        )
        + "; see `code-runner doctor` for what is installed.",
    )


def split_options(kind: CliKind, arg: str | None) -> tuple[dict[str, str], list[str]]:
    """(`key=value` options, the remaining words) of a backend ARG."""
    if not arg:
        return {}, []
    try:
        words = shlex.split(arg)
    except ValueError as exc:
        raise _usage(kind, f"cannot split {arg!r} into words ({exc})") from None
    if kind is CliKind.COMMAND:
        if "--" in words:
            at = words.index("--")
            option_words, rest = words[:at], words[at + 1 :]
        else:
            option_words, rest = [], words
    else:
        option_words, rest = words, []
        if len(words) == 1 and not _KEY_RE.match(words[0]):
            option_words, rest = [], words  # a bare word: a config entry, or a model
    options: dict[str, str] = {}
    for word in option_words:
        if not _KEY_RE.match(word):
            raise _usage(kind, f"{word!r} is not a key=value option")
        key, _, value = word.partition("=")
        if key not in _OPTION_KEYS:
            raise _usage(kind, f"unknown option {key!r}")
        options[key] = value
    return options, rest


def _number(kind: CliKind, key: str, value: str, low: float, high: float) -> float:
    try:
        number = float(value)
    except ValueError:
        raise _usage(kind, f"{key}={value!r} is not a number") from None
    if not low <= number <= high:
        raise _usage(kind, f"{key}={value} is outside {low:g}..{high:g}")
    return number


def _flag(kind: CliKind, key: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise _usage(kind, f"{key}={value!r} is not true or false")


def _from_config(kind: CliKind, name: str, source_dir: Path | None) -> dict[str, Any]:
    from code_runner import config

    cfg = config.load_config(source_dir)
    entry = config.resolve(cfg, name, None)
    if entry is None:
        raise PreflightError(
            f"backend {kind.value}: {cfg.origin} defines no backend {name!r}.",
            fix=f"add [backends.{name}] (base_url, model, api_key_env) to "
            f"{config.REPO_CONFIG_NAME} in the source repo or to {config.user_config_path()}, "
            f"or use one of: {', '.join(sorted(cfg.backends))}.",
        )
    found: dict[str, Any] = {"config_backend": name}
    for key in ("base_url", "model", "api_key_env"):
        value = getattr(entry, key, None)
        if value is not None:
            found[key] = value
    for key in (
        "max_turns",
        "sandbox",
        "retries",
        "idle_timeout_s",
        "timeout_s",
        "tmux",
        "tools",
        "bin",
        "command",
        "final_event",
        "auth",
        "no_progress_s",
        "repeat_failures",
    ):
        value = getattr(entry, key, None)
        if value is not None:
            found[key] = value
    return found


def _auth(kind: CliKind, values: Mapping[str, Any]) -> str:
    auth = str(values.get("auth", "key"))
    if auth not in AUTH_MODES or (auth == "inherit" and kind is CliKind.COMMAND):
        raise _usage(kind, f"auth={auth!r} is not one of key, inherit (inherit: codex, claude)")
    return auth


def _configured(name: str, source_dir: Path | None) -> bool:
    from code_runner import config

    return name in config.load_config(source_dir).backends


def resolve(
    kind: CliKind,
    arg: str | None,
    *,
    source_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    config_name: str | None = None,
) -> CliSettings:
    """The settings of `kind` from defaults, env, the config entry, then ARG's options.

    `config_name`: the backend was chosen by a config entry of this kind (`backend: NAME`).
    """
    env = os.environ if environ is None else environ
    options, rest = split_options(kind, arg)
    if kind is not CliKind.COMMAND and rest:
        # `codex-cli:local` names a config entry; `codex-cli:gpt-5`, `mycodex:gpt-5` a model
        word = rest.pop()
        if config_name is None and "backend" not in options and _configured(word, source_dir):
            options["backend"] = word
        else:
            options.setdefault("model", word)
    values: dict[str, Any] = {}
    entry_name = options.get("backend") or config_name
    if entry_name:
        values.update(_from_config(kind, entry_name, source_dir))
    values.update({k: v for k, v in options.items() if k != "backend"})
    program = str(values.get("bin") or env.get(_BIN_ENV.get(kind, ""), "") or "")
    command: tuple[str, ...] = ()
    if kind is CliKind.COMMAND:
        words = rest or [str(part) for part in values.get("command") or []]
        if not words:
            raise _usage(kind, "no program to run")
        program, command = words[0], tuple(words[1:])
    program = program or _PROGRAMS[kind]
    idle_default = tuning.cli_idle_timeout_s(env) or DEFAULT_IDLE_TIMEOUT_S
    tools = values.get("tools", DEFAULT_CLAUDE_TOOLS)
    if isinstance(tools, str):
        tools = tuple(t for t in re.split(r"[,\s]+", tools) if t)
    if not tools:
        raise _usage(kind, "tools= lists no tool")
    sandbox = str(values.get("sandbox", "workspace-write"))
    if sandbox not in CODEX_SANDBOXES:
        raise _usage(kind, f"sandbox={sandbox!r} is not one of {', '.join(CODEX_SANDBOXES)}")
    key_env = values.get("api_key_env", _DEFAULT_KEY_ENV.get(kind))
    if key_env and not _ENV_NAME_RE.match(str(key_env)):
        raise _usage(kind, f"api_key_env={key_env!r} is not a variable name")
    auth = _auth(kind, values)
    tmux_value = values.get("tmux", bool(tuning.tmux_default(env)))
    timeout = values.get("timeout_s")
    return CliSettings(
        kind=kind,
        program=program,
        command=command,
        model=str(values["model"]) if values.get("model") else None,
        base_url=str(values["base_url"]) if values.get("base_url") else None,
        api_key_env=str(key_env) if key_env else None,
        config_backend=values.get("config_backend"),
        max_turns=int(
            _number(kind, "max_turns", str(values.get("max_turns", DEFAULT_MAX_TURNS)), 1, 1000)
        ),
        tools=tuple(str(t) for t in tools),
        sandbox=sandbox,
        retries=int(_number(kind, "retries", str(values.get("retries", 0)), 0, 5)),
        idle_timeout_s=_number(
            kind, "idle_timeout_s", str(values.get("idle_timeout_s", idle_default)), 0.5, 86_400
        ),
        timeout_s=_number(kind, "timeout_s", str(timeout), 1, 7 * 86_400) if timeout else None,
        tmux=tmux_value if isinstance(tmux_value, bool) else _flag(kind, "tmux", str(tmux_value)),
        final_event=str(values["final_event"]) if values.get("final_event") else None,
        auth=auth,
        no_progress_s=_number(
            kind, "no_progress_s", str(values.get("no_progress_s", 600)), 1, 7 * 86_400
        ),
        repeat_failures=int(
            _number(kind, "repeat_failures", str(values.get("repeat_failures", 3)), 2, 1000)
        ),
    )


__all__ = [
    "CODEX_SANDBOXES",
    "DEFAULT_CLAUDE_TOOLS",
    "DEFAULT_IDLE_TIMEOUT_S",
    "IDLE_ENV",
    "TMUX_ENV",
    "CliKind",
    "CliSettings",
    "resolve",
    "split_options",
]

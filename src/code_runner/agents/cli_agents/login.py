"""Which login an agent CLI uses: a key from the environment, or the user's own sign-in.

`auth = "key"` (the default) hands the CLI the variable `api_key_env` names. `auth =
"inherit"` is for a user who signed in to the CLI rather than exporting a key: the CLI's
login file, and only that file, is copied into the run's hermetic home (mode 0600) for a
round and removed after it. Config, rules, hooks, plugins and history are never copied.

    codex-cli   $CODEX_HOME/auth.json (default ~/.codex/auth.json)
    claude-cli  $CLAUDE_CONFIG_DIR/.credentials.json (default ~/.claude/.credentials.json)

The record names the mode and the file's path, never its content.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner.agents.cli_agents.settings import CliKind
from code_runner.errors import PreflightError

MAX_LOGIN_BYTES = 1 << 20


class AuthMode(StrEnum):
    KEY = "key"
    INHERIT = "inherit"


_HOME_ENV = {CliKind.CODEX: "CODEX_HOME", CliKind.CLAUDE: "CLAUDE_CONFIG_DIR"}
_DEFAULT_HOME = {CliKind.CODEX: "~/.codex", CliKind.CLAUDE: "~/.claude"}
LOGIN_FILE = {CliKind.CODEX: "auth.json", CliKind.CLAUDE: ".credentials.json"}
_SIGN_IN = {CliKind.CODEX: "codex login", CliKind.CLAUDE: "claude (then /login)"}


def user_login_file(kind: CliKind, environ: Mapping[str, str] | None = None) -> Path | None:
    """The login file the user's own CLI keeps (None for a kind without one)."""
    if kind not in LOGIN_FILE:
        return None
    env = os.environ if environ is None else environ
    home = env.get(_HOME_ENV[kind]) or os.path.expanduser(_DEFAULT_HOME[kind])
    return Path(home) / LOGIN_FILE[kind]


def preflight_login(kind: CliKind) -> Path:
    """The user's login file, or a PreflightError saying how to sign in."""
    found = user_login_file(kind)
    if found is None:
        raise PreflightError(
            f"backend {kind.value} has no login file to inherit.",
            fix="use auth=key with api_key_env=NAME.",
        )
    if not found.is_file():
        raise PreflightError(
            f"backend {kind.value} is to inherit your login (auth=inherit), but {found} does "
            "not exist.",
            fix=f"sign in with `{_SIGN_IN[kind]}` (or set ${_HOME_ENV[kind]} to where your "
            "login is), or use auth=key with an API key variable.",
        )
    return found


def copy_login(kind: CliKind, cli_home: Path) -> Path:
    """The user's login file copied into `cli_home` (0600, never through a symlink)."""
    source = preflight_login(kind)
    data = source.read_bytes()[: MAX_LOGIN_BYTES + 1]
    if len(data) > MAX_LOGIN_BYTES:
        raise PreflightError(
            f"{source} is over {MAX_LOGIN_BYTES} bytes; it is not a login file.",
            fix=f"sign in again with `{_SIGN_IN[kind]}`.",
        )
    target = cli_home / LOGIN_FILE[kind]
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return target


def remove_login(copy: Path | None) -> None:
    if copy is not None:
        with contextlib.suppress(FileNotFoundError):
            copy.unlink()


def describe(kind: CliKind, mode: AuthMode, api_key_env: str | None) -> dict[str, Any]:
    """For run.json: the mode and where the login comes from; never a value."""
    if mode is AuthMode.INHERIT:
        return {
            "mode": mode.value,
            "login_file": str(user_login_file(kind)),
            "copy": "0600 in the run's hermetic home, removed after each round",
        }
    return {"mode": mode.value, "api_key_env": api_key_env}


def login_report(kind: CliKind, mode: AuthMode, api_key_env: str | None) -> dict[str, Any]:
    """For `doctor`: the login a run of this CLI would use, and the other one."""
    login = user_login_file(kind)
    present = bool(login and login.is_file())
    key_set = bool(api_key_env and os.environ.get(api_key_env, "").strip())
    if mode is AuthMode.INHERIT:
        uses = f"your sign-in ({login}, {'present' if present else 'missing'})"
        ready = present
    elif api_key_env:
        uses = f"${api_key_env} ({'set' if key_set else 'not set'})"
        ready = key_set
    else:
        uses, ready = "no key (api_key_env is empty)", True
    return {
        "auth": mode.value,
        "uses": uses,
        "ready": ready,
        "api_key_env": api_key_env,
        "key_set": key_set,
        "login_file": str(login) if login else None,
        "login_present": present,
    }


__all__ = [
    "LOGIN_FILE",
    "AuthMode",
    "copy_login",
    "describe",
    "login_report",
    "preflight_login",
    "remove_login",
    "user_login_file",
]

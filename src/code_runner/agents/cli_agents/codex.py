"""`codex-cli`: OpenAI's Codex CLI (`codex exec --json`), hermetic.

The command line is the one verified against local servers (DESIGN.md): JSON events,
no session files, no user config or rules, a provider of our own speaking the Responses
API with bounded retries, approvals never asked, Codex's `workspace-write` sandbox by
default (with /tmp left out of its writable roots: only the work tree and the run's own
TMPDIR are writable), plugins and unbounded connection retries disabled, analytics off. `CODEX_HOME`
is a fresh directory under the workspace's private HOME; `TMPDIR` (the workspace's tmp
dir) does not contain it. stdin is /dev/null (Codex reads stdin when it is not a TTY).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from code_runner.agents.cli_agents.agent import (
    CliAgent,
    Invocation,
    LaunchRequest,
    install_skills,
    vendor_agent,
)
from code_runner.agents.cli_agents.login import AuthMode, copy_login
from code_runner.agents.cli_agents.settings import CliKind, CliSettings
from code_runner.agents.cli_agents.skill_guard import SkillsGuard
from code_runner.agents.cli_agents.translate import CodexTranslator, Translator
from code_runner.events import EventSink

DEFAULT_BASE_URL = "https://api.openai.com/v1"
PROVIDER = "code_runner"


def _toml_inline(table: Mapping[str, object]) -> str:
    """A TOML inline table; JSON strings, ints and bools are valid TOML values."""
    parts = []
    for key, value in table.items():
        shown = json.dumps(value) if not isinstance(value, bool) else str(value).lower()
        parts.append(f"{key}={shown}")
    return "{" + ",".join(parts) + "}"


class CodexFlavor:
    kind = CliKind.CODEX

    def invocation(self, settings: CliSettings, request: LaunchRequest) -> Invocation:
        codex_home = request.home / ".codex-home"
        codex_home.mkdir(parents=True, exist_ok=True)
        provider: dict[str, object] = {
            "name": "code-runner",
            "base_url": settings.base_url or DEFAULT_BASE_URL,
            "wire_api": "responses",
            "request_max_retries": settings.retries,
            "stream_max_retries": settings.retries,
        }
        secret_names: tuple[str, ...] = ()
        cli_env = {**request.env, "CODEX_HOME": str(codex_home), "NO_COLOR": "1"}
        login_copy = None
        if settings.auth == AuthMode.INHERIT:
            # the user's own `codex login`: its auth.json, alone, in the hermetic home
            provider["requires_openai_auth"] = True
            login_copy = copy_login(CliKind.CODEX, codex_home)
        elif settings.api_key_env:
            provider["env_key"] = settings.api_key_env
            cli_env[settings.api_key_env] = os.environ.get(settings.api_key_env, "")
            secret_names = (settings.api_key_env,)
        argv = [
            request.program,
            "exec",
            "--json",
            "--ephemeral",
            "--skip-git-repo-check",
            "--ignore-user-config",
            "--ignore-rules",
            "--color",
            "never",
            "-C",
            str(request.workspace),
            *(["-m", settings.model] if settings.model else []),
            "-c",
            f"model_provider={PROVIDER}",
            "-c",
            f"model_providers.{PROVIDER}={_toml_inline(provider)}",
            "-c",
            'approval_policy="never"',
            "--sandbox",
            settings.sandbox,
            # /tmp is not the run's: a source repo or a skill folder there stays read-only
            "-c",
            "sandbox_workspace_write.exclude_slash_tmp=true",
            "--disable",
            "plugins",
            "--disable",
            "unbounded_connection_retries",
            "-c",
            "analytics.enabled=false",
            "--",
            request.prompt,
        ]
        skills_dir = install_skills(request, codex_home)
        return Invocation(
            tuple(argv), cli_env, secret_names, skills_dir=skills_dir, login_copy=login_copy
        )

    def translator(self, settings: CliSettings, events: EventSink) -> Translator:
        return CodexTranslator(events)

    def skills_guard(self, settings: CliSettings) -> SkillsGuard:
        # its sandbox leaves CODEX_HOME and every skill folder read-only (not with full access)
        if settings.sandbox == "danger-full-access":
            return SkillsGuard.NONE
        return SkillsGuard.CLI_SANDBOX

    def posture(self, settings: CliSettings) -> dict[str, Any]:
        return {
            "os_sandbox": f"codex {settings.sandbox}",
            "approval_policy": "never",
            "network": "the model provider only"
            if settings.sandbox != "danger-full-access"
            else "unrestricted",
            "config": "hermetic (own CODEX_HOME, user config and rules ignored, ephemeral)",
            "api_key": f"${settings.api_key_env}"
            if settings.api_key_env and settings.auth == AuthMode.KEY
            else None,
        }


def from_arg(
    arg: str | None,
    *,
    base_dir: Path | None = None,
    source_dir: Path | None = None,
    name: str = CliKind.CODEX.value,
    **_context: object,
) -> CliAgent:
    """The registry's factory: `codex-cli[:OPTIONS]` (see `settings`)."""
    return vendor_agent(CliKind.CODEX, CodexFlavor(), arg, source_dir=source_dir, name=name)

"""`claude-cli`: Anthropic's Claude Code (`claude -p --output-format stream-json`), hermetic.

Its own config dir (`CLAUDE_CONFIG_DIR` under the workspace's private HOME), only the
user settings source (that empty dir: no project settings, hooks or MCP servers from the
repo), no session persistence, non-essential traffic, telemetry, error reporting and
auto-update off, retries bounded, `--max-turns`, tools limited to the task's list (the
same list pre-approved, so nothing waits for a permission prompt), and
`--permission-mode acceptEdits`. The key is handed over as ANTHROPIC_API_KEY from the
variable the backend names; stdin is /dev/null. With named skills it runs where they are
read-only mounts (`skill_guard`): it has no OS sandbox of its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import code_runner.agents.cli_agents.interactive as interactive
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
from code_runner.agents.cli_agents.translate import ClaudeTranslator, Translator
from code_runner.events import EventSink

PERMISSION_MODE = "acceptEdits"


def _confined(settings: CliSettings, request: LaunchRequest) -> list[str]:
    """The flags of both modes (`-p` and the interactive UI), from one place: the user
    settings source only, no MCP servers but ours (none), the model, and the tools, each
    pre-approved so nothing waits for a permission prompt."""
    # the Skill tool is how Claude Code lists and loads skills: on when skills are named
    skill_tool = ("Skill",) if request.skills and "Skill" not in settings.tools else ()
    tools = ",".join((*settings.tools, *skill_tool))
    return [
        "--setting-sources",
        "user",
        "--strict-mcp-config",
        *(["--model", settings.model] if settings.model else []),
        "--tools",
        tools,
        "--allowedTools",
        tools,
        "--permission-mode",
        PERMISSION_MODE,
    ]


class ClaudeFlavor:
    kind = CliKind.CLAUDE

    def invocation(self, settings: CliSettings, request: LaunchRequest) -> Invocation:
        config_dir = request.home / ".claude-config"
        config_dir.mkdir(parents=True, exist_ok=True)
        cli_env = {
            **request.env,
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": str(settings.retries),
        }
        secret_names: tuple[str, ...] = ()
        if settings.base_url:
            cli_env["ANTHROPIC_BASE_URL"] = settings.base_url
        login_copy = None
        if settings.auth == AuthMode.INHERIT:
            # the user's own sign-in: its .credentials.json, alone, in the hermetic config dir
            login_copy = copy_login(CliKind.CLAUDE, config_dir)
        elif settings.api_key_env:
            cli_env["ANTHROPIC_API_KEY"] = os.environ.get(settings.api_key_env, "")
            secret_names = ("ANTHROPIC_API_KEY",)
        confined = _confined(settings, request)
        if request.result_file is not None:  # `--tmux --interactive`: the UI, not -p
            interactive.seed_config(config_dir, request.workspace, cli_env.get("ANTHROPIC_API_KEY"))
            cli_env[interactive.RESULT_FILE_ENV] = str(request.result_file)
            cli_env["TERM"] = "xterm-256color"
            cli_env.pop("NO_COLOR", None)
            # the prompt is pasted into the UI once it is ready (see `interactive`)
            argv = [request.program, *confined]
        else:
            argv = [
                request.program,
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--no-session-persistence",
                *confined,
                "--max-turns",
                str(settings.max_turns),
                "--",
                request.prompt,
            ]
        skills_dir = install_skills(request, config_dir)
        return Invocation(
            tuple(argv), cli_env, secret_names, skills_dir=skills_dir, login_copy=login_copy
        )

    def translator(self, settings: CliSettings, events: EventSink) -> Translator:
        return ClaudeTranslator(events)

    def skills_guard(self, settings: CliSettings) -> SkillsGuard:
        return SkillsGuard.READ_ONLY_MOUNT  # no OS sandbox of its own: Bash runs as the runner

    def posture(self, settings: CliSettings) -> dict[str, Any]:
        return {
            "os_sandbox": None,
            "permission_mode": PERMISSION_MODE,
            "tools": list(settings.tools),
            "max_turns": settings.max_turns,
            "config": "hermetic (own CLAUDE_CONFIG_DIR, user settings source only, strict "
            "MCP config, no session persistence)",
            "skills": "read-only mounts (installed copies and their folders)",
            "note": "Bash runs without an OS sandbox; the runner's audit and source "
            "snapshot are the guard"
            if "Bash" in settings.tools
            else None,
            "api_key": f"${settings.api_key_env}"
            if settings.api_key_env and settings.auth == AuthMode.KEY
            else None,
        }


def from_arg(
    arg: str | None,
    *,
    base_dir: Path | None = None,
    source_dir: Path | None = None,
    name: str = CliKind.CLAUDE.value,
    **_context: object,
) -> CliAgent:
    """The registry's factory: `claude-cli[:OPTIONS]` (see `settings`)."""
    return vendor_agent(CliKind.CLAUDE, ClaudeFlavor(), arg, source_dir=source_dir, name=name)

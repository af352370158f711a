"""What `code-runner doctor` says about the agent CLIs: found where, which version, which
login a run would use (a key variable, or the user's own sign-in with auth=inherit), and
what would keep its tools from changing a named skill.

The program is the one a run would use: `$CODE_RUNNER_CODEX_BIN` / `$CODE_RUNNER_CLAUDE_BIN`
when set, else `codex` / `claude` on PATH.
"""

from __future__ import annotations

import os
from typing import Any

import code_runner.agents.cli_agents.skill_guard as skill_guard
from code_runner import proc
from code_runner.agents.cli_agents.agent import Flavor
from code_runner.agents.cli_agents.claude import ClaudeFlavor
from code_runner.agents.cli_agents.codex import CodexFlavor
from code_runner.agents.cli_agents.login import AuthMode, login_report
from code_runner.agents.cli_agents.preflight import find_program
from code_runner.agents.cli_agents.settings import CliKind, resolve
from code_runner.agents.cli_agents.skill_guard import SkillsGuard
from code_runner.errors import CodeRunnerError
from code_runner.repo import git

_CLIS = {
    CliKind.CODEX: ("codex", "CODE_RUNNER_CODEX_BIN", "npm install -g @openai/codex"),
    CliKind.CLAUDE: (
        "claude",
        "CODE_RUNNER_CLAUDE_BIN",
        "npm install -g @anthropic-ai/claude-code@2.1.197",
    ),
}
_VERSION_TIMEOUT_S = 20.0


def _login(kind: CliKind) -> dict[str, Any]:
    """The login a run would use with the default settings (env and built-ins)."""
    try:
        settings = resolve(kind, None)
    except CodeRunnerError as exc:
        return {"uses": None, "ready": False, "problem": exc.message}
    return login_report(kind, AuthMode(settings.auth), settings.api_key_env)


def _skills(kind: CliKind) -> str:
    """What keeps the CLI's tools from a named skill, with the default settings."""
    try:
        settings = resolve(kind, None)
    except CodeRunnerError as exc:
        return f"unknown ({exc.message})"
    flavor: Flavor = CodexFlavor() if kind is CliKind.CODEX else ClaudeFlavor()
    guard = flavor.skills_guard(settings)
    found = skill_guard.problem(guard, kind.value)
    if found is not None:
        return f"not protected: {found}"
    if guard is SkillsGuard.CLI_SANDBOX:
        return f"read-only: the CLI's own sandbox ({settings.sandbox})"
    return "read-only: bind mounts (bubblewrap)"


def cli_report() -> dict[str, dict[str, Any]]:
    report: dict[str, dict[str, Any]] = {}
    for kind, (name, variable, install) in _CLIS.items():
        program = os.environ.get(variable) or name
        path = find_program(program, os.environ.get("PATH"))
        entry: dict[str, Any] = {
            "backend": kind.value,
            "program": program,
            "path": path,
            "found": path is not None,
            "version": None,
            "install": install,
            "override": variable,
            "login": _login(kind),
            "skills": _skills(kind),
        }
        if path is not None:
            env = {**git.hardened_env(), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            result = proc.capture(
                [path, "--version"], cwd=None, env=env, timeout_s=_VERSION_TIMEOUT_S
            )
            lines = (result.stdout or result.stderr).decode("utf-8", "replace").strip().splitlines()
            entry["version"] = lines[0] if lines else None
            entry["ok"] = result.ok
        report[name] = entry
    return report


__all__ = ["cli_report"]

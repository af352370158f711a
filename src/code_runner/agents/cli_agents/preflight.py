"""Before an agent CLI round: its program is installed and its API key is set, or the run
stops with what to install or export."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from code_runner.agents.cli_agents.settings import CliKind, CliSettings
from code_runner.errors import PreflightError


def find_program(program: str, path: str | None) -> str | None:
    """The absolute path of `program` (a name looked up on `path`, or a path)."""
    if os.sep in program:
        candidate = Path(program).expanduser().absolute()  # as named: no symlink resolved
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which(program, path=path)


def preflight_program(settings: CliSettings) -> str:
    found = find_program(settings.program, os.environ.get("PATH"))
    if found is None:
        hint = {
            CliKind.CODEX: "npm install -g @openai/codex (or set CODE_RUNNER_CODEX_BIN)",
            CliKind.CLAUDE: "npm install -g @anthropic-ai/claude-code (or set "
            "CODE_RUNNER_CLAUDE_BIN)",
        }.get(settings.kind, "install it or give its path")
        raise PreflightError(
            f"backend {settings.kind.value}: the program {settings.program!r} is not installed "
            "(not found on PATH).",
            fix=f"{hint}; `code-runner doctor` shows what is found.",
        )
    return found


def preflight_key(settings: CliSettings) -> None:
    name = settings.api_key_env
    if name and not os.environ.get(name, "").strip():
        raise PreflightError(
            f"backend {settings.kind.value} reads its API key from ${name}, which is not set.",
            fix=f"export {name}=... before running, or pass `api_key_env=` (empty) for a "
            "server that needs no key.",
        )


__all__ = ["find_program", "preflight_key", "preflight_program"]

"""What `code-runner doctor` says about the agent CLIs: found where, which version.

The program is the one a run would use: `$CODE_RUNNER_CODEX_BIN` / `$CODE_RUNNER_CLAUDE_BIN`
when set, else `codex` / `claude` on PATH.
"""

from __future__ import annotations

import os
from typing import Any

from code_runner import proc
from code_runner.agents.cli_agents.agent import find_program
from code_runner.agents.cli_agents.settings import CliKind
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

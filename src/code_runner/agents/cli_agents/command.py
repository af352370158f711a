"""`command`: any program as an agent, with the same bounds as the agent CLIs.

    command:python3 my_agent.py {prompt_file}
    command:idle_timeout_s=60 final_event=done -- ./agent.sh --round {round}

The program runs in the workspace with stdin from /dev/null and the command environment
(no secrets unless `api_key_env=NAME` passes one). The prompt is in a file whose path is
`$CODE_RUNNER_PROMPT_FILE`; placeholders in the arguments are filled in: `{prompt_file}`,
`{prompt}` (the text itself), `{workspace}`, `{round}`. It is finished when it exits 0,
or, with `final_event=TYPE`, when it printed a JSON line `{"type": TYPE}`. Every output
line is checked for known failure texts; the tail of its stdout is its final message
(where a RESULT_STATUS block is read).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from code_runner.agents.cli_agents.agent import (
    CliAgent,
    Invocation,
    LaunchRequest,
    named_settings,
)
from code_runner.agents.cli_agents.preflight import preflight_key, preflight_program
from code_runner.agents.cli_agents.settings import CliKind, CliSettings
from code_runner.agents.cli_agents.skill_guard import SkillsGuard
from code_runner.agents.cli_agents.translate import PlainTranslator, Translator
from code_runner.events import EventSink


class CommandFlavor:
    kind = CliKind.COMMAND

    def invocation(self, settings: CliSettings, request: LaunchRequest) -> Invocation:
        values = {
            "{prompt_file}": str(request.prompt_file),
            "{prompt}": request.prompt,
            "{workspace}": str(request.workspace),
            "{round}": str(request.round_index),
        }

        def fill(part: str) -> str:
            if part in values:  # the whole word: the prompt text stays one exact argument
                return values[part]
            for key, value in values.items():
                if key != "{prompt}":
                    part = part.replace(key, value)
            return part

        cli_env = {
            **request.env,
            "CODE_RUNNER_PROMPT_FILE": str(request.prompt_file),
            "CODE_RUNNER_ROUND": str(request.round_index),
            "CODE_RUNNER_WORKSPACE": str(request.workspace),
        }
        secret_names: tuple[str, ...] = ()
        if settings.api_key_env:
            cli_env[settings.api_key_env] = os.environ.get(settings.api_key_env, "")
            secret_names = (settings.api_key_env,)
        argv = (request.program, *(fill(part) for part in settings.command))
        return Invocation(argv, cli_env, secret_names)

    def translator(self, settings: CliSettings, events: EventSink) -> Translator:
        return PlainTranslator(events, final_event=settings.final_event)

    def skills_guard(self, settings: CliSettings) -> SkillsGuard:
        return SkillsGuard.NONE  # installs no skills

    def posture(self, settings: CliSettings) -> dict[str, Any]:
        return {
            "os_sandbox": None,
            "note": "the program runs as you in the workspace; the runner's audit and "
            "source snapshot are the guard",
            "api_key": f"${settings.api_key_env}" if settings.api_key_env else None,
        }


def from_arg(
    arg: str | None,
    *,
    base_dir: Path | None = None,
    source_dir: Path | None = None,
    name: str = CliKind.COMMAND.value,
    **_context: object,
) -> CliAgent:
    """The registry's factory: `command:[OPTIONS --] PROGRAM ARGS...`."""
    settings = named_settings(CliKind.COMMAND, arg, source_dir=source_dir, name=name)
    if base_dir is not None and not os.path.isabs(settings.program) and os.sep in settings.program:
        settings = _anchored(settings, base_dir)
    program = preflight_program(settings)
    preflight_key(settings)
    return CliAgent(CommandFlavor(), settings, program=program)


def _anchored(settings: CliSettings, base_dir: Path) -> CliSettings:
    """A relative program path (`./agent.sh`) means: next to the spec file."""
    from dataclasses import replace

    return replace(settings, program=str((base_dir / settings.program).resolve()))

"""Agent backends, chosen by a short name: `NAME[:ARG]` (e.g. `scripted:fix.json`).

The registry maps a name to the factory that builds the backend from its ARG. Factories
are named by import path and imported only when chosen, so a backend's dependencies
(an HTTP client, an agent CLI probe) cost nothing to runs that do not use it. A new
backend is one line in `_BACKENDS` plus a module with a factory
`(arg: str | None, *, base_dir: Path) -> Agent`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import cast

from code_runner import errors
from code_runner.agents.base import Agent

AgentFactory = Callable[..., Agent]

_CLI = "code_runner.agents.cli_agents"
# name -> "module:function"
_BACKENDS: dict[str, str] = {
    "scripted": "code_runner.agents.scripted:from_arg",
    "openai": "code_runner.agents.model.backend:from_arg",
    "replay": "code_runner.agents.model.replay:from_arg",
    "codex-cli": f"{_CLI}.codex:from_arg",
    "claude-cli": f"{_CLI}.claude:from_arg",
    "command": f"{_CLI}.command:from_arg",
}
# a config entry's `kind` -> the factory that builds it (`NAME` from code-runner.toml)
_KINDS: dict[str, str] = {
    "openai": "code_runner.agents.model.backend:from_arg",
    "codex-cli": f"{_CLI}.codex:from_arg",
    "claude-cli": f"{_CLI}.claude:from_arg",
    "command": f"{_CLI}.command:from_arg",
}


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def parse_backend(backend: str) -> tuple[str, str | None]:
    """Split `NAME[:ARG]`; ARG may itself contain colons (a Windows-style path, a URL)."""
    name, sep, arg = backend.strip().partition(":")
    return name.strip(), (arg if sep and arg else None)


def make_agent(backend: str, *, base_dir: Path, source_dir: Path | None = None) -> Agent:
    """Build the agent `backend` names; ARG paths are relative to `base_dir`.

    A name that is not built in is looked up in the config (`code_runner.config`, which
    `source_dir`'s code-runner.toml may hold). Factories preflight what they can: an
    unknown name, a missing key or an unreachable endpoint is a PreflightError here,
    before any workspace exists.
    """
    name, arg = parse_backend(backend)
    target = _BACKENDS.get(name)
    if target is None:
        from code_runner import config

        configured = config.load_config(source_dir)
        entry = configured.backends.get(name)
        target = _KINDS.get(entry.kind) if entry is not None else None
        if target is None:
            choices = sorted({*available_backends(), *configured.backends})
            raise errors.PreflightError(
                f"unknown backend {backend!r}.",
                fix=f"use one of: {', '.join(choices)} (as NAME or NAME:ARG, e.g. "
                "`scripted:fix.json`, `openai:gpt-4o-mini`), or define it as "
                f"[backends.{name}] in {config.REPO_CONFIG_NAME} ({configured.origin} is used).",
            )
    module_name, _, attr = target.partition(":")
    factory = cast(AgentFactory, getattr(importlib.import_module(module_name), attr))
    return factory(arg, base_dir=base_dir, source_dir=source_dir, name=name)


__all__ = ["Agent", "AgentFactory", "available_backends", "make_agent", "parse_backend"]

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

from code_runner.agents.base import Agent
from code_runner.errors import UsageError

AgentFactory = Callable[..., Agent]

# name -> "module:function". Later: openai, codex-cli, claude-cli, command, replay.
_BACKENDS: dict[str, str] = {
    "scripted": "code_runner.agents.scripted:from_arg",
}


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def parse_backend(backend: str) -> tuple[str, str | None]:
    """Split `NAME[:ARG]`; ARG may itself contain colons (a Windows-style path, a URL)."""
    name, sep, arg = backend.strip().partition(":")
    return name.strip(), (arg if sep and arg else None)


def make_agent(backend: str, *, base_dir: Path) -> Agent:
    """Build the agent `backend` names; ARG paths are relative to `base_dir`."""
    name, arg = parse_backend(backend)
    target = _BACKENDS.get(name)
    if target is None:
        raise UsageError(
            f"unknown backend {backend!r}.",
            fix=f"use one of: {', '.join(available_backends())} (as NAME or NAME:ARG, "
            "e.g. `scripted:fix.json`).",
        )
    module_name, _, attr = target.partition(":")
    factory = cast(AgentFactory, getattr(importlib.import_module(module_name), attr))
    return factory(arg, base_dir=base_dir)


__all__ = ["AgentFactory", "available_backends", "make_agent", "parse_backend"]

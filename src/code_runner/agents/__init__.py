"""Agent backends, chosen by a short name: `NAME[:ARG]` (e.g. `scripted:fix.json`).

A name is looked up, in order, in:

1. `_BACKENDS`, the built-in table (name -> "module:factory");
2. the `code_runner.backends` entry-point group, so an installed package adds a backend the
   way a built-in one is added (`[project.entry-points."code_runner.backends"]`,
   `NAME = "package.module:factory"`);
3. the config (`code_runner.config`): `[backends.NAME]` in `code-runner.toml`, whose `kind`
   is a built-in name;
4. a full import path, `package.module:factory[:ARG]` (the name has a dot in it).

Factories are imported only when chosen, so a backend's dependencies (an HTTP client, an
agent CLI probe) cost nothing to runs that do not use it. Each one is an `AgentFactory`.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from code_runner import errors, problems
from code_runner.agents.base import Agent

ENTRY_POINT_GROUP = "code_runner.backends"


class AgentFactory(Protocol):
    """Builds the agent a backend string names, or raises what is wrong (PreflightError or
    UsageError) before any workspace exists.

    `arg` is what follows `NAME:` (None when nothing does); a relative path in it is relative
    to `base_dir`, the spec file's directory. `source_dir` is the source repo, whose
    `code-runner.toml` may configure the backend. `name` is NAME as written (a config
    entry's name, when the config chose the factory by its `kind`).
    """

    def __call__(
        self, arg: str | None, *, base_dir: Path, source_dir: Path | None, name: str
    ) -> Agent: ...


_CLI = "code_runner.agents.cli_agents"
# The one table: name -> "module:factory". A config entry's `kind` is one of these names.
_BACKENDS: dict[str, str] = {
    "scripted": "code_runner.agents.scripted:from_arg",
    "openai": "code_runner.agents.model.backend:from_arg",
    "replay": "code_runner.agents.model.replay:from_arg",
    "codex-cli": f"{_CLI}.codex:from_arg",
    "claude-cli": f"{_CLI}.claude:from_arg",
    "command": f"{_CLI}.command:from_arg",
}


def available_backends() -> list[str]:
    """The names that need no config: the built-ins and the installed entry points."""
    return sorted({*_BACKENDS, *_entry_points()})


def parse_backend(backend: str) -> tuple[str, str | None]:
    """Split `NAME[:ARG]`; ARG may itself contain colons (a Windows-style path, a URL)."""
    name, sep, arg = backend.strip().partition(":")
    return name.strip(), (arg if sep and arg else None)


def make_agent(backend: str, *, base_dir: Path, source_dir: Path | None = None) -> Agent:
    """Build the agent `backend` names; ARG paths are relative to `base_dir`.

    Factories preflight what they can: an unknown name, a missing key or an unreachable
    endpoint is a PreflightError here, before any workspace exists.
    """
    name, arg = parse_backend(backend)
    factory = _built_in(name) or _installed(name) or _configured(name, source_dir)
    if factory is None and "." in name:
        attr, _, arg = (arg or "").partition(":")
        factory, name = _by_path(name, attr), f"{name}:{attr}"
    if factory is None:
        raise _unknown_backend(name, source_dir)
    return factory(arg or None, base_dir=base_dir, source_dir=source_dir, name=name)


def _built_in(name: str) -> AgentFactory | None:
    target = _BACKENDS.get(name)
    if target is None:
        return None
    module, _, attr = target.partition(":")
    return cast(AgentFactory, getattr(importlib.import_module(module), attr))


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _installed(name: str) -> AgentFactory | None:
    entry = _entry_points().get(name)
    if entry is None:
        return None
    where = f"the entry point {name} = {entry.value!r} ({ENTRY_POINT_GROUP})"
    try:
        loaded = entry.load()
    except (ImportError, AttributeError) as exc:
        raise errors.PreflightError(
            f"backend {name!r}: {where} cannot be loaded ({exc}).",
            fix="reinstall the package that provides it, or choose another backend.",
        ) from None
    return _checked(loaded, where)


def _configured(name: str, source_dir: Path | None) -> AgentFactory | None:
    from code_runner import config

    entry = config.load_config(source_dir).backends.get(name)
    return _built_in(entry.kind) if entry is not None else None


def _by_path(module: str, attr: str) -> AgentFactory:
    where = f"{module}:{attr}"
    if not attr.isidentifier():
        raise errors.PreflightError(
            f"backend {where!r} does not name a factory.",
            fix="write a full import path as `package.module:factory[:ARG]`.",
        )
    try:
        loaded = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise errors.PreflightError(
            f"backend {where!r}: module {module!r} cannot be imported ({exc}).",
            fix="install the package that provides it, or check the spelling.",
        ) from None
    except AttributeError:
        raise errors.PreflightError(
            f"backend {where!r}: module {module!r} has no {attr!r}.",
            fix="name the factory function the module defines.",
        ) from None
    return _checked(loaded, where)


def _checked(loaded: object, where: str) -> AgentFactory:
    if not callable(loaded):
        raise errors.PreflightError(
            f"{where} is not callable, so it cannot build an agent.",
            fix="point it at a factory `(arg, *, base_dir, source_dir, name) -> Agent`.",
        )
    return cast(AgentFactory, loaded)


def _unknown_backend(name: str, source_dir: Path | None) -> errors.PreflightError:
    from code_runner import config

    configured = config.load_config(source_dir)
    choices = sorted({*available_backends(), *configured.backends})
    return errors.PreflightError(
        problems.unknown(
            "backend", name, choices, otherwise="it is not built in, installed or configured"
        ),
        fix=f"use one of: {', '.join(choices)} (as NAME or NAME:ARG, e.g. "
        "`scripted:fix.json`, `openai:gpt-4o-mini`), define it as "
        f"[backends.{name}] in {config.REPO_CONFIG_NAME} ({configured.origin} is used), "
        "or give a full import path `package.module:factory`.",
    )


if TYPE_CHECKING:  # every built-in factory has the registry's call signature
    from code_runner.agents import scripted
    from code_runner.agents.cli_agents import claude, codex, command
    from code_runner.agents.model import backend, replay

    _checked_factories: list[AgentFactory] = [
        scripted.from_arg,
        backend.from_arg,
        replay.from_arg,
        codex.from_arg,
        claude.from_arg,
        command.from_arg,
    ]


__all__ = [
    "ENTRY_POINT_GROUP",
    "Agent",
    "AgentFactory",
    "available_backends",
    "make_agent",
    "parse_backend",
]

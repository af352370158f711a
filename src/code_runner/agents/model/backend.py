"""The `openai` backend: config -> preflight -> a `ModelLoopAgent` over the live API.

`openai:MODEL`, or a name from the config (`local`, `local:OTHER-MODEL`). Everything that
can be known before a workspace exists is checked here, while the runner preflights: the
model is named, the key variable is set, a cost budget has prices, and the endpoint
answers. The key is read once, kept in memory for the SDK, recorded nowhere, and redacted
from anything a tool returns to the model; tool processes never get it (their environment
is built from an allowlist and scrubbed of secret-looking names).
"""

from __future__ import annotations

import os
from pathlib import Path

from code_runner import config
from code_runner.agents.model.budget import Budget
from code_runner.agents.model.client import OpenAIChatClient, effective_base_url, probe
from code_runner.agents.model.loop import ModelLoopAgent
from code_runner.agents.model.refusal import KEY_REFUSED, key_fix
from code_runner.agents.model.transcript import TRANSCRIPT_VERSION, ModelClient, Transcript
from code_runner.errors import PreflightError

PROBE_TIMEOUT_S = 3.0


def resolve_settings(
    name: str, arg: str | None, source_dir: Path | None
) -> tuple[config.OpenAIBackend, config.Config]:
    cfg = config.load_config(source_dir)
    settings = config.resolve(cfg, name, arg)
    if settings is None:
        raise PreflightError(
            f"unknown backend {name!r}: it is not built in and {cfg.origin} does not define it.",
            fix=f"add [backends.{name}] to {config.REPO_CONFIG_NAME} in the source repo or to "
            f"{config.user_config_path()}, or use one of: {', '.join(sorted(cfg.backends))}.",
        )
    if not isinstance(settings, config.OpenAIBackend):
        raise PreflightError(
            f"backend {name!r} is of kind {settings.kind!r}, not a Chat Completions backend.",
            fix="check its `kind` in " + cfg.origin + ".",
        )
    if not settings.model:
        raise PreflightError(
            f"backend {name!r} needs a model and none is set.",
            fix=f"write the backend as `{name}:MODEL` (e.g. `openai:gpt-4o-mini`), or set "
            f"`model` in [backends.{name}] of {cfg.origin if cfg.source else 'a config file'}.",
        )
    return settings, cfg


def api_key(name: str, settings: config.ProviderSettings) -> str | None:
    """The key from the variable the backend names; PreflightError if it is unset."""
    variable = settings.api_key_env
    if not variable:
        return None
    value = os.environ.get(variable, "")
    if not value.strip():
        raise PreflightError(
            f"backend {name!r} reads its API key from ${variable}, which is not set.",
            fix=f'export {variable}=... before running, or set api_key_env = "" in '
            f"[backends.{name}] for a server that needs no key.",
        )
    return value


def from_arg(
    arg: str | None,
    *,
    base_dir: Path,
    source_dir: Path | None = None,
    name: str = "openai",
    **_context: object,
) -> ModelLoopAgent:
    """The registry's factory. Raises PreflightError before anything is created."""
    settings, cfg = resolve_settings(name, arg, source_dir)
    key = api_key(name, settings)
    limits = cfg.budget_for(settings)
    if limits.cost_per_run_usd is not None and not settings.price_known:
        raise PreflightError(
            f"a cost budget of ${limits.cost_per_run_usd:g} is set, but backend {name!r} has "
            "no price, so the cost cannot be counted (an unknown price is never taken as 0).",
            fix=f"set price_in_per_mtok and price_out_per_mtok in [backends.{name}], or "
            "remove cost_per_run_usd.",
        )
    problem = probe(settings, key, timeout_s=PROBE_TIMEOUT_S)
    if problem is not None and problem.startswith(KEY_REFUSED):
        raise PreflightError(
            f"backend {name!r}: {problem}.",
            fix=key_fix(settings.api_key_env, effective_base_url(settings)),
        )
    if problem is not None:
        raise PreflightError(
            f"backend {name!r}: {problem}.",
            fix=f"start the server or correct base_url ({effective_base_url(settings)}) and "
            f"the key in ${settings.api_key_env or '(none)'}; `code-runner doctor` checks "
            "every configured backend.",
        )
    budget = Budget(
        limits,
        price_in_per_mtok=settings.price_in_per_mtok,
        price_out_per_mtok=settings.price_out_per_mtok,
    )

    def make_client(transcript: Transcript) -> ModelClient:
        return OpenAIChatClient(settings, api_key=key, transcript=transcript)

    session = {
        "version": TRANSCRIPT_VERSION,
        "backend": name,
        "backend_kind": settings.kind,
        "base_url": effective_base_url(settings),
        "settings": settings.public(),
        "budget": limits.model_dump(mode="json"),
        "config": cfg.origin,
    }
    return ModelLoopAgent(
        name=name, make_client=make_client, budget=budget, session=session, secrets=[key or ""]
    )


__all__ = ["api_key", "from_arg", "resolve_settings"]

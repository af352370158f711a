"""What `code-runner doctor` says about the configured model backends.

For each backend: its kind, endpoint and model, the name of its key variable and whether
it is set (never its value), and whether the endpoint answers within a short timeout.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from code_runner import config
from code_runner.agents.model.client import effective_base_url, probe

PROBE_TIMEOUT_S = 2.0


def backend_report(source_dir: Path | None) -> dict[str, Any]:
    cfg = config.load_config(source_dir)
    names = sorted(cfg.backends)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(names)))) as pool:
        entries = list(pool.map(lambda n: _entry(n, cfg.backends[n]), names))
    return {"config": cfg.origin, "backends": dict(zip(names, entries, strict=True))}


def _entry(name: str, settings: config.ProviderSettings) -> dict[str, Any]:
    variable = settings.api_key_env
    key = os.environ.get(variable, "") if variable else ""
    entry: dict[str, Any] = {
        "kind": settings.kind,
        "model": settings.model,
        "api_key_env": variable or None,
        "key_set": bool(key.strip()) if variable else None,
        "price_known": settings.price_known,
    }
    if isinstance(settings, config.OpenAIBackend):
        entry["base_url"] = effective_base_url(settings)
        if variable and not key.strip():
            # without its key the backend cannot be used; do not contact its endpoint
            entry["reachable"] = None
            entry["problem"] = f"{variable} is not set, so the endpoint was not contacted"
            return entry
        problem = probe(settings, key or None, timeout_s=PROBE_TIMEOUT_S)
        entry["reachable"] = problem is None
        entry["problem"] = problem
    return entry


__all__ = ["backend_report"]

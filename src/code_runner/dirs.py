"""Where code-runner keeps its own state (workspaces, locks, leases). Never inside a source."""

from __future__ import annotations

import os
from pathlib import Path

STATE_ENV = "CODE_RUNNER_STATE_DIR"


def state_dir() -> Path:
    """`$CODE_RUNNER_STATE_DIR`, else `$XDG_STATE_HOME/code-runner`, else ~/.local/state/...

    Read at call time (never at import) so tests and users can redirect it.
    """
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return (base / "code-runner").resolve()


def workspaces_dir() -> Path:
    return state_dir() / "workspaces"


def locks_dir() -> Path:
    return state_dir() / "locks"

"""Where code-runner keeps its own state (workspaces, locks, leases). Never inside a source."""

from __future__ import annotations

import os
from pathlib import Path

from code_runner.errors import EnvironmentProblem

STATE_ENV = "CODE_RUNNER_STATE_DIR"


def state_dir() -> Path:
    """`$CODE_RUNNER_STATE_DIR`, else `$XDG_STATE_HOME/code-runner`, else ~/.local/state/...

    Read at call time (never at import) so tests and users can redirect it. Created when
    missing; `EnvironmentProblem` (exit 3) when it is not a directory or cannot be made.
    """
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        path, named = Path(explicit).expanduser().resolve(), f"${STATE_ENV}"
    else:
        xdg = os.environ.get("XDG_STATE_HOME")
        base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
        path = (base / "code-runner").resolve()
        named = f"$XDG_STATE_HOME ({xdg})" if xdg else "the default"
    fix = f"point ${STATE_ENV} at a directory code-runner may create and own"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        # a file (or a dangling link) in the way, at the path or at a parent of it
        raise EnvironmentProblem(
            f"the state dir {path} ({named}) is not a directory.", fix=f"{fix}, or move it away."
        ) from None
    except OSError as exc:
        raise EnvironmentProblem(
            f"the state dir {path} ({named}) cannot be created: {exc.strerror or exc}.",
            fix=f"{fix}.",
        ) from None
    return path


def workspaces_dir() -> Path:
    return state_dir() / "workspaces"


def locks_dir() -> Path:
    return state_dir() / "locks"

"""The environment every command in a workspace gets: no secrets, a private HOME and TMPDIR.

Agent commands and every DoD run (in the workspace, a disposable checkout, or the source at
apply time) get the same allowlisted environment, so a verdict reproduces wherever it runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from code_runner import files
from code_runner.proc import RUN_ID_ENV

_ENV_PASSTHROUGH = ("PATH", "LANG", "TZ", "VIRTUAL_ENV", "PYTHONPATH")


def command_env(*, run_id: str, home_dir: Path, tmp_dir: Path) -> dict[str, str]:
    """The environment for tool commands and the DoD: no secrets, a private HOME and TMPDIR."""
    env = {k: os.environ[k] for k in _ENV_PASSTHROUGH if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "HOME": str(home_dir),
            "TMPDIR": str(tmp_dir),
            "LANG": env.get("LANG", "C.UTF-8"),
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            RUN_ID_ENV: run_id,  # lets `gc` find what a killed run left running
        }
    )
    return env


def empty_scratch(*scratch_dirs: Path) -> None:
    """Empty the commands' HOME and TMPDIR before a DoD run without the sandbox.

    Nothing an agent's command left there (a `usercustomize.py` under ~/.local, a git or
    pip config) may steer the verdict; inside the sandbox both are a fresh tmpfs anyway.
    """
    for scratch in scratch_dirs:
        if not scratch.is_dir() or scratch.is_symlink():
            continue
        for entry in list(scratch.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                files.force_rmtree(entry)
            else:
                entry.unlink()

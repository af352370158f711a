"""Runs that land a patch in the source: a source with one file for each kind of change, a
definition of done that can tell the source from the workspace, and the source's whole state."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

from code_runner import runner
from code_runner import task as spec_mod
from tests.helpers.git import git, make_repo
from tests.helpers.tasks import PY, fingerprint, write_task

BINARY = bytes(range(256)) * 4
DOD_SCRIPT = """\
import os, sys, time
args = sys.argv[1:]
ok = bool(eval(args[0]))
in_source = os.path.exists("source-only.flag")  # untracked: only the source has it
print(f"change-present={ok} in-source={in_source}")
if in_source and "--slow-if" in args and os.path.exists(args[args.index("--slow-if") + 1]):
    time.sleep(60)
fail = in_source and "--fail-in-source" in args
sys.exit(0 if ok and not fail else 1)
"""


def matrix_repo(root: Path) -> Path:
    """A source with one file for each kind of change, and a user mid-work in it."""
    source = make_repo(
        root / "source",
        {
            "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n",
            "README.md": "readme\n",
            "old.txt": "old\n",
            "ren_src.txt": "rename me\n",
            "tool.sh": "#!/bin/sh\necho tool\n",
            "data.bin": BINARY,
            "other.txt": "other\n",
            ".gitignore": "*.ignored\n",
            "dod.py": DOD_SCRIPT,  # tracked: the workspace (and any sandbox) sees it too
        },
    )
    git(source, "config", "user.name", "Source User")
    git(source, "config", "user.email", "source@example.com")
    (source / "README.md").write_text("readme, edited by the user\n")  # unrelated, unstaged
    (source / "notes.txt").write_text("the user's untracked notes\n")
    (source / "cache.ignored").write_text("ignored\n")
    (source / "source-only.flag").write_text("present only in the source\n")
    return source


def dod_command(predicate: str, *extra: str) -> str:
    return " ".join([PY, "dod.py", shlex.quote(predicate), *extra])


def run_complete(
    root: Path,
    source: Path,
    calls: list[dict[str, Any]],
    *,
    allowlist: list[str],
    predicate: str,
    extra: tuple[str, ...] = ("--fail-in-source",),
    **spec: Any,
) -> dict[str, Any]:
    spec.setdefault("apply_to_source", True)
    path = write_task(
        root,
        source,
        [calls],
        allowlist=allowlist,
        command=dod_command(predicate, *extra),
        **spec,
    )
    task = spec_mod.load_spec(path)
    return runner.run_task(runner.preflight(task, base_dir=root)).to_json()


def source_state(source: Path) -> dict[str, Any]:
    return {
        "bytes": fingerprint(source),
        "head": git(source, "rev-parse", "HEAD"),
        "refs": git(source, "for-each-ref"),
        "status": git(source, "status", "--porcelain=v1", "--untracked-files=all"),
        "staged": git(source, "diff", "--cached", "--name-status"),
    }


def patch_only(root: Path, source: Path, calls: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return run_complete(root, source, calls, apply_to_source=False, **kw)


def wait_for_phase(path: Path, phase: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text()).get("phase") == phase:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached phase {phase}")

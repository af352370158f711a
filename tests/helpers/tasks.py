"""Builders for task specs, scripts and source fingerprints used across test suites."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.git import make_repo

PY = sys.executable

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n"
TESTS = (
    "from calc import add, mul\n\n\n"
    "def test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_mul():\n    assert mul(2, 3) == 6\n"
)
FIXED_ADD = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n"
FIXED_BOTH = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"


def calc_repo(root: Path) -> Path:
    return make_repo(
        root / "source",
        {"calc.py": CALC, "test_calc.py": TESTS, ".gitignore": "__pycache__/\n.pytest_cache/\n"},
    )


def write_task(
    root: Path,
    source: Path,
    rounds: list[list[dict[str, Any]]],
    *,
    task_id: str = "fix-calc",
    allowlist: list[str] | None = None,
    command: str | None = None,
    assertion: str = "exit_code == 0",
    **extra: Any,
) -> Path:
    script = root / f"{task_id}.script.json"
    script.write_text(
        json.dumps(
            {"rounds": [{"calls": calls, "response": f"r{i}"} for i, calls in enumerate(rounds, 1)]}
        )
    )
    spec: dict[str, Any] = {
        "task_id": task_id,
        "title": "Fix the calculator",
        "prompt": "Make the tests pass by fixing calc.py.",
        "backend": f"scripted:{script.name}",
        "cwd": str(source),
        "output_dir": str(root / "out"),
        "allowlist": allowlist or ["calc.py"],
        "definition_of_done": {
            "command": command or f"{PY} -m pytest -q -p no:cacheprovider test_calc.py",
            "assertion": assertion,
            "timeout_s": 120,
        },
        "max_rounds": max(1, len(rounds)),
    }
    spec.update(extra)
    path = root / f"{task_id}.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def cmd(command: str) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": command}}


def fingerprint(repo: Path) -> dict[str, str]:
    """Every byte under the repo, .git included: the strongest "unchanged" check there is.

    The one exception is the index's stat cache. Git itself rewrites it on a read (`git
    status` refreshes entries whose timestamps fall in the index's own second, its racy-git
    guard), so whether it changed depends on the clock, not on what was done. The index is
    taken by what it holds instead: every entry's mode, blob, stage, flags and path.
    """
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(Path(dirpath, d))]:
            full = Path(dirpath, name)
            rel = full.relative_to(repo).as_posix()
            st = full.lstat()
            if os.path.islink(full):
                found[rel] = "link:" + os.readlink(full)
            elif rel == ".git/index":
                found[rel] = f"{st.st_mode:o}:entries:" + index_entries(repo)
            else:
                found[rel] = f"{st.st_mode:o}:" + hashlib.sha256(full.read_bytes()).hexdigest()
    return found


def index_entries(repo: Path) -> str:
    """A hash of the index's entries without their stat cache (`ls-files --stage -v`); of its
    raw bytes when git cannot read it. The repo may be hostile (attack tests configure an
    fsmonitor in it): git reads it with nothing that could run a program of the repo's."""
    where = ["--git-dir", str(repo / ".git"), "--work-tree", str(repo)]
    safe = [
        "-c",
        "safe.directory=*",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
    ]
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    listed = subprocess.run(
        ["git", *safe, *where, "ls-files", "--stage", "-v", "-z"],
        capture_output=True,
        env=env,
    )
    if listed.returncode != 0:
        return "raw:" + hashlib.sha256((repo / ".git/index").read_bytes()).hexdigest()
    return hashlib.sha256(listed.stdout).hexdigest()


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a real process."""
    return subprocess.run(
        [PY, "-m", "code_runner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


def load_result(out_dir: Path, task_id: str = "fix-calc") -> dict[str, Any]:
    data = json.loads((out_dir / f"{task_id}.result.json").read_text())
    assert isinstance(data, dict)
    return data


# A fork storm: forks sleeping children until refused, then prints `forked=N`.
FORK_MANY = """
import os, time
forked = 0
try:
    for _ in range(300):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        forked += 1
except OSError:
    pass
print(f"forked={forked}")
"""

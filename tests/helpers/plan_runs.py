"""A two-file calculator repo, plans for it, per-item scripts, and the real `plan` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.git import make_repo

PY = sys.executable
DOD = f"{PY} -m pytest -q -p no:cacheprovider test_calc.py"
ARGV = json.dumps(DOD.split())
BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def calc_source(root: Path) -> Path:
    files = {"calc.py": BROKEN, "test_calc.py": TESTS, ".gitignore": "__pycache__/\n"}
    return make_repo(root / "source", files)


def plan_item(n: int, title: str, paths: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "id": f"P{n}",
        "title": title,
        "intent": "It is needed.",
        "files": [
            {"path": p, "kind": k, "renamed_from": None, "change": "change it"} for p, k in paths
        ],
        "acceptance": [{"type": "cmd", "text": DOD}, {"type": "check", "text": "It reads well."}],
        "depends_on": [],
    }


def write_plan(root: Path, *items: dict[str, Any], name: str = "plan") -> Path:
    data = {
        "schema_version": 1,
        "issue": None,
        "revision": 1,
        "summary": "Fix the calculator, then extend it.",
        "items": list(items),
        "questions": [],
    }
    path = root / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def write_script(root: Path, item: str, *rounds: list[dict[str, Any]]) -> None:
    body = {"rounds": [{"calls": calls, "response": "done"} for calls in rounds]}
    (root / f"s.{item}.json").write_text(json.dumps(body))


def put(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def shell(command: str) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": command}}


def run_args(plan: Path, source: Path, *extra: str) -> list[str]:
    return [
        PY, "-m", "code_runner", "plan", "run", str(plan), "--source", str(source),
        "--backend", "scripted:s.{item}.json", "--allow-cmd", ARGV, "--max-rounds", "1",
        "--item-timeout", "120", *extra,
    ]  # fmt: skip


def plan_cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = list(argv) if argv and argv[0] == PY else [PY, "-m", "code_runner", "plan", *argv]
    return subprocess.run(
        full, capture_output=True, text=True, cwd=cwd, env=os.environ.copy(), timeout=300
    )


def status_of(stdout: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(stdout)
    return data

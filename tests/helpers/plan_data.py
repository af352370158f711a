"""A valid plan for a small repo, as data, and the real CLI in a subprocess."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BASE_FILES = {"README.md": "hello\n", "src/app.py": "x = 1\n", "docs/usage.md": "use\n"}


def file(path: str, kind: str = "edit", renamed_from: str | None = None) -> dict[str, Any]:
    return {"path": path, "kind": kind, "renamed_from": renamed_from, "change": "change it"}


def item(n: int, files: list[dict[str, Any]], depends_on: list[str] | None = None,
         cmd: str = "python -m pytest -q") -> dict[str, Any]:  # fmt: skip
    return {
        "id": f"P{n}",
        "title": f"Item {n}",
        "intent": "Because it helps.",
        "files": files,
        "acceptance": [{"type": "cmd", "text": cmd}, {"type": "check", "text": "It works."}],
        "depends_on": depends_on or [],
    }


def plan_data(*items: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(
        {
            "schema_version": 1,
            "issue": None,
            "revision": 1,
            "summary": "A small plan.",
            "items": list(items)
            or [
                item(1, [file("src/app.py"), file("src/new.py", "add")]),
                item(2, [file("src/new.py")], ["P1"]),
                item(3, [file("docs/slugs.md", "rename", "docs/usage.md")], ["P2"]),
            ],
            "questions": [],
        }
    )


def cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "code_runner", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=os.environ.copy(),
        timeout=120,
    )

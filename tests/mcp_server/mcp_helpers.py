"""The real `code-runner mcp` in a subprocess, driven by the MCP SDK's own client over stdio."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

T = TypeVar("T")


def server_log() -> list[dict[str, Any]]:
    path = Path(os.environ["CODE_RUNNER_STATE_DIR"]) / "mcp" / "server.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@asynccontextmanager
async def connect(*flags: str, env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "code_runner", "mcp", *flags],
        env=env or dict(os.environ),
    )
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return anyio.run(fn)


def structured(result: Any) -> dict[str, Any]:
    """A tool's JSON answer (structured content, else its text)."""
    assert not result.is_error, text(result)
    data = result.structured_content
    if isinstance(data, dict) and set(data) == {"result"}:
        data = data["result"]
    if data is None:
        data = json.loads(text(result))
    assert isinstance(data, dict)
    return data


def text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
CHECK = (
    "from calc import add, mul\n"
    "assert add(2, 3) == 5, 'add(2, 3) should be 5'\n"
    "assert mul(2, 3) == 6, 'mul(2, 3) should be 6'\n"
    "print('2 passed')\n"
)


def calc_source(root: Path) -> Path:
    from tests.helpers.git import make_repo

    files = {"calc.py": BUGGY, "check_calc.py": CHECK, ".gitignore": "__pycache__/\n"}
    return make_repo(root / "source", files)


def fix_script(root: Path, content: str = FIXED) -> Path:
    path = root / "fix.json"
    calls = [{"tool": "write_file", "args": {"path": "calc.py", "content": content}}]
    path.write_text(json.dumps({"rounds": [{"calls": calls, "response": "fixed"}]}))
    return path


def task_spec(source: Path, script: Path, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "task_id": "fix-calc",
        "title": "Fix the calculator",
        "prompt": "calc.add and calc.mul are wrong; fix them so check_calc.py passes.",
        "backend": f"scripted:{script}",
        "cwd": str(source),
        "allowlist": ["calc.py"],
        "definition_of_done": {
            "command": f"{sys.executable} check_calc.py",
            "assertion": "exit_code == 0",
            "timeout_s": 60,
        },
        "max_rounds": 1,
    }
    spec.update(extra)
    return spec

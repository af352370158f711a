"""Model-backend runs for tests: a calc repo, a config naming the scripted server, a spec,
and `code-runner run` through the real CLI (in process, or in a real process)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from code_runner import files
from code_runner.cli.boundary import run_cli as invoke
from code_runner.cli.main import cli
from code_runner.testing.chat_completions import ToolCall, Turn, call
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.tasks import CALC, FIXED_ADD, FIXED_BOTH, TESTS, calc_repo, run_cli

PY = sys.executable
KEY_ENV = "CR_TEST_MODEL_KEY"
KEY = "sk-test-7f3a9c1e5b2d4086-secret"
DOD = f"{PY} -c 'import calc; assert calc.add(2, 3) == 5; assert calc.mul(2, 3) == 6'"

__all__ = ["CALC", "FIXED_ADD", "FIXED_BOTH", "TESTS", "ToolCall", "Turn", "call"]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def write_config(
    path: Path, backends: Mapping[str, Mapping[str, Any]], budget: Mapping[str, Any] | None = None
) -> Path:
    lines: list[str] = []
    if budget:
        lines.append("[budget]")
        lines += [f"{k} = {toml_value(v)}" for k, v in budget.items()]
    for name, entry in backends.items():
        lines.append(f"\n[backends.{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in entry.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def fast_backend(server: ScriptedServer, **overrides: Any) -> dict[str, Any]:
    """A backend entry for the scripted server with test-speed retries."""
    return {
        "base_url": server.base_url,
        "model": "scripted-model",
        "api_key_env": KEY_ENV,
        "retries": 2,
        "retry_backoff_s": 0.05,
        "request_timeout_s": 10.0,
        **overrides,
    }


@dataclass
class ModelRun:
    root: Path
    source: Path
    spec: Path
    out: Path
    task_id: str = "fix-calc"

    def result(self) -> dict[str, Any]:
        data = json.loads((self.out / f"{self.task_id}.result.json").read_text())
        assert isinstance(data, dict)
        return data

    def transcript(self) -> list[dict[str, Any]]:
        return files.read_jsonl(self.out / f"{self.task_id}.transcript.jsonl")

    def events(self) -> list[dict[str, Any]]:
        return files.read_jsonl(self.out / f"{self.task_id}.events.jsonl")

    def patch(self) -> bytes:
        return (self.out / f"{self.task_id}.patch").read_bytes()

    def run(self, *args: str) -> int:
        """`code-runner run SPEC` in this process (the whole CLI path, no startup cost)."""
        return invoke(cli, ["run", str(self.spec), *args])

    def run_process(self, *args: str) -> Any:
        return run_cli("run", str(self.spec), *args)


def model_task(
    root: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    *,
    backend: str = "scripted-llm",
    backend_settings: Mapping[str, Any] | None = None,
    budget: Mapping[str, Any] | None = None,
    max_rounds: int = 1,
    task_id: str = "fix-calc",
    command: str = DOD,
    **extra: Any,
) -> ModelRun:
    source = calc_repo(root)
    config = write_config(
        root / "config.toml",
        {"scripted-llm": {**fast_backend(server), **(backend_settings or {})}},
        budget,
    )
    monkeypatch.setenv("CODE_RUNNER_CONFIG", str(config))
    monkeypatch.setenv(KEY_ENV, KEY)
    spec: dict[str, Any] = {
        "task_id": task_id,
        "title": "Fix the calculator",
        "prompt": "Make add and mul correct.",
        "backend": backend,
        "cwd": str(source),
        "output_dir": str(root / "out"),
        "allowlist": ["calc.py"],
        "definition_of_done": {"command": command, "assertion": "exit_code == 0", "timeout_s": 60},
        "max_rounds": max_rounds,
        **extra,
    }
    path = root / f"{task_id}.json"
    path.write_text(json.dumps(spec, indent=2))
    return ModelRun(root=root, source=source, spec=path, out=root / "out", task_id=task_id)


def write(path: str, content: str) -> ToolCall:
    return call("write_file", path=path, content=content)


def tool_messages(body: Mapping[str, Any]) -> list[str]:
    """The tool results a request sends back to the model, in order."""
    return [m["content"] for m in body["messages"] if m.get("role") == "tool"]


def no_workspaces() -> bool:
    from code_runner import dirs

    root = dirs.workspaces_dir()
    return not root.exists() or not any(root.iterdir())


def env_without_key() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != KEY_ENV}

"""A toolbox on a fresh workspace, with short ways to call a tool and check a refusal."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from code_runner.events import ListSink
from code_runner.task.paths import Allowlist
from code_runner.tools import (
    Toolbox,
    ToolLimits,
)
from code_runner.tools.base import ToolErrorCode, ToolResult


class Box:
    """A toolbox on a fresh workspace, with helpers that keep tests short."""

    def __init__(self, root: Path, limits: ToolLimits | None = None, **kwargs: Any) -> None:
        self.ws = root / "ws"
        self.source = root / "source"
        self.ws.mkdir()
        self.source.mkdir()
        self.events = ListSink()
        self.env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "LANG": "C.UTF-8"}
        self.env.update(kwargs.pop("env", {}))
        self.box = Toolbox(
            self.ws,
            allowlist=Allowlist.parse(kwargs.pop("allow", ["src", "notes.txt"])),
            source_dir=self.source,
            env=self.env,
            events=self.events,
            limits=limits or ToolLimits(),
            **kwargs,
        )

    def put(self, rel: str, data: str | bytes) -> Path:
        path = self.ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data)
        else:
            path.write_bytes(data)
        return path

    def call(self, name: str, **args: Any) -> ToolResult:
        return self.box.call(name, args)


def fails(result: ToolResult, code: ToolErrorCode, *fragments: str) -> None:
    assert not result.ok, result.content
    assert result.error is code, result.content
    assert result.content.startswith(f"{code.value}: ")
    for fragment in fragments:
        assert fragment in result.content, result.content

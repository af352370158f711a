"""The tool protocol: what a tool call returns (`ToolResult`, with a typed `ToolErrorCode`),
how a tool is described to a model (`ToolSpec`), and what runs one (`ToolRunner`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    pass


class ToolErrorCode(StrEnum):
    """Typed errors a tool returns to the agent. Never an exception in the runner."""

    PERMISSION = "PERMISSION"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARGS = "INVALID_ARGS"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    LINE_RANGE = "LINE_RANGE"
    STALE = "STALE"
    TIMEOUT = "TIMEOUT"
    BLOCKED_COMMAND = "BLOCKED_COMMAND"
    TOO_LARGE = "TOO_LARGE"
    NOT_A_FILE = "NOT_A_FILE"
    IO_ERROR = "IO_ERROR"
    DUPLICATE_CALL = "DUPLICATE_CALL"  # the same call again with nothing changed in between


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returned. `content` is what the agent sees."""

    ok: bool
    content: str
    error: ToolErrorCode | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def success(cls, content: str, **data: Any) -> ToolResult:
        return cls(ok=True, content=content, data=data)

    @classmethod
    def failure(cls, code: ToolErrorCode, message: str, **data: Any) -> ToolResult:
        return cls(ok=False, content=f"{code.value}: {message}", error=code, data=data)


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a model sees it: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


class ToolRunner(Protocol):
    def specs(self) -> list[ToolSpec]: ...

    def call(self, name: str, args: Mapping[str, Any]) -> ToolResult: ...

"""The toolbox: tool specs derived from the functions, dispatch, argument errors, events."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest

from code_runner.events import EventKind
from code_runner.tools import (
    TOOL_NAMES,
)
from code_runner.tools.base import ToolErrorCode
from tests.helpers.toolbox import Box, fails

# -- schema and dispatch --------------------------------------------------------------


def test_specs_are_derived_from_the_functions(b: Box) -> None:
    specs = {spec.name: spec for spec in b.box.specs()}
    assert tuple(specs) == TOOL_NAMES
    read = specs["read_file"].parameters
    assert read == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the repository root."},
            "start_line": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to show (1-based). Default 1.",
            },
            "end_line": {
                "type": "integer",
                "minimum": 1,
                "description": "Last line to show (inclusive).",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    assert specs["edit_file"].parameters["required"] == [
        "path",
        "start_line",
        "end_line",
        "content",
    ]
    assert specs["run_command"].parameters["properties"]["timeout_s"]["type"] == "number"
    assert specs["search_code"].parameters["required"] == ["pattern"]
    for spec in specs.values():
        assert spec.description and "self" not in spec.parameters["properties"]


def test_unknown_tool(b: Box) -> None:
    fails(b.call("delete_everything"), ToolErrorCode.UNKNOWN_TOOL, "read_file", "search_code")


@pytest.mark.parametrize(
    ("name", "args", "fragment"),
    [
        ("read_file", {"path": "src/a.py", "bogus": 1}, "unknown field 'bogus'; remove it"),
        ("read_file", {"path": "a", "start_lin": 1}, "did you mean 'start_line'?"),
        ("read_file", {}, "path: is required but missing; add it (file path"),
        ("read_file", {"path": 3}, "path: expected a string"),
        ("read_file", {"path": "src/a.py", "start_line": "2"}, "start_line: expected a whole"),
        ("read_file", {"path": "src/a.py", "start_line": True}, "start_line: expected a whole"),
        ("read_file", {"path": "src/a.py", "start_line": 0}, "start_line: "),
        ("edit_file", {"path": "src/a.py", "start_line": 1, "content": ""}, "end_line: "),
        ("run_command", {"command": ""}, "command: "),
        ("run_command", {"command": "true", "timeout_s": -1}, "timeout_s: "),
        ("run_command", {"command": "true", "timeout_s": "5"}, "timeout_s: "),
        ("search_code", {"pattern": "x", "glob": ""}, "glob: "),
    ],
)
def test_invalid_args_name_the_argument(
    b: Box, name: str, args: dict[str, Any], fragment: str
) -> None:
    b.put("src/a.py", "x\n")
    fails(b.box.call(name, args), ToolErrorCode.INVALID_ARGS, fragment)


def test_arguments_that_are_not_an_object(b: Box) -> None:
    fails(b.box.call("read_file", ["src/a.py"]), ToolErrorCode.INVALID_ARGS, "JSON object")  # type: ignore[arg-type]


def test_each_call_is_two_events_with_long_text_cut(b: Box) -> None:
    big = "y" * 5000
    b.call("write_file", path="src/big.txt", content=big)
    b.call("read_file", path="missing.txt")
    kinds = [kind for kind, _ in b.events.events]
    assert kinds == [EventKind.TOOL_CALL, EventKind.TOOL_RESULT] * 2
    call = b.events.events[0][1]
    assert call["name"] == "write_file"
    args = call["args"]
    assert isinstance(args, dict)
    assert len(args["content"]) < 300 and "[5000 chars]" in args["content"]
    result = b.events.events[1][1]
    assert result["ok"] is True and result["error"] is None
    assert "created src/big.txt" in str(result["summary"])
    failed = b.events.events[3][1]
    assert failed["ok"] is False and failed["error"] == "NOT_FOUND"


def test_unexpected_oserror_becomes_io_error(b: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", broken)
    fails(
        b.call("write_file", path="src/a.py", content="x"), ToolErrorCode.IO_ERROR, "Input/output"
    )
    assert sorted(os.listdir(b.ws / "src")) == []  # the temp file was removed

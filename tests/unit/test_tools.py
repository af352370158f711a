"""Every tool and every error code, on real files and real processes."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from code_runner.events import EventKind, ListSink
from code_runner.task.paths import Allowlist
from code_runner.tools import (
    TOOL_NAMES,
    Toolbox,
    ToolLimits,
    command_argv,
    scrub_env,
    search_argv,
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


@pytest.fixture
def b(tmp_path: Path) -> Box:
    return Box(tmp_path)


def fails(result: ToolResult, code: ToolErrorCode, *fragments: str) -> None:
    assert not result.ok, result.content
    assert result.error is code, result.content
    assert result.content.startswith(f"{code.value}: ")
    for fragment in fragments:
        assert fragment in result.content, result.content


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


# -- read_file -------------------------------------------------------------------------


def test_read_numbers_lines_and_says_the_total(b: Box) -> None:
    b.put("src/a.py", "def f():\n    return 1\n")
    result = b.call("read_file", path="src/a.py")
    assert result.ok
    assert result.content == "src/a.py: lines 1-2 of 2\n    1| def f():\n    2|     return 1"
    assert result.data["total_lines"] == 2 and not result.data["truncated"]


def test_read_a_range(b: Box) -> None:
    b.put("notes.txt", "".join(f"line {i}\n" for i in range(1, 21)))
    result = b.call("read_file", path="notes.txt", start_line=5, end_line=7)
    assert result.content.splitlines() == [
        "notes.txt: lines 5-7 of 20",
        "    5| line 5",
        "    6| line 6",
        "    7| line 7",
    ]
    # an end past the end is clamped
    assert b.call("read_file", path="notes.txt", start_line=19, end_line=99).data["end_line"] == 20


def test_read_is_bounded_and_says_where_to_continue(tmp_path: Path) -> None:
    b = Box(tmp_path, ToolLimits(read_max_lines=10))
    b.put("notes.txt", "".join(f"{i}\n" for i in range(1, 26)))
    result = b.call("read_file", path="notes.txt")
    assert result.data["truncated"] is True
    assert result.content.count("| ") == 10
    assert "showing 1-10 of 25; call read_file with start_line=11 to continue" in result.content
    result = b.call("read_file", path="notes.txt", start_line=21)
    assert result.data["end_line"] == 25 and not result.data["truncated"]


def test_read_line_range_errors(b: Box) -> None:
    b.put("notes.txt", "a\nb\n")
    fails(b.call("read_file", path="notes.txt", start_line=3), ToolErrorCode.LINE_RANGE, "2 lines")
    fails(
        b.call("read_file", path="notes.txt", start_line=2, end_line=1),
        ToolErrorCode.LINE_RANGE,
        "before start_line",
    )


def test_read_empty_file_and_missing_newline_and_crlf(b: Box) -> None:
    b.put("src/empty.txt", "")
    assert (
        b.call("read_file", path="src/empty.txt").content == "src/empty.txt: empty file (0 lines)"
    )
    fails(b.call("read_file", path="src/empty.txt", start_line=2), ToolErrorCode.LINE_RANGE)
    b.put("src/nonl.txt", "a\nb")
    assert b.call("read_file", path="src/nonl.txt").content.endswith("[no newline at end of file]")
    b.put("src/dos.txt", "a\r\nb\r\n")
    content = b.call("read_file", path="src/dos.txt").content
    assert "(CRLF line endings)" in content and "    1| a\n    2| b" in content


def test_read_cuts_very_long_lines(tmp_path: Path) -> None:
    b = Box(tmp_path, ToolLimits(read_max_line_chars=50))
    b.put("src/min.js", "x" * 1000 + "\n")
    content = b.call("read_file", path="src/min.js").content
    assert "line cut at 50 of 1000 chars" in content and "x" * 51 not in content


@pytest.mark.parametrize("data", [b"\x00\x01\x02abc", b"caf\xe9\n", b"\x89PNG\r\n\x1a\n\x00\x00"])
def test_binary_files_are_described_not_dumped(b: Box, data: bytes) -> None:
    b.put("src/blob.bin", data)
    result = b.call("read_file", path="src/blob.bin")
    assert result.ok and result.data["binary"] is True
    assert f"{len(data)} bytes" in result.content and "binary" in result.content
    import hashlib

    assert hashlib.sha256(data).hexdigest() in result.content


def test_read_errors(b: Box) -> None:
    fails(b.call("read_file", path="nope.txt"), ToolErrorCode.NOT_FOUND, "nope.txt does not exist")
    fails(b.call("read_file", path="nope/x.txt"), ToolErrorCode.NOT_FOUND, "nope does not exist")
    b.put("src/a.py", "x\n")
    fails(b.call("read_file", path="src/a.py/x"), ToolErrorCode.NOT_FOUND, "not a directory")
    fails(b.call("read_file", path="src"), ToolErrorCode.NOT_A_FILE, "directory")
    fails(b.call("read_file", path=""), ToolErrorCode.INVALID_ARGS, "empty")


def test_read_of_a_fifo_is_refused_without_blocking(b: Box) -> None:
    os.mkfifo(b.ws / "pipe")
    fails(b.call("read_file", path="pipe"), ToolErrorCode.NOT_A_FILE, "not a regular file")


def test_read_too_large(tmp_path: Path) -> None:
    b = Box(tmp_path, ToolLimits(read_max_bytes=100))
    b.put("src/big.txt", "x" * 101)
    fails(b.call("read_file", path="src/big.txt"), ToolErrorCode.TOO_LARGE, "101 bytes", "100")


# -- write_file ------------------------------------------------------------------------


def test_write_creates_parents_and_reports(b: Box) -> None:
    result = b.call("write_file", path="src/pkg/deep/mod.py", content="a\nb\n")
    assert result.ok and result.data["created"] is True
    assert result.content == "created src/pkg/deep/mod.py (4 bytes, 2 lines)"
    assert (b.ws / "src/pkg/deep/mod.py").read_bytes() == b"a\nb\n"
    result = b.call("write_file", path="src/pkg/deep/mod.py", content="c\n")
    assert result.content.startswith("replaced ") and result.data["created"] is False
    assert (b.ws / "src/pkg/deep/mod.py").read_bytes() == b"c\n"


def test_write_keeps_the_mode_and_leaves_no_temp_files(b: Box) -> None:
    script = b.put("src/run.sh", "#!/bin/sh\n")
    script.chmod(0o755)
    assert b.call("write_file", path="src/run.sh", content="#!/bin/sh\necho hi\n").ok
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert sorted(os.listdir(b.ws / "src")) == ["run.sh"]


def test_write_replaces_a_hard_link_instead_of_writing_through_it(b: Box, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    os.link(outside, b.ws / "notes.txt")
    assert b.call("write_file", path="notes.txt", content="new\n").ok
    assert outside.read_text() == "keep me\n"
    assert (b.ws / "notes.txt").read_text() == "new\n"


def test_write_outside_the_allowlist_names_the_allowlist(b: Box) -> None:
    fails(
        b.call("write_file", path="other.py", content="x"),
        ToolErrorCode.PERMISSION,
        "outside the write allowlist (src, notes.txt)",
    )
    assert not (b.ws / "other.py").exists()


def test_write_refuses_non_regular_targets(b: Box) -> None:
    (b.ws / "src/dir").mkdir(parents=True)
    fails(b.call("write_file", path="src/dir", content="x"), ToolErrorCode.NOT_A_FILE)
    os.mkfifo(b.ws / "src/pipe")
    fails(b.call("write_file", path="src/pipe", content="x"), ToolErrorCode.NOT_A_FILE)
    assert stat.S_ISFIFO(os.lstat(b.ws / "src/pipe").st_mode)


def test_write_limits_and_bad_text(tmp_path: Path) -> None:
    b = Box(tmp_path, ToolLimits(write_max_bytes=10))
    fails(b.call("write_file", path="src/a", content="x" * 11), ToolErrorCode.TOO_LARGE, "11 bytes")
    fails(b.call("write_file", path="src/a", content="\ud800"), ToolErrorCode.INVALID_ARGS)
    assert not (b.ws / "src").exists()


# -- edit_file -------------------------------------------------------------------------


def read_then_edit(b: Box, rel: str, start: int, end: int, content: str) -> ToolResult:
    assert b.call("read_file", path=rel).ok
    return b.call("edit_file", path=rel, start_line=start, end_line=end, content=content)


@pytest.mark.parametrize(
    ("before", "start", "end", "content", "after"),
    [
        ("a\nb\nc\n", 2, 2, "B", "a\nB\nc\n"),  # replace one line
        ("a\nb\nc\n", 2, 3, "X\nY\nZ\n", "a\nX\nY\nZ\n"),  # replace a range with more lines
        ("a\nb\nc\n", 2, 2, "", "a\nc\n"),  # delete
        ("a\nb\nc\n", 2, 1, "new", "a\nnew\nb\nc\n"),  # insert before line 2
        ("a\nb\nc\n", 4, 3, "end", "a\nb\nc\nend\n"),  # append
        ("a\nb", 2, 2, "B", "a\nB"),  # no newline at EOF is kept
        ("a\nb", 3, 2, "c", "a\nb\nc"),  # append to a file without final newline
        ("", 1, 0, "first", "first\n"),  # empty file
        ("a\r\nb\r\n", 1, 1, "A\nA2", "A\r\nA2\r\nb\r\n"),  # CRLF kept
    ],
)
def test_edit_replaces_inclusive_line_ranges(
    b: Box, before: str, start: int, end: int, content: str, after: str
) -> None:
    b.put("src/f.txt", before)
    result = read_then_edit(b, "src/f.txt", start, end, content)
    assert result.ok, result.content
    assert (b.ws / "src/f.txt").read_bytes() == after.encode()


def test_edit_reports_and_shows_the_new_lines(b: Box) -> None:
    b.put("src/f.txt", "".join(f"{i}\n" for i in range(1, 11)))
    result = read_then_edit(b, "src/f.txt", 5, 6, "five\nsix\nsix and a half")
    assert result.content.splitlines()[0] == (
        "edited src/f.txt: replaced lines 5-6 (2 lines) with 3 lines; it now has 11 lines"
    )
    assert "    7| six and a half" in result.content and "    2| 2" in result.content


def test_edit_counts_as_a_read_and_write_counts_as_a_read(b: Box) -> None:
    b.put("src/f.txt", "a\nb\n")
    assert read_then_edit(b, "src/f.txt", 1, 1, "A").ok
    assert b.call("edit_file", path="src/f.txt", start_line=2, end_line=2, content="B").ok
    assert b.call("write_file", path="src/g.txt", content="x\n").ok
    assert b.call("edit_file", path="src/g.txt", start_line=1, end_line=1, content="y").ok
    assert (b.ws / "src/f.txt").read_text() == "A\nB\n"
    assert (b.ws / "src/g.txt").read_text() == "y\n"


def test_edit_without_a_read_is_stale(b: Box) -> None:
    b.put("src/f.txt", "a\n")
    fails(
        b.call("edit_file", path="src/f.txt", start_line=1, end_line=1, content="b"),
        ToolErrorCode.STALE,
        "read src/f.txt with read_file",
    )
    assert (b.ws / "src/f.txt").read_text() == "a\n"


def test_edit_after_an_outside_change_is_stale(b: Box) -> None:
    b.put("src/f.txt", "a\n")
    assert b.call("read_file", path="src/f.txt").ok
    assert b.call("run_command", command="echo changed > src/f.txt").ok
    fails(
        b.call("edit_file", path="src/f.txt", start_line=1, end_line=1, content="b"),
        ToolErrorCode.STALE,
        "changed since you last read it",
    )
    assert (b.ws / "src/f.txt").read_text() == "changed\n"
    assert read_then_edit(b, "src/f.txt", 1, 1, "b").ok  # reading again clears it


@pytest.mark.parametrize(("start", "end"), [(4, 4), (2, 4), (3, 1), (5, 4)])
def test_edit_line_range(b: Box, start: int, end: int) -> None:
    b.put("src/f.txt", "a\nb\nc\n")
    fails(read_then_edit(b, "src/f.txt", start, end, "x"), ToolErrorCode.LINE_RANGE, "3 lines")
    assert (b.ws / "src/f.txt").read_text() == "a\nb\nc\n"


def test_edit_errors(b: Box) -> None:
    b.put("other.txt", "a\n")
    assert b.call("read_file", path="other.txt").ok
    fails(
        b.call("edit_file", path="other.txt", start_line=1, end_line=1, content="b"),
        ToolErrorCode.PERMISSION,
        "write allowlist",
    )
    fails(
        b.call("edit_file", path="src/none.txt", start_line=1, end_line=1, content="b"),
        ToolErrorCode.NOT_FOUND,
    )
    b.put("src/blob.bin", b"\x00\x01")
    fails(read_then_edit(b, "src/blob.bin", 1, 1, "x"), ToolErrorCode.INVALID_ARGS, "binary")
    assert (b.ws / "other.txt").read_text() == "a\n"
    assert (b.ws / "src/blob.bin").read_bytes() == b"\x00\x01"


def test_edit_result_too_large(tmp_path: Path) -> None:
    b = Box(tmp_path, ToolLimits(write_max_bytes=10))
    b.put("src/f.txt", "a\n")
    fails(read_then_edit(b, "src/f.txt", 1, 1, "x" * 20), ToolErrorCode.TOO_LARGE)
    assert (b.ws / "src/f.txt").read_text() == "a\n"


# -- run_command -----------------------------------------------------------------------


def test_run_shows_exit_code_stdout_and_stderr_even_on_failure(b: Box) -> None:
    result = b.call("run_command", command="pwd; echo oops >&2; exit 3")
    assert result.ok and result.data["exit_code"] == 3
    lines = result.content.splitlines()
    assert lines[0].startswith("exit 3 in ")
    assert lines[1:] == [
        f"--- stdout ({len(str(b.ws)) + 1} bytes) ---",
        str(b.ws),
        "--- stderr (5 bytes) ---",
        "oops",
    ]


def test_run_has_empty_stdin_and_no_secrets(tmp_path: Path) -> None:
    b = Box(
        tmp_path,
        env={"VISIBLE": "yes", "OPENAI_API_KEY": "k", "GH_TOKEN": "t", "DB_PASSWORD": "p"},
    )
    result = b.call("run_command", command="cat; env")
    assert "VISIBLE=yes" in result.content
    for secret in ("OPENAI_API_KEY", "GH_TOKEN", "DB_PASSWORD"):
        assert secret not in result.content


def test_scrub_env_keeps_harmless_names() -> None:
    env = {
        "PATH": "/bin",
        "KEYBOARD": "us",
        "MONKEY": "1",
        "SSH_AUTH_SOCK": "/s",
        "AWS_SECRET_ACCESS_KEY": "x",
    }
    assert scrub_env(env) == {"PATH": "/bin", "KEYBOARD": "us", "MONKEY": "1"}


def test_run_timeout_kills_and_shows_the_tail(b: Box) -> None:
    result = b.call("run_command", command="echo started; sleep 30", timeout_s=0.5)
    fails(result, ToolErrorCode.TIMEOUT, "timed out after 0.5 s", "started")
    assert result.data["exit_code"] == 124


def test_run_timeout_is_clamped(tmp_path: Path) -> None:
    b = Box(tmp_path, ToolLimits(command_max_timeout_s=0.5))
    result = b.call("run_command", command="sleep 30", timeout_s=1000)
    fails(result, ToolErrorCode.TIMEOUT, "timed out after 0.5 s", "lowered to the maximum")
    assert result.data["duration_s"] < 10


def test_run_output_is_capped_head_and_tail(tmp_path: Path) -> None:
    b = Box(tmp_path, ToolLimits(command_output_bytes=1024))
    result = b.call("run_command", command="echo FIRST; seq 1 20000; echo LAST")
    assert result.ok
    assert "FIRST" in result.content and "LAST" in result.content
    assert "bytes omitted" in result.content
    assert len(result.content) < 1500


def test_run_blocked_names_the_rule(b: Box) -> None:
    fails(
        b.call("run_command", command="git commit -m x"),
        ToolErrorCode.BLOCKED_COMMAND,
        "`git_write`",
    )
    assert b.events.events[-1][1]["error"] == "BLOCKED_COMMAND"
    assert b.events.events[-1][1]["details"] == {"rule": "git_write"}
    fails(b.call("run_command", command="   "), ToolErrorCode.INVALID_ARGS, "empty command")


def test_run_goes_through_the_argv_seam(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def wrap(argv: Any) -> list[str]:
        seen.append(list(argv))
        return ["env", "WRAPPED=1", *argv]

    b = Box(tmp_path, wrap_argv=wrap)
    result = b.call("run_command", command="echo $WRAPPED")
    assert "--- stdout (2 bytes) ---\n1" in result.content
    assert seen == [command_argv("echo $WRAPPED")]
    assert seen[0][-2:] == ["-c", "echo $WRAPPED"]
    b.call("search_code", pattern="x")
    assert seen[1][1:] == search_argv("x", None)[1:]


# -- search_code -----------------------------------------------------------------------


def test_search_argv_is_exact() -> None:
    assert search_argv("--pre=./x.sh", "*.py", rg="/usr/bin/rg") == [
        "/usr/bin/rg", "--no-config", "--no-heading", "--line-number", "--color=never",
        "--glob", "*.py", "--iglob", "!.git", "-e", "--pre=./x.sh", "--", ".",
    ]  # fmt: skip
    assert "--glob" not in search_argv("x", None)


def test_search_finds_lines(b: Box) -> None:
    b.put("src/a.py", "alpha = 1\nbeta = 2\n")
    b.put("src/b.txt", "alpha in text\n")
    result = b.call("search_code", pattern="alph[a]")
    assert result.ok and result.data["matches"] == 2
    assert sorted(result.content.splitlines()) == [
        "src/a.py:1:alpha = 1",
        "src/b.txt:1:alpha in text",
    ]
    only_py = b.call("search_code", pattern="alpha", glob="*.py")
    assert only_py.content == "src/a.py:1:alpha = 1"


def test_search_no_match_is_success(b: Box) -> None:
    b.put("src/a.py", "x\n")
    result = b.call("search_code", pattern="zzz")
    assert result.ok and result.content == "no matches for 'zzz'" and result.data["matches"] == 0


def test_search_bad_regex_is_invalid_args(b: Box) -> None:
    b.put("src/a.py", "x\n")
    fails(b.call("search_code", pattern="(("), ToolErrorCode.INVALID_ARGS, "regex parse error")


def test_search_is_bounded(tmp_path: Path) -> None:
    b = Box(tmp_path, ToolLimits(search_max_matches=5))
    b.put("src/a.txt", "hit\n" * 50)
    result = b.call("search_code", pattern="hit")
    assert result.data == {"matches": 5, "truncated": True}
    assert result.content.count("src/a.txt:") == 5
    assert "only the first 5 matching lines" in result.content


def test_search_pattern_that_looks_like_a_flag_runs_nothing(b: Box) -> None:
    b.put("x.sh", "#!/bin/sh\ntouch PWNED\n")
    (b.ws / "x.sh").chmod(0o755)
    b.put("src/a.txt", "says --pre=./x.sh here\n")
    result = b.call("search_code", pattern="--pre=./x.sh")
    assert result.content == "src/a.txt:1:says --pre=./x.sh here"
    assert not (b.ws / "PWNED").exists()


def test_search_without_ripgrep_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    b = Box(tmp_path, env={"PATH": str(empty)})
    fails(b.call("search_code", pattern="x"), ToolErrorCode.IO_ERROR, "install", "ripgrep")


def test_search_does_not_follow_symlinks(b: Box, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOPSECRET\n")
    (b.ws / "src").mkdir()
    os.symlink(outside, b.ws / "src/link")
    os.symlink(outside / "secret.txt", b.ws / "src/file-link")
    result = b.call("search_code", pattern="TOPSECRET")
    assert result.content == "no matches for 'TOPSECRET'"

"""read_file, write_file and edit_file: every error code, on real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from code_runner.tools import (
    ToolLimits,
)
from code_runner.tools.base import ToolErrorCode, ToolResult
from tests.helpers.toolbox import Box, fails

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

"""run_command and search_code: on real processes, bounded and policed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from code_runner.tools import (
    ToolLimits,
    command_argv,
    scrub_env,
    search_argv,
)
from code_runner.tools.base import ToolErrorCode
from tests.helpers.toolbox import Box, fails

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


def test_run_timeout_is_clipped_to_the_time_the_run_has_left(tmp_path: Path) -> None:
    b = Box(tmp_path, deadline=time.monotonic() + 1.0)
    started = time.monotonic()
    r = b.call("run_command", command="sleep 30", timeout_s=600)
    fails(r, ToolErrorCode.TIMEOUT, "the time the run has left")
    assert time.monotonic() - started < 5


def test_no_command_starts_after_the_run_deadline(tmp_path: Path) -> None:
    b = Box(tmp_path, deadline=time.monotonic() - 0.1)
    fails(b.call("run_command", command="touch made"), ToolErrorCode.TIMEOUT, "not run")
    fails(b.call("search_code", pattern="x"), ToolErrorCode.TIMEOUT, "not run")
    assert not (b.ws / "made").exists()


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

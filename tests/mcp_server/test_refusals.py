"""Every kind of bad input to the real server: each gets a tool error that says what to
do, the server keeps serving, nothing is started, and the server log records the call."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError

from tests.helpers.git import make_repo
from tests.mcp_server.mcp_helpers import (
    calc_source,
    connect,
    fix_script,
    run,
    server_log,
    task_spec,
    text,
)

pytestmark = pytest.mark.integration


def _runs_dir() -> Path:
    return Path(os.environ["CODE_RUNNER_STATE_DIR"]) / "mcp" / "runs"


def test_every_bad_call_is_a_tool_error_and_is_logged(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    script = fix_script(tmp_path)
    other = make_repo(tmp_path / "other", {"a.txt": "a\n"})
    link_out = tmp_path / "link-to-other"
    link_out.symlink_to(other)
    inner = source / "evil-link"  # untracked, inside the allowed repo, pointing out of it
    inner.symlink_to(other)
    good = task_spec(source, script)

    def spec(**changes: Any) -> dict[str, Any]:
        return {"spec": {**good, **changes}}

    without_dod = {k: v for k, v in good.items() if k != "definition_of_done"}
    calls: list[tuple[str, dict[str, Any], list[str]]] = [
        ("run_task", spec(cwd=str(other)), ["not served", "--allow-source"]),
        ("run_task", spec(cwd=str(link_out)), ["not served", str(other)]),
        ("run_task", spec(cwd=str(inner)), ["not served"]),
        ("run_task", spec(cwd=f"{source}/../source"), ["'..'"]),
        ("run_task", spec(cwd="source"), ["absolute path"]),
        ("run_task", spec(cwd=7), ["cwd must be a path string"]),
        ("run_task", spec(backend="openai:gpt-4o-mini"), ["'openai'", "--allow-backend openai"]),
        ("run_task", spec(output_dir=str(tmp_path / "o")), ["output_dir is chosen by the server"]),
        ("run_task", spec(apply_to_source=True), ["--allow-apply"]),
        ("run_task", spec(allowlist=["../calc.py"]), ["allowlist", "1 problem"]),
        ("run_task", {"spec": without_dod}, ["definition_of_done"]),
        ("run_task", spec(max_rounds="many", task_id="a/b"), ["max_rounds", "task_id"]),
        ("run_task", spec(prompt="x" * (2 * 1024 * 1024)), ["bytes; at most"]),
        ("run_task", spec(backend="scripted:/nonexistent/fix.json"), ["does not exist"]),
        ("run_task", {"spec": "run everything"}, ["spec"]),
        ("run_task", {}, ["spec"]),
        ("task_status", {"run_id": "fix-calc-00000000"}, ["no run 'fix-calc-00000000'"]),
        ("task_status", {"run_id": "../../etc/passwd"}, ["path separator or '..'"]),
        ("task_status", {"run_id": "a\\b"}, ["path separator"]),
        ("task_status", {"run_id": "x" * 100_000}, ["characters long"]),
        ("task_status", {"run_id": ".hidden"}, ["not an id this server gives"]),
        ("task_status", {"run_id": 12}, ["run_id", "string"]),
        ("task_status", {"run_id": "fix-calc-00000000", "wait_s": 3600}, ["wait_s"]),
        ("task_result", {"run_id": ["a"]}, ["run_id"]),
        ("apply_patch", {"run_id": "r-1", "mode": "burn"}, ["mode"]),
        ("apply_patch", {"run_id": "r-1", "author": "x" * 10_000}, ["author"]),
        ("reject", {"run_id": "r/1"}, ["path separator"]),
        ("exec_start", {"command": ["true"], "cwd": str(other)}, ["not served"]),
        ("exec_start", {"command": []}, ["command"]),
        ("exec_start", {"command": ["true"], "timeout": "soon"}, ["timeout"]),
        ("exec_status", {"run_id": "fix-calc-00000000"}, ["no experiment"]),
        ("no_such_tool", {}, ["no_such_tool"]),
    ]

    async def scenario() -> list[tuple[str, bool, str]]:
        seen: list[tuple[str, bool, str]] = []
        async with connect("--allow-source", str(source), "--allow-backend", "scripted") as c:
            for tool, arguments, _ in calls:
                try:
                    result = await c.call_tool(tool, arguments)
                    seen.append((tool, bool(result.is_error), text(result)))
                except MCPError as exc:  # an unknown tool is a protocol error
                    seen.append((tool, True, str(exc)))
            with pytest.raises(MCPError, match="no run"):
                await c.read_resource("code-runner://runs/fix-calc-00000000/result")
            # still serving after all of that
            assert len((await c.list_tools()).tools) == 8
        return seen

    seen = run(scenario)
    for (tool, arguments, needles), (_, is_error, message) in zip(calls, seen, strict=True):
        shown = f"{tool} {str(arguments)[:120]} -> {message[:300]}"
        assert is_error, shown
        for needle in needles:
            assert needle in message, shown
        assert "Traceback" not in message, shown
    # refusals from our code say how to fix them
    assert all("Fix:" in m for t, _, m in seen[:10] if t == "run_task")
    # nothing was started
    assert not _runs_dir().exists() or list(_runs_dir().iterdir()) == []
    # each call left a line in the server log, with the outcome and a bounded preview
    log = [e for e in server_log() if e["kind"] == "tools/call"]
    assert len(log) == len(calls)
    assert all(e["ok"] is False and e["error"] for e in log)
    assert max(len(str(e)) for e in log) < 8000, "the log copied a huge argument"
    assert any(e["kind"] == "resources/read" and e["ok"] is False for e in server_log())

"""Experiments through the real server: started at once, polled, stopped with their tree."""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_server.mcp_helpers import calc_source, connect, run, server_log, structured

pytestmark = pytest.mark.integration

PR_SET_CHILD_SUBREAPER = 36


def test_an_experiment_runs_to_its_result_and_another_is_stopped(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    quick = [sys.executable, "-c", "print('loss 0.5'); open('out.txt', 'w').write('x')"]
    slow = [sys.executable, "-c", "import time\nprint('working', flush=True)\ntime.sleep(120)"]

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with connect("--allow-source", str(source)) as c:
            first = structured(
                await c.call_tool(
                    "exec_start",
                    {"command": quick, "timeout": "60s", "success": ["exit_code == 0"]},
                )
            )
            second = structured(await c.call_tool("exec_start", {"command": slow}))
            done: dict[str, Any] = {"terminal": False}
            deadline = time.monotonic() + 60
            while not done["terminal"] and time.monotonic() < deadline:
                done = structured(await c.call_tool("exec_status", {"run_id": first["run_id"]}))
                time.sleep(0.2)
            running = structured(await c.call_tool("exec_status", {"run_id": second["run_id"]}))
            assert running["process"] == "running" and running["terminal"] is False
            stopped = structured(await c.call_tool("exec_stop", {"run_id": second["run_id"]}))
            after = structured(await c.call_tool("exec_status", {"run_id": second["run_id"]}))
            assert after["terminal"] is True and after["process"] == "ended"
            return done, stopped, after

    done, stopped, after = run(scenario)
    assert done["result"]["success"] is True, done
    assert (source / "out.txt").read_text() == "x"  # experiments run in the source dir
    assert stopped["stopped"] is True and after["run_id"] == stopped["run_id"]
    kinds = [e["kind"] for e in server_log()]
    assert kinds.count("experiment_started") == 2 and "experiment_stopped" in kinds


def test_an_experiment_started_by_an_earlier_server_is_stopped_through_its_record(
    tmp_path: Path,
) -> None:
    source = calc_source(tmp_path)
    slow = [sys.executable, "-c", "import time\nprint('working', flush=True)\ntime.sleep(120)"]

    async def start() -> dict[str, Any]:
        async with connect("--allow-source", str(source)) as c:
            started = structured(await c.call_tool("exec_start", {"command": slow}))
            deadline = time.monotonic() + 30
            state: dict[str, Any] = {}
            while time.monotonic() < deadline:
                state = structured(await c.call_tool("exec_status", {"run_id": started["run_id"]}))
                if (state.get("status") or {}).get("state") == "running":
                    break
                time.sleep(0.2)
            return started

    async def stop(run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect("--allow-source", str(source)) as c:
            stopped = structured(await c.call_tool("exec_stop", {"run_id": run_id}))
            after: dict[str, Any] = {"process": "running"}
            deadline = time.monotonic() + 60
            while after["process"] != "ended" and time.monotonic() < deadline:
                after = structured(await c.call_tool("exec_status", {"run_id": run_id}))
                time.sleep(0.2)
            return stopped, after

    # as when the host program is a subreaper: the orphaned experiment becomes this test's
    # child, and once it ends it stays a zombie nobody reaps, which is not "running"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        started = run(start)  # that server has exited; its experiment goes on
        stopped, after = run(lambda: stop(started["run_id"]))
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    assert stopped["stopped"] is True and stopped["by"] in {"monitor", "watchdog"}, stopped
    assert after["terminal"] is True and after["process"] == "ended", after
    assert after["result"]["state"] == "stopped_by_user", after["result"]
    assert "through the MCP server" in json.dumps(after["result"]), after["result"]
    assert "experiment_stop_requested" in [e["kind"] for e in server_log()]

"""The transports and the server's lifetime: HTTP on loopback only, bad flags refused
before anything starts, and a run that outlives the server that started it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.helpers.tasks import fingerprint, run_cli
from tests.mcp_server.mcp_helpers import (
    calc_source,
    connect,
    fix_script,
    run,
    server_log,
    structured,
    task_spec,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("address", ["0.0.0.0:8765", "192.0.2.1:80", "example.invalid:80"])
def test_http_refuses_a_non_loopback_host(address: str) -> None:
    proc = run_cli("mcp", "--http", address, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert "127.0.0.1" in proc.stderr


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--http", "127.0.0.1"], "not HOST:PORT"),
        (["--http", "127.0.0.1:99999"], "not HOST:PORT"),
        (["--allow-source", "/nonexistent/repo"], "not a directory"),
    ],
)
def test_bad_flags_are_refused_before_serving(flags: list[str], needle: str) -> None:
    proc = run_cli("mcp", *flags, timeout=30)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_streamable_http_on_loopback_serves_the_tools(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "code_runner", "mcp", "--allow-source", str(source),
         "--http", f"127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)

        async def scenario() -> set[str]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                refused = await c.call_tool("task_status", {"run_id": "../x"})
                assert refused.is_error
                return {t.name for t in (await c.list_tools()).tools}

        assert "run_task" in run(scenario)
    finally:
        server.terminate()
        server.wait(timeout=30)
    started = [e for e in server_log() if e["kind"] == "server_started"]
    assert started[0]["transport"] == f"http://127.0.0.1:{port}/mcp"


def test_a_run_outlives_the_server_and_a_new_server_reads_it(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    slow_dod = f"{sys.executable} -c 'import time; time.sleep(2)' && {sys.executable} check_calc.py"
    spec = task_spec(source, fix_script(tmp_path))
    spec["definition_of_done"] = {**spec["definition_of_done"], "command": slow_dod}
    served = ("--allow-source", str(source), "--allow-backend", "scripted")

    async def start_and_leave() -> str:
        async with connect(*served) as c:
            return str(structured(await c.call_tool("run_task", {"spec": spec}))["run_id"])

    run_id = run(start_and_leave)
    stopped = [e for e in server_log() if e["kind"] == "server_stopped"][-1]
    assert [r["run_id"] for r in stopped["still_running"]] == [run_id]

    async def come_back() -> dict[str, Any]:
        async with connect(*served) as c:
            status: dict[str, Any] = {"terminal": False}
            deadline = time.monotonic() + 120
            while not status["terminal"] and time.monotonic() < deadline:
                status = structured(
                    await c.call_tool("task_status", {"run_id": run_id, "wait_s": 10})
                )
            assert status["state"] == "passed", status
            return structured(await c.call_tool("task_result", {"run_id": run_id}))

    result = run(come_back)
    assert result["status"] == "passed" and result["source_unchanged"] is True
    assert fingerprint(source) == before

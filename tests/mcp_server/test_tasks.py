"""A task run through the real `code-runner mcp` over stdio, with the SDK's own client:
started without blocking, polled with progress, read as a tool and as a resource, then
checked, refused, and applied by a second server on the same state dir."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.git import git
from tests.helpers.tasks import fingerprint
from tests.mcp_server.mcp_helpers import (
    calc_source,
    connect,
    fix_script,
    run,
    server_log,
    structured,
    task_spec,
    text,
)

pytestmark = pytest.mark.integration


def test_a_run_is_started_polled_and_read(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    spec = task_spec(source, fix_script(tmp_path))
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def scenario() -> dict[str, Any]:
        async with connect("--allow-source", str(source), "--allow-backend", "scripted") as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert names == {
                "run_task", "task_status", "task_result", "apply_patch", "reject",
                "exec_start", "exec_status", "exec_stop",
            }  # fmt: skip
            started = time.monotonic()
            answer = structured(await c.call_tool("run_task", {"spec": spec}))
            assert time.monotonic() - started < 10, "run_task waited for the run"
            run_id = answer["run_id"]
            assert answer["state"] == "started" and run_id.startswith("fix-calc-")
            first = structured(await c.call_tool("task_status", {"run_id": run_id}))
            assert first["run_id"] == run_id and "state" in first
            status = structured(
                await c.call_tool(
                    "task_status",
                    {"run_id": run_id, "wait_s": 25},
                    progress_callback=on_progress,
                )
            )
            for _ in range(10):
                if status["terminal"]:
                    break
                status = structured(
                    await c.call_tool("task_status", {"run_id": run_id, "wait_s": 25})
                )
            assert status["state"] == "passed" and status["terminal"] is True
            result = structured(await c.call_tool("task_result", {"run_id": run_id}))
            resource = await c.read_resource(answer["result_resource"])
            as_resource = json.loads(resource.contents[0].text)  # type: ignore[union-attr]
            assert as_resource == result
            return result

    result = run(scenario)
    assert result["status"] == "passed" and result["dod_passed"] is True
    assert result["verdict"]["passed"] is True and "2 passed" in result["verdict"]["stdout_tail"]
    assert "+    return a * b" in result["patch"] and result["patch_truncated"] is False
    assert result["mismatches"]["dropped_changes"] == []
    assert result["source_unchanged"] is True
    assert fingerprint(source) == before, "the source changed"
    # progress notifications: strictly growing, naming the state and the round
    values = [p[0] for p in seen]
    assert values == sorted(set(values)) and len(values) >= 2
    assert any("passed" in (p[2] or "") for p in seen)
    # the nested run's record is whole
    out = Path(result["record_files"]["result"]).parent
    for suffix in ("request.json", "status.json", "events.jsonl", "result.json", "patch"):
        assert (out / f"fix-calc.{suffix}").is_file(), suffix
    kinds = [e["kind"] for e in server_log()]
    assert kinds[0] == "server_started" and "run_started" in kinds
    assert kinds[-1] == "server_stopped"


def test_check_then_refused_apply_then_a_second_server_commits(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    spec = task_spec(source, fix_script(tmp_path))
    served = ("--allow-source", str(source), "--allow-backend", "scripted")

    async def first_server() -> str:
        async with connect(*served) as c:
            run_id = structured(await c.call_tool("run_task", {"spec": spec}))["run_id"]
            status: dict[str, Any] = {"terminal": False}
            while not status["terminal"]:
                status = structured(
                    await c.call_tool("task_status", {"run_id": run_id, "wait_s": 25})
                )
            check = structured(await c.call_tool("apply_patch", {"run_id": run_id}))
            assert check["would_apply"] is True and check["would_pass"] is True
            refused = await c.call_tool("apply_patch", {"run_id": run_id, "mode": "commit"})
            assert refused.is_error and "--allow-apply" in text(refused)
            return str(run_id)

    run_id = run(first_server)
    before = fingerprint(source)
    assert "return a - b" in (source / "calc.py").read_text()

    async def second_server() -> dict[str, Any]:
        async with connect(*served, "--allow-apply") as c:
            done = structured(await c.call_tool("task_result", {"run_id": run_id}))
            assert done["status"] == "passed"  # the registry outlived the first server
            applied = structured(
                await c.call_tool(
                    "apply_patch",
                    {"run_id": run_id, "mode": "commit", "author": "Bot <bot@example.com>"},
                )
            )
            again = await c.call_tool("reject", {"run_id": run_id, "reason": "changed my mind"})
            assert again.is_error and "already applied" in text(again)
            return applied

    applied = run(second_server)
    assert applied["ok"] is True and applied["source_commit"]
    assert fingerprint(source) != before
    assert (source / "calc.py").read_text().endswith("return a * b\n")
    assert git(source, "log", "-1", "--format=%an").strip() == "Bot"
    assert git(source, "status", "--porcelain").strip() == ""


def test_reject_marks_the_record(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    spec = task_spec(source, fix_script(tmp_path))

    async def scenario() -> tuple[dict[str, Any], str]:
        async with connect("--allow-source", str(source), "--allow-backend", "scripted") as c:
            run_id = structured(await c.call_tool("run_task", {"spec": spec}))["run_id"]
            early = await c.call_tool("task_result", {"run_id": run_id})
            status: dict[str, Any] = {"terminal": False}
            while not status["terminal"]:
                status = structured(
                    await c.call_tool("task_status", {"run_id": run_id, "wait_s": 25})
                )
            rejected = structured(
                await c.call_tool("reject", {"run_id": run_id, "reason": "not now"})
            )
            assert rejected["rejected"] is True and rejected["already_rejected"] is False
            result = structured(await c.call_tool("task_result", {"run_id": run_id}))
            return result, text(early) if early.is_error else ""

    result, early = run(scenario)
    assert result["decision"] == "rejected"
    if early:  # the run may already have ended on a fast machine
        assert "no result yet" in early and "task_status" in early

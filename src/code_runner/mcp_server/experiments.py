"""The experiment tools' work: a command under the monitor, as `code-runner exec --yes`
runs it, in an allowed source dir, with its record in the server's state dir."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import code_runner.mcp_server.reading as reading
from code_runner.mcp_server.limits import Limits, Refused
from code_runner.mcp_server.log import ServerLog
from code_runner.mcp_server.runs import EXPERIMENT, Entry, Registry, new_id, python_argv
from code_runner.monitor.spec import build_spec
from code_runner.monitor.stop import request_stop

STOP_GRACE_S = 10.0


def start(
    limits: Limits,
    registry: Registry,
    log: ServerLog,
    command: Sequence[str],
    cwd: str | None,
    timeout: str | None,
    success: Sequence[str],
) -> dict[str, Any]:
    """Validate the options as `exec` does, then start it; return its id at once."""
    if not command:
        raise Refused("command is empty.", fix="pass the program and its arguments as a list.")
    source = limits.source(cwd) if cwd is not None else limits.default_source()
    options = {
        "command": tuple(command),
        "cwd": str(source),
        "timeout": timeout,
        "success": tuple(success),
    }
    build_spec({}, options, source="exec_start")
    ident = new_id("exp")
    directory = registry.dir_for(ident)
    directory.mkdir(parents=True)
    argv = python_argv("exec", "--yes", "--run-dir", str(directory / "record"))
    argv += ["--cwd", str(source)]
    if timeout is not None:
        argv += ["--timeout", timeout]
    for criterion in success:
        argv += ["--success", criterion]
    entry = registry.start(ident, EXPERIMENT, [*argv, "--", *command], {"cwd": str(source)})
    log.write("experiment_started", run_id=ident, pid=entry.meta["pid"])
    return {
        "run_id": ident,
        "state": "started",
        "record_dir": str(directory / "record"),
        "next": "poll exec_status; exec_stop ends it",
    }


def status(registry: Registry, entry: Entry) -> dict[str, Any]:
    record = entry.dir / "record"
    alive = registry.alive(entry)
    view: dict[str, Any] = {"run_id": entry.run_id, "record_dir": str(record)}
    view["process"] = "running" if alive else "ended"
    view["status"] = reading.experiment_status(record)
    found = reading.experiment_result(record)
    view["result"] = found
    view["terminal"] = found is not None or not alive
    if not alive and found is None:
        view["exit_code"] = registry.exit_code(entry)
        view["error"] = reading.tail(entry.stderr_path).strip() or "ended without a result"
    return view


def stop(registry: Registry, log: ServerLog, entry: Entry) -> dict[str, Any]:
    if not registry.alive(entry):
        return {"run_id": entry.run_id, "stopped": False, "detail": "it had already ended"}
    if not registry.owns(entry):
        return _stop_through_record(log, entry)
    code = registry.stop(entry, STOP_GRACE_S)
    log.write("experiment_stopped", run_id=entry.run_id, exit_code=code)
    return {"run_id": entry.run_id, "stopped": True, "exit_code": code}


def _stop_through_record(log: ServerLog, entry: Entry) -> dict[str, Any]:
    """An experiment an earlier server started: ask it through its record, as
    `code-runner stop` does, so its monitor (or watchdog) ends the tree and says why."""
    asked = request_stop(entry.dir / "record", via="mcp")
    if asked.already_finished:
        return {"run_id": entry.run_id, "stopped": False, "detail": "it had already ended"}
    log.write("experiment_stop_requested", run_id=entry.run_id, by=asked.by, pid=asked.pid)
    return {
        "run_id": entry.run_id,
        "stopped": True,
        "by": asked.by,
        "detail": f"asked its {asked.by} to stop it; exec_status shows when it has ended",
    }


__all__ = ["start", "status", "stop"]

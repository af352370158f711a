"""The task tools' work, without the protocol: start a run, say where it is, read its
result, and decide on it (check, apply, commit, reject) through the same code as
`code-runner run`, `apply` and `reject`. Every refusal is a `CodeRunnerError` with a fix."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import code_runner.mcp_server.reading as reading
from code_runner import runner
from code_runner.apply import ApplyOutcome, decide
from code_runner.apply.commit import GitIdentity
from code_runner.mcp_server.limits import Limits, Refused
from code_runner.mcp_server.log import ServerLog
from code_runner.mcp_server.runs import TASK, Entry, Registry, new_id, python_argv
from code_runner.record.finished import FinishedRun
from code_runner.task import MAX_SPEC_BYTES, validate_spec_data
from code_runner.task.spec import TASK_ID_PATTERN

RESULT_URI = "code-runner://runs/{run_id}/result"
APPLY_MODES = ("check", "apply", "commit")


def _id_prefix(data: Mapping[str, object]) -> str:
    task_id = data.get("task_id")
    if isinstance(task_id, str) and re.match(TASK_ID_PATTERN, task_id):
        cleaned = task_id.replace(".", "_")
        return cleaned if cleaned[0].isalnum() else "run"
    return "run"


def _checked_spec(limits: Limits, data: Mapping[str, object]) -> dict[str, object]:
    """The spec with the server's choices filled in, after the server's own limits."""
    size = len(json.dumps(data, default=str))
    if size > MAX_SPEC_BYTES:
        raise Refused(
            f"the task spec is {size} bytes; at most {MAX_SPEC_BYTES} are accepted.",
            fix="shorten the prompt; name long context in read_context files instead.",
        )
    if "output_dir" in data:
        raise Refused(
            "output_dir is chosen by the server (each run's record goes under its state dir).",
            fix="leave output_dir out; task_status and task_result give the record's path.",
        )
    spec = dict(data)
    cwd = spec.get("cwd")
    if cwd is None:
        spec["cwd"] = str(limits.default_source())
    elif isinstance(cwd, str):
        spec["cwd"] = str(limits.source(cwd))
    else:
        raise Refused(
            f"cwd must be a path string, got {type(cwd).__name__}.",
            fix="set cwd to the absolute path of an allowed source repo, or leave it out "
            "when the server serves one.",
        )
    backend = spec.get("backend")
    if isinstance(backend, str):
        limits.backend(backend)
    if spec.get("apply_to_source") is True or spec.get("commit_on_success") is True:
        limits.apply_allowed()
    return spec


def start(limits: Limits, registry: Registry, log: ServerLog, data: object) -> dict[str, Any]:
    """Validate the spec as the CLI does, run preflight, start the run; return its id."""
    if not isinstance(data, Mapping):
        raise Refused(
            f"spec must be an object of task spec fields, got {type(data).__name__}.",
            fix="pass the fields of a task spec (see `code-runner schema`).",
        )
    spec = _checked_spec(limits, data)
    ident = new_id(_id_prefix(spec))
    directory = registry.dir_for(ident)
    spec["output_dir"] = str(directory / "out")
    task = validate_spec_data(spec, base_dir=directory, source="run_task spec")
    pre = runner.preflight(task, base_dir=directory)
    directory.mkdir(parents=True)
    spec_path = directory / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    meta = {"task_id": task.task_id, "source": str(task.cwd), "backend": task.backend}
    entry = registry.start(ident, TASK, python_argv("run", str(spec_path)), meta)
    log.write("run_started", run_id=ident, task_id=task.task_id, pid=entry.meta["pid"])
    return {
        "run_id": ident,
        "state": "started",
        "task_id": task.task_id,
        "source": str(task.cwd),
        "output_dir": str(entry.output_dir),
        "warnings": list(pre.warnings),
        "next": "poll task_status (wait_s waits for the end), then task_result",
        "result_resource": RESULT_URI.format(run_id=ident),
    }


def status(registry: Registry, entry: Entry) -> dict[str, Any]:
    found = reading.task_status(entry.output_dir, entry.task_id)
    alive = registry.alive(entry)
    view: dict[str, Any] = {"run_id": entry.run_id, "task_id": entry.task_id}
    view.update(found or {"state": "starting", "terminal": False})
    view["process"] = "running" if alive else "ended"
    view["output_dir"] = str(entry.output_dir)
    if not alive and not reading.has_result(entry.output_dir, entry.task_id):
        code = registry.exit_code(entry)
        view.update(
            state="ended_without_result",
            terminal=True,
            exit_code=code,
            error=reading.tail(entry.stderr_path).strip()
            or "the run process ended without writing a result",
        )
    return view


def result(entry: Entry) -> dict[str, Any]:
    found = reading.task_result(entry.output_dir, entry.task_id)
    if found is None:
        raise Refused(
            f"run {entry.run_id} has no result yet.",
            fix="poll task_status until terminal is true, then ask again.",
        )
    return {"run_id": entry.run_id, "task_id": entry.task_id, **found}


def decide_on(
    limits: Limits, entry: Entry, mode: str, author: str | None, log: ServerLog
) -> dict[str, Any]:
    """`check` (changes nothing), `apply` or `commit`, as `code-runner apply` does."""
    if mode not in APPLY_MODES:
        raise Refused(f"mode {mode!r} is not one of {', '.join(APPLY_MODES)}.", fix="pick one.")
    run = reading.finished_run(entry.output_dir)
    limits.source(str(run.cwd))
    identity = GitIdentity.parse(author) if author else None
    if mode == "check":
        plan = decide.plan(run, commit=False, author=identity)
        verdict = decide.check_dod(run, plan)
        return {
            "run_id": entry.run_id,
            "mode": mode,
            "would_apply": True,
            "would_pass": verdict.passed,
            "verdict": verdict.to_dict(),
            "plan": plan.to_dict(),
        }
    limits.apply_allowed()
    with reading.locked_run(entry.output_dir) as run:  # LockHeld while a run or apply holds it
        outcome = _apply(entry, run, mode, identity, log)
    return {"run_id": entry.run_id, "mode": mode, "ok": outcome.ok, **outcome.result_fields()}


def _apply(
    entry: Entry, run: FinishedRun, mode: str, identity: GitIdentity | None, log: ServerLog
) -> ApplyOutcome:
    record = reading.reopened(run)
    repaired = decide.repair_first(run, record)
    if repaired is not None:
        log.write("apply_repaired", run_id=entry.run_id, action=repaired.action)
        run = reading.finished_run(entry.output_dir)
    decide.plan(run, commit=mode == "commit", author=identity)
    outcome = decide.apply_run(
        run, commit=mode == "commit", author=identity, run_hooks=False, record=record
    )
    log.write("applied", run_id=entry.run_id, mode=mode, ok=outcome.ok, commit=outcome.commit)
    if outcome.refused:
        raise Refused(outcome.error or "the apply was refused.", fix="see the run's events.jsonl.")
    return outcome


def reject(entry: Entry, reason: str | None) -> dict[str, Any]:
    with reading.locked_run(entry.output_dir) as run:  # LockHeld while a run or apply holds it
        changed = decide.reject(run, reason, reading.reopened(run))
    return {"run_id": entry.run_id, "rejected": True, "already_rejected": not changed}


__all__ = ["APPLY_MODES", "RESULT_URI", "decide_on", "reject", "result", "start", "status"]

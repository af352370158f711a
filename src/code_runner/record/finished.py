"""A finished run's record, checked, and the two decisions a person makes on it.

`code-runner apply` and `code-runner reject` start here. Both refuse a record that is not
whole (no terminal status, no result, no request, no patch), whose result, request or patch
is not as the runner sealed it (`seal`), or whose patch does not match the digest in
result.json: a decision is only as good as the evidence it rests on. An apply
appends its events to the run's events.jsonl and its outcome to result.json; a reject marks
result.json, and neither touches anything else in the record (both write through
`RunRecord.reopen`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import code_runner.record.seal as seal
from code_runner import files
from code_runner.errors import RecordError, UsageError
from code_runner.record.paths import RecordPaths
from code_runner.record.result import RunResult, load_result
from code_runner.record.state import TERMINAL_STATES, RunState
from code_runner.record.writer import take_lock
from code_runner.task import DefinitionOfDone, DodEnv
from code_runner.task.paths import Allowlist


@dataclass(frozen=True)
class FinishedRun:
    """A run record that passed every check; what apply and reject act on."""

    paths: RecordPaths
    result: RunResult
    run_id: str
    task_id: str
    title: str
    base: str
    cwd: Path
    allowlist: Allowlist
    dod: DefinitionOfDone
    rollback: bool
    patch_sha256: str  # the sealed digest; apply copies `paths.patch` privately against it
    env: DodEnv = field(default_factory=DodEnv)  # the spec's env section


def _incomplete(path: Path, what: str) -> RecordError:
    return RecordError(
        f"the run record {path} is incomplete: {what}.",
        fix="apply or reject only a finished run's output_dir; re-run the task if its record "
        "was damaged.",
    )


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(files.read_regular(path))
    except FileNotFoundError as exc:
        raise _incomplete(path.parent, f"{path.name} is missing") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _incomplete(path.parent, f"{path.name} is not readable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise _incomplete(path.parent, f"{path.name} does not hold a JSON object")
    return data


def _result_path(target: Path) -> Path:
    if target.is_file() and target.name.endswith(".result.json"):
        return target
    if not target.is_dir():
        raise UsageError(
            f"{target} is not a run's output dir.",
            fix="pass the output_dir of a finished run (or its *.result.json).",
        )
    found = sorted(target.glob("*.result.json"))
    if not found:
        status = sorted(target.glob("*.status.json"))
        if status:
            raise _incomplete(target, "it has no result.json (is the run still going?)")
        raise UsageError(
            f"{target} holds no run record.", fix="pass the output_dir of a finished run."
        )
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise UsageError(
            f"{target} holds the records of several tasks ({names}).",
            fix="pass the *.result.json of the one you mean.",
        )
    return found[0]


# what an apply or a reject rests on: the result, the request, the patch, and the story of
# the run (an edited status or event is refused like an edited result)
_SEALED = ("result.json", "request.json", "patch", "status.json", "events.jsonl")


def _task_ids(target: Path) -> list[str]:
    """The tasks whose records `target` (a run dir, or its result.json) holds or will hold."""
    if target.name.endswith(".result.json"):
        return [target.name.removesuffix(".result.json")]
    if not target.is_dir():
        return []
    names = [p.name for p in target.glob("*.result.json")] or [
        p.name for p in target.glob("*.lock")
    ]
    return sorted({n.removesuffix(".result.json").removesuffix(".lock") for n in names})


@contextlib.contextmanager
def locked(target: Path) -> Iterator[FinishedRun]:
    """`load` under the record's lock, held until the block ends: LockHeld (exit 3) while a
    run writes that record or another apply or reject decides on it."""
    held: list[int] = []
    try:
        for task_id in _task_ids(target):
            held.append(
                take_lock(RecordPaths(target if target.is_dir() else target.parent, task_id))
            )
        yield load(target)
    finally:
        for fd in held:
            os.close(fd)


def load(target: Path) -> FinishedRun:
    """Load and check a finished run's record; raise `RecordError` on any gap or mismatch."""
    result_path = _result_path(target)
    task_id = result_path.name.removesuffix(".result.json")
    seal.verify(RecordPaths(result_path.parent, task_id), _SEALED)
    result = load_result(result_path)
    missing = [k for k in ("base", "patch_sha256") if not getattr(result, k)]
    if missing:
        raise _incomplete(result_path.parent, f"result.json has no {', '.join(missing)}")
    assert result.patch_sha256 is not None
    paths = RecordPaths(result_path.parent, result.task_id)
    if paths.result != result_path:
        raise _incomplete(paths.output_dir, "result.json is named for another task")
    status = _json(paths.status)
    try:
        terminal = RunState(str(status.get("state"))) in TERMINAL_STATES
    except ValueError:
        terminal = False
    if not terminal or status.get("run_id") != result.run_id:
        raise _incomplete(paths.output_dir, "status.json is not the finished state of this run")
    request = _json(paths.request)
    spec = request.get("spec")
    if request.get("run_id") != result.run_id or not isinstance(spec, dict):
        raise _incomplete(paths.output_dir, "request.json is not this run's request")
    try:
        hashed = hashlib.sha256()
        for chunk in files.read_chunks(paths.patch):
            hashed.update(chunk)
        digest = hashed.hexdigest()
    except OSError as exc:
        raise _incomplete(paths.output_dir, f"the patch file cannot be read ({exc})") from exc
    if digest != result.patch_sha256:
        raise RecordError(
            f"the patch file {paths.patch} does not match the digest recorded in result.json "
            f"(recorded {result.patch_sha256[:16]}…, file {digest[:16]}…): it was "
            "changed after the run.",
            fix="re-run the task to get a patch the runner verified; never apply an edited one.",
        )
    try:
        dod = DefinitionOfDone.model_validate(spec.get("definition_of_done"))
        allowlist = Allowlist.parse(list(spec.get("allowlist") or []))
        cwd = Path(str(spec["cwd"]))
        env = DodEnv.model_validate(spec.get("env") or {})
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise _incomplete(paths.output_dir, f"the request's spec is not usable ({exc})") from exc
    return FinishedRun(
        paths=paths,
        result=result,
        run_id=result.run_id,
        task_id=result.task_id,
        title=str(spec.get("title") or result.title or result.task_id),
        base=result.base,
        cwd=cwd,
        allowlist=allowlist,
        dod=dod,
        env=env,
        rollback=spec.get("rollback_on_failure") is not False,
        patch_sha256=result.patch_sha256,
    )


__all__ = ["FinishedRun", "load"]

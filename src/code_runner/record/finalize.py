"""`code-runner finalize RUN_DIR`: the compact reports rebuilt from a run's evidence.

result.md, eval.md and skill-review.md are renderings of result.json, request.json (the
spec), run.json and the events; finalize writes them again from those, for a run that
ended (passed, failed, stopped, or killed and then marked abandoned by `code-runner gc`),
and touches no other file. It refuses a run that is still going, and a record whose
result or request is not as the runner sealed it.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

import code_runner.record.seal as seal
from code_runner import files
from code_runner.errors import RecordError
from code_runner.record.paths import RecordPaths
from code_runner.record.result import load_result
from code_runner.record.state import TERMINAL_STATES, RunState
from code_runner.record.views import write_reports
from code_runner.task import TaskSpec


def record_in(run_dir: Path) -> RecordPaths:
    """The one task record in `run_dir` (the newest, when several task ids share it)."""
    found = sorted(run_dir.glob("*.status.json"), key=lambda p: p.stat().st_mtime)
    if not run_dir.is_dir() or not found:
        raise RecordError(
            f"{run_dir} holds no task run record (*.status.json).",
            fix="pass the output_dir of a `code-runner run`.",
        )
    return RecordPaths(run_dir, found[-1].name.removesuffix(".status.json"))


def _ended(paths: RecordPaths) -> None:
    try:
        state = RunState(json.loads(files.read_regular(paths.status))["state"])
    except (OSError, ValueError, KeyError, TypeError):
        state = None
    if state not in TERMINAL_STATES or not paths.result.exists():
        raise RecordError(
            f"the run {paths.task_id} in {paths.output_dir} has not ended "
            f"(state {state.value if state else 'unknown'}, "
            f"{'a' if paths.result.exists() else 'no'} result.json).",
            fix="wait for it to end (`code-runner watch`); a run whose process was killed is "
            "marked abandoned by `code-runner gc`, and can be finalized after that.",
        )


def _spec(paths: RecordPaths) -> TaskSpec:
    try:
        request = json.loads(files.read_regular(paths.request))
        return TaskSpec.model_validate(request["spec"])
    except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
        raise RecordError(
            f"the run's {paths.request.name} does not hold its task spec ({exc}).",
            fix="re-run the task; a record without its request cannot be rendered again.",
        ) from None


def finalize(run_dir: Path) -> list[Path]:
    """Write result.md, eval.md and skill-review.md again; the files written."""
    paths = record_in(run_dir)
    _ended(paths)
    seal.verify(paths, ["result.json", "request.json"])
    result = load_result(paths.result)
    write_reports(paths, result, _spec(paths))
    return [paths.result_md, paths.eval_md, paths.skill_review_md]


__all__ = ["finalize", "record_in"]

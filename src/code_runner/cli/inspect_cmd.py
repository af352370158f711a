"""`status`, `watch` and `result`: read a run record, never write it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

import code_runner.cli.render as render
from code_runner import files
from code_runner.cli.narrate import narrated
from code_runner.errors import RecordError, UsageError
from code_runner.events import EventKind
from code_runner.monitor import load_result as load_experiment_result
from code_runner.monitor import render_status
from code_runner.record import RecordPaths, RunResult, RunUsage, being_written, load_result, seal


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(files.read_regular(path))
    except FileNotFoundError as exc:
        raise RecordError(f"{path} does not exist.", fix="check the path.") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(
            f"{path} is not a readable JSON record ({exc}).",
            fix="point at a run's output_dir, status.json or result.json.",
        ) from exc
    if not isinstance(data, dict):
        raise RecordError(f"{path} does not hold a JSON object.", fix="check the path.")
    return data


def locate(target: Path) -> tuple[Path, Path]:
    """(status_path, events_path) for an output dir, a status file or a result file."""
    if target.is_dir():
        found = sorted(target.glob("*.status.json"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise UsageError(
                f"{target} holds no run record (*.status.json).",
                fix="pass the output_dir of a run, or its status.json or result.json.",
            )
        status = found[-1]
    elif target.name.endswith((".status.json", ".result.json")):
        status = target.with_name(target.name.rsplit(".", 2)[0] + ".status.json")
    elif not target.exists():
        raise UsageError(f"{target} does not exist.", fix="check the path.")
    else:
        raise UsageError(
            f"{target} is not a run record.",
            fix="pass an output_dir, a *.status.json or a *.result.json file.",
        )
    events = status.with_name(status.name.replace(".status.json", ".events.jsonl"))
    return status, events


def _summary(status: dict[str, Any]) -> str:
    return (
        f"{status.get('task_id')}: {status.get('state')}"
        + (f" ({status['step']})" if status.get("step") else "")
        + f" — round {status.get('round')}/{status.get('max_rounds')}, "
        f"best score {float(status.get('best_score') or 0):.2f}, updated {status.get('updated_at')}"
        + _usage_said(status.get("usage"))
    )


def _usage_said(usage: object) -> str:
    """`; 3 model calls, 1,234 tokens (...), $0.0042` from a status's usage, if any."""
    if not isinstance(usage, dict):
        return ""
    try:
        return "; " + RunUsage.model_validate(usage).describe()
    except ValueError:
        return ""


@click.command("status")
@click.argument("target", type=click.Path(path_type=Path))
@click.option(
    "--tail-events",
    type=click.IntRange(0, 10_000),
    default=0,
    show_default=True,
    help="Also show the run's last N events.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status_command(target: Path, tail_events: int, as_json: bool) -> int:
    """Show a run's state (TARGET: output dir, status.json or result.json).

    An experiment's run dir (`code-runner exec`) works too.
    """
    if target.is_dir() and (target / "status.json").exists():
        if as_json:
            events = files.read_jsonl(target / "events.jsonl")[-tail_events:] if tail_events else []
            render.print_json({"status": _load_json(target / "status.json"), "events": events})
            return 0
        render.console().print(render_status(target), markup=False)
        return 0
    status_path, events_path = locate(target)
    status = _load_json(status_path)
    events = files.read_jsonl(events_path)[-tail_events:] if tail_events else []
    if as_json:
        render.print_json({"status": status, "events": events})
        return 0
    out = render.console()
    out.print(_summary(status))
    for event in events:
        out.print(f"  {narrated(event)}", markup=False)
    return 0


@click.command("watch")
@click.argument("target", type=click.Path(path_type=Path))
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    show_default=True,
    help="Seconds between looks at the record.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0),
    default=0,
    help="Stop watching after this many seconds (0: until the run ends).",
)
def watch_command(target: Path, interval: float, timeout_s: float) -> int:
    """Follow a run live until it reaches a terminal state; exit 0 iff it passed."""
    if _is_experiment(target):
        return _watch_experiment(target, interval, timeout_s)
    out = render.console()
    status_path, events_path = locate(target)
    seen = 0
    started = time.monotonic()
    last = ""
    orphaned = False
    while True:
        events = files.read_jsonl(events_path)
        for event in events[seen:]:
            if event.get("kind") != "state_changed":  # the summary line says the state
                out.print(narrated(event), markup=False)
        seen = len(events)
        status = _load_json(status_path)
        summary = _summary(status)
        if summary != last:
            out.print(summary, markup=False)
            last = summary
        if status.get("terminal"):
            return 0 if status.get("state") == "passed" else 1
        if orphaned:
            raise _orphaned(status_path, status)
        if timeout_s and time.monotonic() - started > timeout_s:
            out.print("stopped watching (timeout); the run goes on")
            return 124
        # read once more after no writer is seen: it may have finished in between
        orphaned = not being_written(_record_paths(status_path, status))
        if not orphaned:
            time.sleep(interval)


def _record_paths(status_path: Path, status: dict[str, Any]) -> RecordPaths:
    task_id = status.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        task_id = status_path.name.removesuffix(".status.json")
    return RecordPaths(status_path.parent, task_id)


def _orphaned(status_path: Path, status: dict[str, Any]) -> RecordError:
    return RecordError(
        f"the run in {status_path.parent} stopped at {status.get('state', 'an unknown state')}"
        f" and no process is writing its record (its runner, pid {status.get('pid', '?')},"
        " was killed or the status was edited).",
        fix="run `code-runner gc` to mark it abandoned and remove its workspace, then run the"
        " task again.",
    )


def _watch_line(event: dict[str, Any]) -> str | None:
    """What the live watch of an agent CLI saw, said as on the run's terminal."""
    try:
        kind = EventKind(str(event.get("kind")))
    except ValueError:
        return None
    return render.ProgressPrinter.describe_watch(kind, event)


def _is_experiment(target: Path) -> bool:
    return target.is_dir() and (target / "status.json").is_file()


def _watch_experiment(run_dir: Path, interval: float, timeout_s: float) -> int:
    """Print each new event of an exec run dir until its result is written."""
    out = render.console()
    seen = 0
    started = time.monotonic()
    while True:
        events = files.read_jsonl(run_dir / "events.jsonl")
        for event in events[seen:]:
            detail = event.get("detail") or event.get("to_state") or ""
            out.print(f"{event.get('at')} {event.get('kind')} {detail}".rstrip(), markup=False)
        seen = len(events)
        if (run_dir / "result.json").exists():
            out.print(render_status(run_dir), markup=False)
            return 0 if load_experiment_result(run_dir).success else 1
        if timeout_s and time.monotonic() - started > timeout_s:
            out.print("stopped watching (timeout); the run goes on")
            return 124
        time.sleep(interval)


@click.command("result")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def result_command(file: Path, as_json: bool) -> int:
    """Show a result file (or an output dir's); exit 0 iff dod_passed.

    An experiment's run dir: exit 0 iff it succeeded."""
    if not file.exists():
        raise UsageError(
            f"{file} does not exist.", fix="pass a run's output dir or its *.result.json."
        )
    if _is_experiment(file):
        experiment = load_experiment_result(file)
        if as_json:
            render.print_json(experiment.model_dump(mode="json"))
        else:
            render.console().print(render_status(file), markup=False)
        return 0 if experiment.success else 1
    if file.is_dir():
        found = sorted(file.glob("*.result.json"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise UsageError(f"{file} holds no *.result.json.", fix="has the run finished?")
        file = found[-1]
    elif not file.name.endswith(".result.json"):
        raise UsageError(
            f"{file} is not a run's result file.",
            fix="pass a run's output dir or its *.result.json.",
        )
    # RecordError (5) if any was changed after the run
    seal.verify_record_of(file, ("result.json", "patch", "status.json", "events.jsonl"))
    result = load_result(file)
    if as_json:
        render.print_json(result.to_json())
    else:
        _print_result(result)
    return 0 if result.dod_passed else 1


def _print_result(result: RunResult) -> None:
    out = render.console()
    out.print(f"{result.task_id}: {result.status.value} ({result.reason.value})", markup=False)
    for key, value in (
        ("dod_passed", result.dod_passed),
        ("rounds", result.rounds),
        ("best_score", result.best_score),
        ("source_unchanged", result.source_unchanged),
        ("worktree_removed", result.worktree_removed),
        ("patch_artifact", result.patch_artifact),
        ("usage", result.usage.describe() if result.usage else "none reported"),
        ("apply", apply_said(result)),
        ("error", result.error),
    ):
        out.print(f"  {key}: {value}", markup=False)


def apply_said(result: RunResult) -> str:
    """What became of the patch in the source, in words."""
    if result.decision == "rejected":
        return "rejected" + (f": {result.decision_reason}" if result.decision_reason else "")
    if result.source_commit:
        return f"committed {result.source_commit[:12]}"
    if result.applied_in_source:
        return "applied to the source (not committed)"
    if result.source_rollback_applied:
        return "applied, then rolled back: " + (result.source_apply_error or "the DoD failed")
    if result.source_apply_error:
        return "refused: " + result.source_apply_error.splitlines()[0]
    return "not applied (`code-runner apply` or `reject` decides)" if result.passed else "none"

"""`code-runner batch ITEMS`: many tasks or sweep cells, on local slots or on a Ray cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

import code_runner.cli.render as render
from code_runner import batch
from code_runner.errors import UsageError
from code_runner.monitor.compare import compare_runs, render_compare_table
from code_runner.monitor.spec import parse_duration
from code_runner.record import summary


def _duration(value: str | None, flag: str) -> float | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise UsageError(f"{flag} {value!r}: {exc}", fix="write e.g. 90s, 30m or 2h") from None
    if flag == "--task-timeout" and seconds <= 0:  # every item would be cancelled at once
        raise UsageError(
            f"--task-timeout {value!r} leaves an item no time to run",
            fix="give a duration above zero, e.g. 30m, or leave --task-timeout out",
        )
    return seconds


def _task_summary(lines: tuple[dict[str, Any], ...]) -> str:
    """The `summarize` view of each item's final run."""
    runs: list[summary.RunLine] = []
    for line in lines:
        if not line.get("attempt_dir"):
            continue
        root = Path(str(line["attempt_dir"])) / "run"
        if root.is_dir():
            runs.extend(summary.collect(root)[0])
    if not runs:
        return "no task run finished"
    out = [
        f"{r.started_at[:19]:19} {r.status:22} {r.backend_name:11} {r.duration_s:8.1f} s  "
        f"DoD {'pass' if r.dod_passed else 'fail'}  {r.task_id} ({r.reason})"
        for r in runs
    ]
    totals = summary.totals(runs)
    counts = ", ".join(f"{k} {v}" for k, v in totals["by_status"].items())
    out.append(f"{totals['runs']} run(s): {counts}; DoD passed {totals['dod_passed']}")
    return "\n".join(out)


def _sweep_summary(lines: tuple[dict[str, Any], ...]) -> str:
    """The `exec compare` view of the sweep's finished cells."""
    dirs = [
        Path(str(line["attempt_dir"])) / "run"
        for line in lines
        if line.get("attempt_dir")
        and (Path(str(line["attempt_dir"])) / "run/result.json").is_file()
    ]
    return render_compare_table(compare_runs(dirs)) if dirs else "no sweep cell finished"


@click.command("batch")
@click.argument("items_path", metavar="ITEMS", type=click.Path(path_type=Path, exists=True))
@click.option(
    "--engine",
    type=click.Choice(batch.ENGINES),
    default="local",
    show_default=True,
    help="Where the items run: slots on this machine, or a Ray cluster.",
)
@click.option(
    "--slots",
    type=click.IntRange(1, 256),
    default=2,
    show_default=True,
    help="Items at once (local); for ray, the slots of a cluster it starts itself.",
)
@click.option(
    "--address",
    metavar="auto|HOST:PORT",
    help="Ray: connect to this cluster (default: start a local one on 127.0.0.1).",
)
@click.option("--task-timeout", metavar="DURATION", help="Cancel an item after this, e.g. 30m.")
@click.option(
    "--grace",
    metavar="DURATION",
    default="5s",
    show_default=True,
    help="From a cancel to a forced stop.",
)
@click.option(
    "--max-retries",
    type=click.IntRange(0, 10),
    default=1,
    show_default=True,
    help="Re-runs of an item whose worker or machine died (never of a failed agent).",
)
@click.option("--resume", is_flag=True, help="Skip finished items; re-run the rest.")
@click.option(
    "--run-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("code-runner-batch"),
    show_default=True,
    help="Where results.jsonl and each item's record go (shared path for a cluster).",
)
@click.option("--json", "as_json", is_flag=True, help="Print every item's result as JSON.")
def batch_command(
    items_path: Path,
    engine: str,
    slots: int,
    address: str | None,
    task_timeout: str | None,
    grace: str,
    max_retries: int,
    resume: bool,
    run_dir: Path,
    as_json: bool,
) -> int:
    """Run many task specs, or the cells of an exec sweep, on N slots or on Ray.

    ITEMS is a directory of task specs, a .jsonl with one spec a line, or a sweep file
    (command: a template with {name} fields; grid: name -> list of values; each cell one
    `exec` run). results.jsonl in --run-dir gets one line per finished item. Ctrl-C stops
    admitting items and stops the running ones; a second Ctrl-C forces them.

    Exit codes: 0 every item passed, 1 some did not, 2 bad input, 3 the engine could not
    start, 130 interrupted (run again with --resume).
    """
    loaded = batch.load_items(items_path)
    if address and engine != "ray":
        raise UsageError("--address is for --engine ray", fix="add --engine ray, or drop --address")
    writers = [item.item_id for item in loaded.items if item.writes_source]
    if engine == "ray" and writers:
        raise UsageError(
            f"apply_to_source is set in {len(writers)} item(s) ({', '.join(writers[:3])}): on "
            "Ray an item runs on its node's mirror of the source, so its patch would never "
            "reach your repo",
            fix="run this batch with --engine local, or drop apply_to_source and apply each "
            "passing item's patch afterwards with `code-runner apply`.",
        )
    request = batch.BatchRequest(
        batch=loaded,
        run_dir=run_dir.resolve(),
        engine=engine,
        slots=slots,
        address=address,
        task_timeout_s=_duration(task_timeout, "--task-timeout"),
        grace_s=_duration(grace, "--grace") or 0.0,
        max_retries=max_retries,
        resume=resume,
    )
    progress = batch.Progress(sys.stderr, live=sys.stderr.isatty() and not as_json)
    try:
        outcome = batch.run_batch(request, progress)
    finally:
        progress.close()
    if as_json:
        render.print_json({"results": list(outcome.lines), "skipped": outcome.skipped})
    else:
        out = render.console()
        out.print(
            (_sweep_summary if loaded.sweep else _task_summary)(outcome.lines),
            markup=False,
            highlight=False,
        )
        out.print(f"results: {request.run_dir / 'results.jsonl'}", markup=False)
    if outcome.stopped:
        return 130
    return 0 if all(line["status"] == "passed" for line in outcome.lines) else 1


__all__ = ["batch_command"]

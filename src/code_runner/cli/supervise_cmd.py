"""`attach`, `stop`, `finalize` and `summarize`: watch, end and review supervised runs.

`stop` works for every backend: it writes the record's stop file (the runner and the
agent CLI supervisor poll for it) and sends SIGTERM to the runner's pid from
status.json; the runner then ends the agent's process tree, releases the workspace and
finishes the record (status `interrupted`, reason `stopped`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import psutil

import code_runner.cli.render as render
from code_runner import files, proc
from code_runner.cli.inspect_cmd import locate
from code_runner.clock import utc_now
from code_runner.errors import EnvironmentProblem, RecordError, UsageError
from code_runner.record import RecordPaths, summary

if TYPE_CHECKING:
    from rich.console import Console

    from code_runner.monitor import ExperimentLine

_POLL_S = 0.2


def _status(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(files.read_regular(path))
    except (OSError, ValueError) as exc:
        raise RecordError(
            f"{path} cannot be read as a run status ({exc}).",
            fix="point at a run's output dir (where *.status.json is).",
        ) from None
    if not isinstance(data, dict) or "task_id" not in data:
        raise RecordError(f"{path} is not a run status.", fix="point at a run's output dir.")
    return data


def _paths(status_path: Path, status: dict[str, Any]) -> RecordPaths:
    return RecordPaths(status_path.parent, str(status["task_id"]))


def _is_runner(pid: int) -> bool:
    """True when `pid` is a live code-runner process (not a recycled pid)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        command = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return "code_runner" in command or "code-runner" in command


def _alive(pid: object) -> bool:
    return isinstance(pid, int) and psutil.pid_exists(pid)


@click.command("stop")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 3600),
    default=60.0,
    show_default=True,
    help="Seconds to wait for the run to finish its record (0: do not wait).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def stop_command(run_dir: Path, wait_s: float, as_json: bool) -> int:
    """End a running run cleanly from another terminal (any backend).

    The agent's processes are killed, the workspace is released and the record is
    finished with status `interrupted`, reason `stopped`. An experiment's run dir
    (`code-runner exec`) ends `stopped_by_user` with its whole process tree. Exit 0 once
    it has finished, 124 if it is still finishing after --wait.
    """
    if (run_dir / "status.json").is_file():
        return _stop_experiment(run_dir, wait_s, as_json)
    return _stop_task(run_dir, wait_s, as_json)


def _stop_task(run_dir: Path, wait_s: float, as_json: bool) -> int:
    status_path, _ = locate(run_dir)
    status = _status(status_path)
    paths = _paths(status_path, status)
    out = render.console(stderr=as_json)
    if status.get("terminal"):
        out.print(f"{status['task_id']}: already finished ({status.get('state')}); nothing to stop")
        if as_json:
            render.print_json({"stopped": False, "state": status.get("state")})
        return 0
    pid = status.get("pid")
    if not _alive(pid):
        raise EnvironmentProblem(
            f"the run {status.get('run_id')} is not finished, but its process (pid {pid}) is "
            "gone: it was killed.",
            fix="run `code-runner gc` to remove its workspace and mark the record abandoned.",
        )
    files.atomic_write_json(
        paths.stop_request, {"requested_at": utc_now(), "by_pid": os.getpid()}, durable=False
    )
    signalled = False
    if isinstance(pid, int) and _is_runner(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            signalled = True
    out.print(
        f"{status['task_id']}: stop requested"
        + (f" (SIGTERM to pid {pid})" if signalled else " (the runner polls for it)")
    )
    deadline = time.monotonic() + wait_s
    final = status
    while wait_s and time.monotonic() < deadline:
        final = _status(status_path)
        if final.get("terminal"):
            break
        time.sleep(_POLL_S)
    finished = bool(final.get("terminal"))
    if as_json:
        render.print_json(
            {"stopped": finished, "signalled": signalled, "state": final.get("state")}
        )
    elif finished:
        out.print(f"{status['task_id']}: {final.get('state')}; record at {paths.result}")
    elif wait_s:
        out.print(f"{status['task_id']}: still finishing after {wait_s:g} s")
    return 0 if finished or not wait_s else 124


def _stop_experiment(run_dir: Path, wait_s: float, as_json: bool) -> int:
    from code_runner.monitor import load_result, request_stop

    out = render.console(stderr=as_json)
    asked = request_stop(run_dir)
    if asked.already_finished:
        out.print(f"{run_dir}: already finished ({asked.state}); nothing to stop", markup=False)
        if as_json:
            render.print_json({"stopped": False, "state": asked.state})
        return 0
    how = "SIGTERM to its monitor" if asked.by == "monitor" else "its watchdog ends it"
    out.print(f"{run_dir}: stop requested ({how}, pid {asked.pid})", markup=False)
    result_path = run_dir / "result.json"
    deadline = time.monotonic() + wait_s
    while wait_s and not result_path.exists() and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    finished = result_path.exists()
    state = load_result(run_dir).state.value if finished else asked.state
    if as_json:
        render.print_json({"stopped": finished, "by": asked.by, "state": state})
    elif finished:
        out.print(f"{run_dir}: {state}; report in {run_dir / 'experiment_result.md'}", markup=False)
    elif wait_s:
        out.print(f"{run_dir}: still finishing after {wait_s:g} s", markup=False)
    return 0 if finished or not wait_s else 124


def _tmux_info(paths: RecordPaths) -> dict[str, Any]:
    try:
        data = json.loads(files.read_regular(paths.tmux_info))
    except FileNotFoundError:
        raise UsageError(
            f"the run of {paths.task_id} in {paths.output_dir} has no tmux session.",
            fix="attach works for agent CLI runs started with --tmux (or CODE_RUNNER_TMUX=1); "
            "use `code-runner watch` for any run.",
        ) from None
    except (OSError, ValueError) as exc:
        raise RecordError(
            f"{paths.tmux_info} cannot be read ({exc}).", fix="check the path."
        ) from None
    if not isinstance(data, dict) or "socket" not in data:
        raise RecordError(f"{paths.tmux_info} is not a tmux record.", fix="check the path.")
    return data


def _has_session(socket: str, session: str) -> bool:
    if not Path(socket).exists():
        return False
    result = proc.capture(
        ["tmux", "-S", socket, "has-session", "-t", session],
        cwd=None,
        env=dict(os.environ),
        timeout_s=10,
    )
    return result.ok


@click.command("attach")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--read-only", is_flag=True, help="Watch without sending keys to the pane.")
@click.option("--print", "print_only", is_flag=True, help="Print the tmux command and exit.")
def attach_command(run_dir: Path, read_only: bool, print_only: bool) -> int:
    """Watch an agent CLI run live in its tmux pane (runs started with --tmux).

    Each round runs in a new session on the run's own tmux server; attach follows the
    run from round to round until it ends or you detach (Ctrl-b d). `terminal.log`
    beside the record holds everything the pane showed.
    """
    status_path, _ = locate(run_dir)
    status = _status(status_path)
    paths = _paths(status_path, status)
    info = _tmux_info(paths)
    socket, session = str(info["socket"]), str(info.get("session") or "agent")
    argv = ["tmux", "-S", socket, "attach-session", "-t", session, *(["-r"] if read_only else [])]
    if print_only:
        click.echo(shlex.join(argv))
        return 0
    if status.get("terminal"):
        raise UsageError(
            f"the run of {paths.task_id} has finished ({status.get('state')}).",
            fix=f"read what its pane showed in {paths.terminal_log}.",
        )
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            "attach needs a terminal (stdin and stdout are not one).",
            fix=f"run it in a terminal, or follow {paths.terminal_log} with `tail -f`.",
        )
    while True:
        if _has_session(socket, session):
            # interactive: tmux takes over this terminal until the person detaches
            proc.hand_terminal(argv, env=dict(os.environ))
            if _has_session(socket, session):
                return 0  # detached; the run goes on
        if _status(status_path).get("terminal"):
            click.echo(f"{paths.task_id}: the run has finished; see {paths.result_md}")
            return 0
        time.sleep(_POLL_S)


@click.command("finalize")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False))
def finalize_command(run_dir: Path) -> int:
    """Rewrite a finished run's result.md, eval.md and skill-review.md from its evidence.

    The evidence is result.json, request.json, run.json and the events; no other file
    changes. A killed run is finalized after `code-runner gc` has marked it abandoned.
    """
    from code_runner.record.finalize import finalize

    written = finalize(run_dir)
    out = render.console()
    for path in written:
        out.print(f"wrote {path}")
    return 0


@click.command("summarize")
@click.argument(
    "runs_root", required=False, default=".", type=click.Path(path_type=Path, exists=False)
)
@click.option("--since", help="Only runs started at or after this date (2026-01-31, ISO time).")
@click.option("--json", "as_json", is_flag=True, help="Print every run and the totals as JSON.")
def summarize_command(runs_root: Path, since: str | None, as_json: bool) -> int:
    """One line per run under RUNS_ROOT (default: .) and totals, for every backend.

    Status is the normalized one (SUCCESS, PARTIAL, BLOCKED_NEEDS_DECISION, FAILED),
    derived from evidence; `mismatch` counts where the worker's claim disagreed; `skills`
    is the skill review's recommendation (NO_SKILL_CHANGE, CANDIDATE_LEARNING,
    REVIEW_REQUIRED) of a run that named skills.
    """
    from code_runner.monitor import collect_experiments, experiment_totals

    moment = summary.parse_since(since) if since else None
    lines, skipped = summary.collect(runs_root, since=moment)
    experiments, unreadable = collect_experiments(runs_root, since=moment)
    totals = summary.totals(lines)
    if as_json:
        render.print_json(
            {
                "runs": [line.to_dict() for line in lines],
                "totals": totals,
                "skipped": skipped,
                "experiments": [line.to_dict() for line in experiments],
                "experiment_totals": experiment_totals(experiments),
                "experiments_skipped": unreadable,
            }
        )
        return 0
    out = render.console()
    if not lines and not experiments:
        out.print(f"no runs under {runs_root}" + (f" since {since}" if since else ""))
        return 0
    if lines or not experiments:
        _print_tasks(out, lines, totals, skipped)
    if experiments or unreadable:
        _print_experiments(out, experiments, unreadable)
    return 0


def _print_tasks(
    out: Console, lines: list[summary.RunLine], totals: dict[str, Any], skipped: int
) -> None:
    for line in lines:
        mismatch = f", {line.mismatches} mismatch(es)" if line.mismatches else ""
        mismatch += f", skills {line.skill_review}" if line.skill_review else ""
        applied = f", {line.apply}" if line.apply else ""
        out.print(
            f"{line.started_at[:19]:19} {line.status:22} {line.backend_name:11} "
            f"{line.duration_s:8.1f} s  {_spent(line.tokens, line.cost_usd):>24}  "
            f"DoD {'pass' if line.dod_passed else 'fail'}  "
            f"{line.task_id} ({line.reason}{mismatch}{applied})",
            markup=False,
        )
    counts = ", ".join(f"{k} {v}" for k, v in totals["by_status"].items())
    applied = ", ".join(f"{k} {v}" for k, v in sorted(totals["applied"].items()))
    out.print(
        f"{totals['runs']} run(s): {counts}; DoD passed {totals['dod_passed']}; "
        f"runs with a mismatch {totals['runs_with_mismatch']}; "
        f"total {totals['duration_s']:.1f} s"
        + _spent_total(lines, totals)
        + "".join(f"; skills {k} {v}" for k, v in totals["skill_review"].items())
        + (f"; patches: {applied}" if applied else "")
        + (f"; {skipped} other file(s) skipped" if skipped else ""),
        markup=False,
    )


def _print_experiments(out: Console, lines: list[ExperimentLine], unreadable: int) -> None:
    """The `exec` runs: started, state, success by the job's own criteria, command."""
    from code_runner.monitor import experiment_totals

    out.print("experiments (code-runner exec):")
    for line in lines:
        verdict = {True: "criteria met", False: "criteria NOT met", None: "running"}
        out.print(
            f"{line.started_at[:19]:19} {line.state:16} {line.duration_s:8.1f} s  "
            f"{verdict[line.success]:16} {line.command}"
            + (f" ({line.alerts} alert(s))" if line.alerts else ""),
            markup=False,
        )
    totals = experiment_totals(lines)
    states = ", ".join(f"{k} {v}" for k, v in totals["by_state"].items())
    out.print(
        f"{totals['experiments']} experiment(s): {states or 'none'}; "
        f"criteria met {totals['succeeded']}; total {totals['duration_s']:.1f} s"
        + (f"; {unreadable} unreadable run dir(s) skipped" if unreadable else ""),
        markup=False,
    )


def _spent_total(lines: list[summary.RunLine], totals: dict[str, Any]) -> str:
    if all(line.tokens is None for line in lines):
        return ""
    unknown = totals["runs_cost_unknown"]
    return f", {totals['tokens']:,} tokens, ${totals['cost_usd']:.4f}" + (
        f" (cost unknown for {unknown} run(s))" if unknown else ""
    )


def _spent(tokens: int | None, cost_usd: float | None) -> str:
    """`1,234 tok $0.0042`, `1,234 tok cost ?` or `-` when no usage was reported."""
    if tokens is None:
        return "-"
    return f"{tokens:,} tok " + (f"${cost_usd:.4f}" if cost_usd is not None else "cost ?")


__all__ = ["attach_command", "stop_command", "summarize_command"]

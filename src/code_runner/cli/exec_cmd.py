"""`code-runner exec`: run any command under the experiment monitor.

The command runs exactly as given, after it is shown and confirmed (or `--yes`). The monitor
checks it every interval and raises advisory alerts; only the hard timeout kills it (exit
124). Exit codes: 0 completed with criteria met, 1 crashed / criteria not met / killed by the
user / not started, 2 bad input, 124 timeout, 130 interrupted.

Testing note: the check interval is bounded to 10..300 s; the environment variable
`CODE_RUNNER_MIN_INTERVAL_S` lowers the lower bound (tests and demos use 0.05).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from code_runner import files
from code_runner.errors import CodeRunnerError, Interrupted, RunTimeout, UsageError
from code_runner.monitor import (
    Detection,
    Experiment,
    ExperimentRecord,
    ExperimentResult,
    ExperimentSpec,
    ExperimentState,
    ExperimentType,
    PlainUI,
    RunVerdict,
    build_spec,
    check_launchable,
    check_run_dir,
    choose_ui,
    compare_runs,
    default_run_dir,
    detect_type,
    judge_runs,
    load_experiment_spec,
    recorded_spec,
    render_compare_csv,
    render_compare_table,
    render_validation,
    start_detached,
)
from code_runner.repo import git

_TYPES = ", ".join(t.value for t in ExperimentType)


@click.command(
    "exec",
    context_settings={
        "help_option_names": ["-h", "--help"],
        "allow_interspersed_args": False,
    },
)
@click.option("--spec", "spec_path", metavar="FILE", help="YAML/JSON file with these options.")
@click.option("--cwd", metavar="DIR", help="Directory to run in (default: the current one).")
@click.option(
    "--timeout", metavar="DURATION", help="Hard timeout, e.g. 90s, 30m, 2h (default 30m)."
)
@click.option(
    "--expect",
    multiple=True,
    metavar="PATH",
    help="Expected output (file, dir or glob); repeatable.",
)
@click.option(
    "--success",
    multiple=True,
    metavar="CRITERION",
    help="e.g. 'exit_code == 0', 'file out.csv > 0 bytes', 'metric loss < 0.5'; repeatable.",
)
@click.option(
    "--monitor", multiple=True, metavar="PATH", help="Log or output file to watch; repeatable."
)
@click.option("--type", "type_", metavar="TYPE", help=f"One of {_TYPES} (default: auto-detected).")
@click.option(
    "--interval",
    metavar="DURATION",
    help="Check interval, 10..300 s (default 30s); CODE_RUNNER_MIN_INTERVAL_S lowers the floor.",
)
@click.option(
    "--run-dir", metavar="DIR", help="Record dir (default ./code-runner-exec/<time-id>/)."
)
@click.option(
    "--grace", metavar="DURATION", help="SIGTERM-to-SIGKILL grace on timeout (default 10s)."
)
@click.option(
    "--stall-checks", metavar="N", help="Unchanged checks before a stall alert (default 3)."
)
@click.option("--memory-factor", metavar="X", help="Alert above X times the baseline (default 3).")
@click.option(
    "--memory-warmup", metavar="DURATION", help="Baseline taken after this (default 60s)."
)
@click.option("--metric", metavar="NAME", help="Metric for the plateau check (default: *loss*).")
@click.option("--metric-regex", metavar="REGEX", help="Named groups: (?P<key>..)(?P<value>..).")
@click.option(
    "--patience", metavar="N", help="Plateau after N points without improvement (default 5)."
)
@click.option(
    "--min-delta", metavar="X", help="Improvement threshold, relative to |best| (default 0.001)."
)
@click.option(
    "--slow-ratio", metavar="X", help="Slow progress below X of the early rate (default 0.5)."
)
@click.option("--progress-total", metavar="N", help="Total for counters that do not print one.")
@click.option(
    "--notify",
    metavar="CMD",
    help="Shell command run on each alert and at the end, with the news in its environment.",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before running.")
@click.option(
    "--validate",
    "validate_dir",
    metavar="RUN_DIR",
    help="Re-run RUN_DIR's recorded command and say whether it reproduced.",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Run in the background: print the run dir and return at once (see `status`).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def exec_command(
    spec_path: str | None,
    yes: bool,
    detach: bool,
    validate_dir: str | None,
    command: tuple[str, ...],
    **options: Any,
) -> None:
    """Run COMMAND exactly as given, under the experiment monitor.

    Write it after `--`: code-runner exec --timeout 2h -- python train.py --epochs 50.
    It is shown and confirmed first (--yes skips). Every --interval the monitor checks
    for an output stall, memory growth and, by type, a metric plateau or slow progress;
    alerts are advisory. Only --timeout kills: SIGTERM to the whole tree, a grace
    period, SIGKILL. The record (events.jsonl, status.json, stdout.log, stderr.log,
    result.json, experiment_result.md, plots) goes to --run-dir.

    `code-runner exec compare RUN_DIR... [--json|--csv]` shows finished runs side by side
    (command, flags, state, duration, final and best metrics).

    Exit codes: 0 completed (or stopped early at your request) with the criteria met;
    1 crashed, criteria not met, killed by you, or not started; 2 bad input; 124 timeout;
    130 interrupted.
    """
    if _is_compare(command):
        _compare(command[1:])
        return
    spec, source = _spec_from(spec_path, command, options, validate_dir)
    check_launchable(spec.argv, spec.cwd, os.environ)
    run_dir = spec.run_dir or default_run_dir(Path.cwd())
    check_run_dir(run_dir)
    ui = choose_ui()
    detection = (
        Detection(spec.type, ("given",), False, ())
        if spec.type
        else detect_type(spec.argv, spec.cwd)
    )
    if not yes:
        if not ui.interactive:
            raise UsageError(
                f"refusing to run `{spec.display_command}` without confirmation: there is no "
                "terminal to ask on",
                fix="check the command, then pass --yes (-y) to run it without asking",
            )
        ui.show_plan(spec, detection, run_dir)
        spec = _maybe_choose_type(spec, detection, ui)
        if ui.ask("Proceed? [y/N]").lower() not in ("y", "yes"):
            ui.say("Not started.")
            click.get_current_context().exit(1)
    else:
        ui.show_plan(spec, detection, run_dir)
    if detach:
        click.echo(str(start_detached(spec, detection, run_dir)))
        return
    record = ExperimentRecord(run_dir)
    provenance = {"git": _git_state(spec.cwd, run_dir)}
    result = Experiment(spec, detection, record, ui, provenance=provenance).run()
    ui.finished(result, run_dir)
    if validate_dir is not None:
        _report_validation(Path(validate_dir), run_dir)
    _exit_for(result, spec, run_dir, source)


_MAX_DIFF_BYTES = 8 * 1024 * 1024


def _git_state(cwd: Path, run_dir: Path) -> dict[str, object]:
    """The cwd's repo: its commit and, when dirty, the diff against it (in `git.diff`)."""
    try:
        repo = git.open_source(cwd)
    except CodeRunnerError:
        return {"commit": None}
    commit = git.head_commit(repo)
    if commit is None:
        return {"commit": None, "work_tree": str(repo.work_tree)}
    diff_path = run_dir / "git.diff"
    size = files.atomic_write_from(  # git writes it: a large diff never passes through memory
        diff_path,
        lambda out: repo.run("diff", "--no-ext-diff", "--binary", "HEAD", check=False,
                             stdout_file=out),
        max_bytes=_MAX_DIFF_BYTES,
    )  # fmt: skip
    untracked = repo.z("ls-files", "--others", "--exclude-standard", "-z", check=False)
    state: dict[str, object] = {"commit": commit, "work_tree": str(repo.work_tree)}
    state["untracked"] = len(untracked)
    if size:
        state["diff"] = "git.diff"
        state["diff_truncated"] = size > _MAX_DIFF_BYTES
    else:
        diff_path.unlink()
    return state


def _report_validation(original: Path, rerun: Path) -> None:
    validation = judge_runs(original, rerun)
    files.atomic_write_text(rerun / "validation.json", validation.model_dump_json(indent=2))
    click.echo(render_validation(validation))
    if validation.verdict is not RunVerdict.REPRODUCIBLE:
        click.get_current_context().exit(1)


def _rerun_dir(validate_dir: str) -> str:
    """Beside the original: `<RUN_DIR>-validate-<time-id>`."""
    original = Path(validate_dir).resolve()
    fresh = default_run_dir(original.parent).name
    return str(original.parent / f"{original.name}-validate-{fresh}")


_COMPARE_FLAGS = ("--json", "--csv")


def _is_compare(command: tuple[str, ...]) -> bool:
    """`exec compare RUN_DIR...`: every other word a flag of compare's or a run dir, or
    no program called `compare` on PATH (then a wrong run dir gets compare's own error)."""
    if command[:1] != ("compare",):
        return False
    dirs = [a for a in command[1:] if a not in _COMPARE_FLAGS]
    if dirs and all((Path(d) / "status.json").is_file() for d in dirs):
        return True
    return shutil.which("compare") is None


def _compare(args: tuple[str, ...]) -> None:
    dirs = [a for a in args if a not in _COMPARE_FLAGS]
    if not dirs:
        raise UsageError(
            "exec compare needs the run dirs to compare",
            fix="run: code-runner exec compare RUN_DIR [RUN_DIR...] [--json|--csv]",
        )
    wrong = [d for d in dirs if not (Path(d) / "status.json").is_file()]
    if wrong:
        raise UsageError(
            "not an exec run dir (no status.json): " + ", ".join(wrong),
            fix="pass the run dirs `code-runner exec` printed (./code-runner-exec/<time-id>)",
        )
    rows = compare_runs([Path(d) for d in dirs])
    if "--json" in args:
        click.echo(json.dumps(rows, indent=2))
    elif "--csv" in args:
        click.echo(render_compare_csv(rows), nl=False)
    else:
        click.echo(render_compare_table(rows))


def _spec_from(
    spec_path: str | None,
    command: tuple[str, ...],
    options: dict[str, Any],
    validate_dir: str | None = None,
) -> tuple[ExperimentSpec, str]:
    file_options: dict[str, Any] = {}
    source = "command line"
    if validate_dir is not None:
        if command or spec_path:
            raise UsageError(
                "--validate re-runs the recorded command: give no command and no --spec",
                fix=f"run: code-runner exec --validate {validate_dir}",
            )
        recorded = recorded_spec(Path(validate_dir))
        file_options = recorded.model_dump(mode="json", exclude={"run_dir"})
        options = {**options, "run_dir": options.get("run_dir") or _rerun_dir(validate_dir)}
        source = f"{validate_dir}/spec.json"
    elif spec_path:
        file_options = load_experiment_spec(Path(spec_path))
        source = spec_path
    cli = {key.rstrip("_"): value for key, value in options.items()}
    cli["command"] = command
    if cli.get("cwd") is not None:
        cli["cwd"] = str(Path(cli["cwd"]).resolve())
    return build_spec(file_options, cli, source=source), source


def _maybe_choose_type(spec: ExperimentSpec, detection: Detection, ui: PlainUI) -> ExperimentSpec:
    """Auto-detection said it is unsure: let the person pick (Enter keeps the guess)."""
    if spec.type is not None or not detection.uncertain:
        return spec
    choices = "/".join(t.value for t in ExperimentType)
    answer = ui.ask(f"Type guess is uncertain ({detection.type.value}); type? [{choices}]")
    if not answer:
        return spec.model_copy(update={"type": detection.type})
    try:
        return spec.model_copy(update={"type": ExperimentType(answer.lower())})
    except ValueError:
        ui.say(f"Unknown type {answer!r}; keeping {detection.type.value}.")
        return spec.model_copy(update={"type": detection.type})


def _exit_for(result: ExperimentResult, spec: ExperimentSpec, run_dir: Path, source: str) -> None:
    if result.state is ExperimentState.TIMEOUT:
        raise RunTimeout(
            f"`{spec.display_command}` exceeded its timeout of {result.timeout_s:g} s and was "
            f"stopped with its whole process tree; the record is in {run_dir}",
            fix="raise --timeout if the work needs longer; experiment_result.md shows how far "
            "it got",
        )
    if result.interrupted:
        raise Interrupted(
            f"{result.stop_reason}; the command's tree was stopped and the record is in {run_dir}",
            fix="run it again when ready",
        )
    if not result.success:
        click.get_current_context().exit(1)


if __name__ == "__main__":
    from code_runner.cli.boundary import run_cli

    sys.exit(run_cli(exec_command))

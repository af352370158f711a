"""`plan ...`: validate a plan file, run it, show its state, list plans, export the commits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

import code_runner.cli.render as render
from code_runner.cli.plan_export_cmd import export_command
from code_runner.errors import PreflightError
from code_runner.plans import (
    BaseTree,
    Validation,
    check_source,
    plan_json_schema,
    read_base_tree,
    user_approvals,
    validate_file,
)
from code_runner.plans.commands import show_argv
from code_runner.plans.report import plan_status
from code_runner.plans.store import PlanStore

allow_cmd_option = click.option(
    "--allow-cmd",
    "allow_cmd",
    multiple=True,
    metavar="ARGV_JSON",
    help='Approve one command, as a JSON list: \'["python","-m","pytest"]\'.',
)


@click.group("plan")
def plan_group() -> None:
    """Plans: several items run in order, each verified and committed by code-runner."""


def _base_tree(source: Path | None, base: str) -> BaseTree | None:
    """The base tree of `--source` (default: the current directory when it is a repo)."""
    if source is not None:
        check_source(source)
        return read_base_tree(source, base)
    try:
        return read_base_tree(Path.cwd(), base)
    except PreflightError:
        return None


def _print(validation: Validation, source_given: bool) -> None:
    out = render.console()
    status = "valid" if validation.ok else "invalid"
    out.print(f"{validation.source}: {status}")
    if validation.base:
        out.print(f"base: {validation.base}")
    elif not source_given:
        out.print("base: none (not in a git repository; files were checked against each other)")
    for problem in validation.problems:
        out.print(f"  problem: {problem}", markup=False)
    for warning in validation.warnings:
        out.print(f"  warning: {warning}", markup=False)
    for command in validation.commands:
        if command.argv is None:
            continue
        mark = "approved" if command.approved else "NOT approved"
        out.print(f"  cmd {command.item}: {show_argv(command.argv)} {mark}", markup=False)
    for item, text in validation.unverified:
        out.print(f"  check {item} (recorded as unverified): {text}", markup=False)


@plan_group.command("validate")
@click.argument("plan_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--source",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The git repository the plan is for (default: the current one, if any).",
)
@click.option(
    "--base", default="HEAD", show_default=True, help="The commit the first item starts from."
)
@allow_cmd_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def validate_command(
    plan_file: Path, source: Path | None, base: str, allow_cmd: tuple[str, ...], as_json: bool
) -> int:
    """Check PLAN_FILE whole and create nothing. Exit 0 valid, 2 invalid."""
    approvals = user_approvals(allow_cmd)
    validation = validate_file(plan_file, base=_base_tree(source, base), approvals=approvals)
    if as_json:
        render.print_json(validation.to_dict())
        return 0 if validation.ok else 2
    if not validation.ok:
        raise validation.error()
    _print(validation, source is not None)
    return 0


@plan_group.command("schema")
@click.option("--edits", is_flag=True, help="The schema of an edits file (`plan amend --edits`).")
def schema_command(edits: bool) -> int:
    """Print the JSON Schema of a plan file (format version 1), or of an edits file."""
    from code_runner.plans.edits import edits_json_schema

    schema = edits_json_schema() if edits else plan_json_schema()
    click.echo(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def _open_store() -> PlanStore:
    return PlanStore.open()


def _print_status(status: dict[str, Any]) -> None:
    out = render.console()
    out.print(f"plan {status['plan_id']}: {status['status']}  {status['reason']}", markup=False)
    for item in status["items"]:
        commit = (item["commit"] or "")[:12]
        extra = ""
        if item["out_of_scope"]:
            extra += " out of scope: " + ", ".join(item["out_of_scope"])
        for finding in item["findings"]:
            extra += f" finding: {finding['detail'][:200]}"
        out.print(
            f"  {item['id']} {item['state']:<10} {commit:<12} attempts {len(item['attempts'])}"
            f"  {item['title']}{extra}",
            markup=False,
        )
    for export in status.get("exports", []):
        out.print(
            f"  export {export['id']} {export['kind']} {export['target']}"
            f" ({', '.join(export['items'])}): {export['state']}",
            markup=False,
        )
    out.print(f"next: {status['next']}", markup=False)


_EXIT = {"done": 0, "paused": 1, "ready": 1, "running": 1, "cancelled": 1}


@plan_group.command("run")
@click.argument("plan_file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--source",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("."),
    help="The git repository the plan is for (default: the current directory).",
)
@click.option("--base", default="HEAD", show_default=True, help="The commit P1 starts from.")
@click.option(
    "--backend",
    default="openai",
    show_default=True,
    help="The agent backend for every item; `{item}` is replaced by the item id.",
)
@click.option(
    "--max-rounds",
    type=click.IntRange(1, 20),
    default=3,
    show_default=True,
    help="Agent rounds each item may take.",
)
@click.option(
    "--item-timeout",
    "item_timeout",
    type=click.FloatRange(1, 86400),
    default=1800.0,
    show_default=True,
    help="Seconds each item may run.",
)
@click.option(
    "--budget",
    type=click.FloatRange(1, 30 * 86400),
    default=None,
    help="Seconds the whole plan may run, from its first item (kept across runs); when it"
    " runs out the item is stopped and the plan needs you.",
)
@click.option(
    "--tmux/--no-tmux",
    default=None,
    help="Run an agent CLI backend in a tmux pane per item (`code-runner attach` the item's"
    " record dir). Default: the backend's tmux= setting.",
)
@click.option(
    "--on-scope",
    "on_scope",
    type=click.Choice(["warn", "stop"]),
    default="warn",
    show_default=True,
    help="An agent CLI's write outside the item's declared files, seen while it works: a"
    " scope_expansion event at once; `stop` also ends the item's round.",
)
@allow_cmd_option
@click.option(
    "--output-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the plan's record goes (default: the state dir).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
def run_command(
    plan_file: Path,
    source: Path,
    base: str,
    backend: str,
    max_rounds: int,
    item_timeout: float,
    budget: float | None,
    tmux: bool | None,
    on_scope: str,
    allow_cmd: tuple[str, ...],
    output_dir: Path | None,
    as_json: bool,
) -> int:
    """Run PLAN_FILE's items in order from the first not done (recovering a dead run first).

    Exit 0 when every item is done; 1 when the plan stopped at a gate or a failed item (see
    `plan status`); 2 for an invalid plan or an unapproved command; 3 when it is running."""
    from code_runner.plans.execute import RunSettings, run_plan

    check_source(source)
    settings = RunSettings(
        backend=backend,
        max_rounds=max_rounds,
        item_timeout_s=item_timeout,
        base_dir=plan_file.resolve().parent,
        output_dir=output_dir.resolve() if output_dir else None,
        budget_s=budget,
        tmux=tmux,
        on_scope=on_scope,
    )

    def progress(kind: str, data: dict[str, Any]) -> None:
        if tmux and kind == "item_running":
            click.echo(f"watch it live: code-runner attach {data['record']}", err=True)
        if not as_json and kind in ("item_running", "item_settled"):
            words = " ".join(f"{k}={v}" for k, v in data.items() if v not in (None, ""))
            click.echo(f"{kind.replace('_', ' ')}: {words}", err=True)

    status = run_plan(
        plan_file.resolve(), source.resolve(), base, settings, user_approvals(allow_cmd), progress
    )
    if as_json:
        render.print_json(status)
    else:
        _print_status(status)
    return _EXIT.get(status["status"], 1)


@plan_group.command("status")
@click.argument("plan")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--watch", is_flag=True, help="Print it again at each change until it stops running.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    show_default=True,
    help="Seconds between looks at the store with --watch.",
)
def status_command(plan: str, as_json: bool, watch: bool, interval: float) -> int:
    """Each item of PLAN (an id from `plan list`): state, commit, attempts, findings, next.

    With --watch, one status per change (one JSON object a line with --json) until the
    plan is no longer running."""
    from code_runner.plans.control import watch_status

    with _open_store() as store:
        assert isinstance(store, PlanStore)
        plan_id = store.find_plan(plan)
        for status in (
            watch_status(store, plan_id, interval) if watch else [plan_status(store, plan_id)]
        ):
            if as_json and watch:
                click.echo(json.dumps(status, sort_keys=True))
            elif as_json:
                render.print_json(status)
            else:
                _print_status(status)
    return 0


@plan_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the plans as JSON.")
def list_command(as_json: bool) -> int:
    """Every plan in the store: id, status, head, source."""
    with _open_store() as store:
        rows = [
            {
                "plan_id": r["plan_id"],
                "status": r["status"],
                "revision": r["revision"],
                "head": r["head"],
                "source": r["source_dir"],
                "updated_at": r["updated_at"],
            }
            for r in store.plans()
        ]
    if as_json:
        render.print_json({"plans": rows})
        return 0
    for row in rows:
        click.echo(f"{row['plan_id']}  {row['status']:<15} {row['head'][:12]}  {row['source']}")
    if not rows:
        click.echo("no plans yet: `code-runner plan run PLAN_FILE` starts one.")
    return 0


plan_group.add_command(export_command)


def _register_gates() -> None:
    from code_runner.cli.plan_gate_cmd import COMMANDS

    for command in COMMANDS:
        plan_group.add_command(command)


_register_gates()

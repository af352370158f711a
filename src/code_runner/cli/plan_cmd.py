"""`plan ...`: check a plan file and print the plan format."""

from __future__ import annotations

import json
from pathlib import Path

import click

import code_runner.cli.render as render
from code_runner.errors import PreflightError
from code_runner.plans import (
    BaseTree,
    Validation,
    plan_json_schema,
    read_base_tree,
    user_approvals,
    validate_file,
)
from code_runner.plans.commands import show_argv


@click.group("plan")
def plan_group() -> None:
    """Plans: several items run in order, each verified and committed by code-runner."""


def _base_tree(source: Path | None, base: str) -> BaseTree | None:
    """The base tree of `--source` (default: the current directory when it is a repo)."""
    if source is not None:
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
@click.option(
    "--allow-cmd",
    "allow_cmd",
    multiple=True,
    metavar="ARGV_JSON",
    help='Approve one command, as a JSON list: \'["python","-m","pytest"]\'.',
)
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
def schema_command() -> int:
    """Print the JSON Schema of a plan file (format version 1)."""
    click.echo(json.dumps(plan_json_schema(), indent=2, sort_keys=True))
    return 0

"""`code-runner answer RUN_DIR OPTION`: answer a running experiment's alert from another
terminal, as the dashboard's buttons do; the monitor acts on it within a second."""

from __future__ import annotations

from pathlib import Path

import click

import code_runner.cli.render as render
from code_runner.monitor.answers import request_answer, wait_for_outcome


@click.command("answer")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False))
@click.argument("option")
@click.option(
    "--set",
    "settings",
    default="",
    metavar="KEY=VALUE ...",
    help="The new settings for option C (adjust), e.g. 'timeout=2h stall_checks=6'.",
)
@click.option(
    "--alert",
    default=None,
    metavar="KIND-CHECK",
    help="The alert this answers (e.g. STALL_SUSPECTED-4); default: the one waiting now.",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 600),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the monitor to act (0: do not wait).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def answer_command(
    run_dir: Path, option: str, settings: str, alert: str | None, wait_s: float, as_json: bool
) -> int:
    """Answer a running experiment's alert (`code-runner exec`) from another terminal.

    OPTION is the letter the alert offers (A continue, B kill, C adjust with --set, D the
    alert's own step) or its action's name. The answer goes to the alert waiting now; a
    second answer to the same alert changes nothing. B and C work with no alert waiting.
    The record keeps who answered and how. Exit 0 once the monitor has acted, 124 if it
    has not after --wait.
    """
    out = render.console(stderr=as_json)
    ticket = request_answer(run_dir, option, via="cli", settings=settings, alert=alert)
    if not ticket.fresh:
        said = f"{ticket.name} was already answered ({ticket.option}); nothing changed"
        out.print(said, markup=False)
    if wait_s:
        ticket = wait_for_outcome(run_dir, ticket, wait_s)
    outcome = ticket.outcome or {}
    if as_json:
        render.print_json(
            {"answer": ticket.name, "option": ticket.option, "fresh": ticket.fresh, **outcome}
        )
    elif ticket.done:
        for line in outcome.get("said") or ["done"]:
            out.print(str(line), markup=False)
    elif wait_s:
        out.print(f"{ticket.name}: the monitor has not acted after {wait_s:g} s", markup=False)
    return 0 if ticket.done or not wait_s else 124


__all__ = ["answer_command"]

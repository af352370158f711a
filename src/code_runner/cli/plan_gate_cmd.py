"""`plan stop|resume|cancel|approve|amend`: a person's hand on a plan.

Each mutating command is a user action (`code_runner.plans.actions`): the same command
against the same state replays its saved outcome and exit code and applies nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

import code_runner.cli.render as render
from code_runner.errors import SpecError, UsageError
from code_runner.plans import actions as acts
from code_runner.plans import read_base_tree, user_approvals, validate_data, validate_file
from code_runner.plans.commands import show_argv
from code_runner.plans.control import (
    plan_approvals,
    refresh_views,
    resume,
    tell_run,
    wait_settled,
)
from code_runner.plans.edits import apply_edits, read_edits
from code_runner.plans.model import canonical_sha256
from code_runner.plans.store import PlanStore

action_id_option = click.option(
    "--action-id",
    default=None,
    metavar="UUID",
    help="Name this action (a UUID v4); the same id and command replays its outcome.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")


_EXIT = {"done": 0}


def _print_status(status: dict[str, Any]) -> None:
    click.echo(f"plan {status['plan_id']}: {status['status']}  {status['reason']}")
    for item in status["items"]:
        commit = (item["commit"] or "")[:12]
        click.echo(f"  {item['id']} {item['state']:<10} {commit:<12} {item['title']}")
    click.echo(f"next: {status['next']}")


def _report(result: acts.ActionResult, as_json: bool, extra: dict[str, Any] | None = None) -> int:
    data = {**result.response, **(extra or {}), "replayed": result.replayed}
    if as_json:
        render.print_json(data)
    else:
        note = " (replayed: this command already ran against this state)" if result.replayed else ""
        if result.refused:
            click.echo(f"refused: {data['refused']}{note}", err=True)
            if data.get("fix"):
                click.echo(f"Fix: {data['fix']}", err=True)
        else:
            click.echo(f"{data.get('message', 'done')}{note}")
            if extra and extra.get("told"):
                click.echo(extra["told"])
    return result.exit_code


def _stop_or_cancel(plan: str, kind: str, apply: Any, request: dict[str, Any], opts: Any) -> int:
    action_id, wait_s, as_json = opts
    with PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        plan_id = store.find_plan(plan)
        result = acts.run_action(store, plan_id, kind, request, apply(store), action_id=action_id)
        extra: dict[str, Any] = {}
        if result.response.get("signal") and not result.replayed:
            extra["told"] = tell_run(store, plan_id)
            if wait_s and not wait_settled(store, plan_id, wait_s):
                extra["settled"] = False
                _report(result, as_json, extra)
                return 124
        if not result.replayed:
            refresh_views(store, plan_id)
        extra["status"] = store.plan(plan_id)["status"]
    return _report(result, as_json, extra)


@click.command("stop")
@click.argument("plan")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 3600),
    default=60.0,
    show_default=True,
    help="Seconds to wait for the run to settle (0: do not wait).",
)
@action_id_option
@json_option
def stop_command(plan: str, wait_s: float, action_id: str | None, as_json: bool) -> int:
    """Stop PLAN's run: the item's attempt ends `cancelled`, the plan `paused`.

    Exit 0 once settled, 124 when it did not settle within --wait."""
    return _stop_or_cancel(plan, "stop", acts.stop, {}, (action_id, wait_s, as_json))


@click.command("cancel")
@click.argument("plan")
@click.option("--reason", default="", help="Why, for the record.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 3600),
    default=60.0,
    show_default=True,
    help="Seconds to wait for a running item to stop (0: do not wait).",
)
@action_id_option
@json_option
def cancel_command(
    plan: str, reason: str, wait_s: float, action_id: str | None, as_json: bool
) -> int:
    """Close PLAN for good: at once, or once its running item stopped."""
    return _stop_or_cancel(
        plan,
        "cancel",
        lambda store: acts.cancel(store, reason),
        {"reason": reason},
        (action_id, wait_s, as_json),
    )


@click.command("approve")
@click.argument("plan")
@click.option("--continue", "mode", flag_value="continue", help="Adopt the paused commit under"
              " an amended revision that declares its out-of-scope files.")  # fmt: skip
@click.option("--redo", "mode", flag_value="redo", help="Roll the item back and run it again.")
@click.option("--changes", "mode", flag_value="changes", help="Accept a protected change.")
@action_id_option
@json_option
def approve_command(plan: str, mode: str | None, action_id: str | None, as_json: bool) -> int:
    """Leave the gate PLAN waits at (needs_amendment, needs_approval, needs_human).

    Exit 0 when it left the gate, 2 when refused (the reason says what to do)."""
    if mode is None:
        raise UsageError("say how to leave the gate.", fix="give --continue, --redo or --changes.")
    with PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        plan_id = store.find_plan(plan)
        result = acts.run_action(
            store, plan_id, "approve", {"mode": mode}, acts.approve(store, mode),
            action_id=action_id,
        )  # fmt: skip
        if not result.replayed:
            refresh_views(store, plan_id)
        extra = {"status": store.plan(plan_id)["status"]}
    return _report(result, as_json, extra)


@click.command("amend")
@click.argument("plan")
@click.argument(
    "plan_file", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=False
)
@click.option(
    "--edits",
    "edits_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="Plan-edit operations instead of a whole plan (`plan schema --edits`).",
)
@click.option("--expect-revision", type=int, default=None, help="Refuse unless PLAN is at N.")
@click.option("--allow-cmd", "allow_cmd", multiple=True, metavar="ARGV_JSON",
              help="Approve one command, as a JSON list.")  # fmt: skip
@action_id_option
@json_option
def amend_command(
    plan: str,
    plan_file: Path | None,
    edits_file: Path | None,
    expect_revision: int | None,
    allow_cmd: tuple[str, ...],
    action_id: str | None,
    as_json: bool,
) -> int:
    """Make PLAN_FILE (or PLAN's revision with --edits applied) the next revision of PLAN.
    Every check runs again against the plan's base; completed items whose content changed
    (and every item after them) run again. Edits name the revision they were written
    against (`base_revision`); against any other they are refused."""
    if (plan_file is None) == (edits_file is None):
        raise UsageError("give a whole plan FILE or --edits EDITS.", fix="give exactly one.")
    with PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        plan_id = store.find_plan(plan)
        row = store.plan(plan_id)
        tree = read_base_tree(Path(row["source_dir"]), row["base"])
        approvals = plan_approvals(store, plan_id, user_approvals(allow_cmd))
        extra: dict[str, Any] = {}
        expect: int | None
        if edits_file is not None:
            data, expect, request = _edited(store, plan_id, edits_file, expect_revision)
            validation = validate_data(data, source=str(edits_file), base=tree, approvals=approvals)
            extra["edits"] = request["summaries"]
        else:
            assert plan_file is not None
            validation = validate_file(plan_file, base=tree, approvals=approvals)
            expect, request = expect_revision, {"expect": expect_revision}
        if not validation.ok or validation.plan is None:
            raise validation.error()
        new = validation.plan
        request["sha256"] = new.content_sha256()
        origin = "edit" if edits_file is not None else "amend"
        result = acts.run_action(
            store, plan_id, "amend", request, acts.amend(store, new, expect, origin),
            action_id=action_id,
        )  # fmt: skip
        if not result.replayed:
            refresh_views(store, plan_id)
        extra["status"] = store.plan(plan_id)["status"]
    unapproved = [f"{c.item}: {show_argv(c.argv or ())}" for c in validation.unapproved]
    if unapproved:
        extra["unapproved"] = unapproved
        if not as_json:
            click.echo("not approved yet (give --allow-cmd to `plan resume`):", err=True)
            for line in unapproved:
                click.echo(f"  {line}", err=True)
    return _report(result, as_json, extra)


def _edited(
    store: PlanStore, plan_id: str, edits_file: Path, expect_revision: int | None
) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """(the edited plan's data, the revision it must replace, the action's request)."""
    edits, problems = read_edits(edits_file)
    if edits is None:
        raise SpecError(str(edits_file), problems, fix="correct the edits (`plan schema --edits`).")
    if expect_revision is not None and expect_revision != edits.base_revision:
        raise UsageError(
            f"--expect-revision {expect_revision} differs from the edits' base_revision"
            f" {edits.base_revision}.",
            fix="drop --expect-revision: the edits name their revision.",
        )
    if edits.base_revision > store.plan(plan_id)["revision"]:
        raise UsageError(
            f"plan {plan_id} has no revision {edits.base_revision}.",
            fix="write the edits against the revision `plan status` shows.",
        )
    data, problems = apply_edits(store.revision(plan_id, edits.base_revision), edits)
    if data is None:
        raise SpecError(str(edits_file), problems, fix="correct the edits; nothing was changed.")
    request = {
        "edits": canonical_sha256(edits.model_dump(mode="json")),
        "expect": edits.base_revision,
        "summaries": [f"{e.op} {e.item}: {e.summary}" for e in edits.edits],
    }
    return data, edits.base_revision, request


@click.command("resume")
@click.argument("plan")
@click.option("--backend", default=None, help="The agent backend (default: the one it ran with).")
@click.option(
    "--max-rounds",
    type=click.IntRange(1, 20),
    default=None,
    help="Agent rounds each item may take (default: as the plan's last run, else 3).",
)
@click.option(
    "--item-timeout",
    "item_timeout",
    type=click.FloatRange(1, 86400),
    default=None,
    help="Seconds each item may run (default: as the plan's last run, else 1800).",
)
@click.option("--allow-cmd", "allow_cmd", multiple=True, metavar="ARGV_JSON",
              help="Approve one command, as a JSON list.")  # fmt: skip
@json_option
def resume_command(
    plan: str,
    backend: str | None,
    max_rounds: int | None,
    item_timeout: float | None,
    allow_cmd: tuple[str, ...],
    as_json: bool,
) -> int:
    """Recover what a dead run left, then run PLAN from the first item not done.

    Exit 0 when every item is done, 1 when it stopped at a gate or a failed item, 3 when
    another process runs it (nothing is written then)."""
    with PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        plan_id = store.find_plan(plan)
    options = {"backend": backend, "max_rounds": max_rounds, "item_timeout_s": item_timeout}

    def progress(kind: str, data: dict[str, Any]) -> None:
        if not as_json and kind in ("item_running", "item_settled", "attempt_recovered"):
            words = " ".join(f"{k}={v}" for k, v in data.items() if v not in (None, ""))
            click.echo(f"{kind.replace('_', ' ')}: {words}", err=True)

    status = resume(plan_id, options, user_approvals(allow_cmd), progress)
    if as_json:
        render.print_json(status)
    else:
        _print_status(status)
    return _EXIT.get(status["status"], 1)


COMMANDS = (stop_command, cancel_command, approve_command, amend_command, resume_command)

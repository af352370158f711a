"""`code-runner run` and `code-runner dry-run`."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import click

import code_runner.cli.render as render
import code_runner.runner.skills as run_skills
from code_runner import proc, runner, workspace
from code_runner.errors import RunTimeout, SafetyViolation
from code_runner.record import Reason, RecordPaths, RunResult
from code_runner.repo import snapshot
from code_runner.task import load_spec


def _overrides(max_rounds: int | None, backend: str | None) -> dict[str, object]:
    found: dict[str, object] = {}
    if max_rounds is not None:
        found["max_rounds"] = max_rounds
    if backend is not None:
        found["backend"] = backend
    return found


spec_argument = click.argument(
    "spec_path", metavar="SPEC", type=click.Path(path_type=Path, dir_okay=False)
)


@click.command("run")
@spec_argument
@click.option("--max-rounds", type=int, help="Override the spec's max_rounds (1..20).")
@click.option("--backend", help="Override the spec's backend (e.g. scripted:fix.json).")
@click.option("--json", "as_json", is_flag=True, help="Print result.json to stdout.")
@click.option(
    "--tmux/--no-tmux",
    default=None,
    help="Run an agent CLI backend in a tmux pane of its own (`code-runner attach "
    "OUTPUT_DIR` to watch). Default: the backend's tmux= setting or $CODE_RUNNER_TMUX.",
)
@click.option(
    "--interactive",
    is_flag=True,
    help="With --tmux and claude-cli: Claude Code's interactive UI in the pane (attach to "
    "steer); the worker ends by writing its final block to a sentinel file.",
)
def run_command(
    spec_path: Path,
    max_rounds: int | None,
    backend: str | None,
    as_json: bool,
    tmux: bool | None,
    interactive: bool,
) -> int:
    """Run a task spec; exit 0 iff the DoD passed on the patch.

    The agent works in a disposable checkout; the source repo stays byte-identical.
    The patch and the full record land in the spec's output_dir. `code-runner stop
    OUTPUT_DIR` ends a run cleanly from another terminal. Exit 1 when the run ended without
    passing, 124 when the spec's timeout_s cut it, 130 when interrupted.
    """
    task = load_spec(spec_path, overrides=_overrides(max_rounds, backend))
    pre = runner.preflight(task, base_dir=spec_path.resolve().parent)
    if tmux is not None or interactive:
        from code_runner.agents.cli_agents.agent import supervise_in_tmux

        agent = supervise_in_tmux(pre.agent, enabled=bool(tmux), interactive=interactive)
        pre = dataclasses.replace(pre, agent=agent)
    out = render.console(stderr=True)
    if tmux:
        out.print(f"watch it live: code-runner attach {task.output_dir}")
    for warning in pre.warnings:
        out.print(f"[yellow]warning:[/] {warning}")
    listeners: list[Any] = [] if as_json else [render.ProgressPrinter(out)]
    result = runner.run_task(pre, listeners=listeners)
    if as_json:
        render.print_json(result.to_json())
    else:
        colour = "green" if result.passed else "red"
        out.print(
            f"[{colour}]{result.status.value}[/] ({result.reason.value}) after "
            f"{result.rounds} round(s), best score {result.best_score:.2f}"
        )
        if result.error:
            out.print(f"  {result.error}")
        if result.usage is not None:
            out.print(f"  usage:  {result.usage.describe()}", markup=False)
        out.print(f"  patch:  {result.patch_artifact}")
        out.print(f"  result: {RecordPaths(task.output_dir, task.task_id).result}")
    if not result.source_unchanged:
        raise SafetyViolation(
            "the source repo changed during the run: " + "; ".join(result.source_differences),
            fix="inspect the source repo with `git status` and `git reflog`; "
            "the run's events.jsonl shows every command the agent ran.",
        )
    return _exit_code(result)


def _exit_code(result: RunResult) -> int:
    if result.passed:
        return 0
    if result.reason is Reason.DOD_CANNOT_START:
        return 3  # a preflight error: the DoD's environment, not the agent's work
    if result.reason is Reason.RUN_TIMEOUT:
        return RunTimeout.exit_code  # as `exec` and timeout(1): the run's own limit cut it
    return 130 if result.interrupted else 1


@click.command("dry-run")
@spec_argument
@click.option("--explain-risk", is_flag=True, help="List what could go wrong and why.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def dry_run_command(spec_path: Path, explain_risk: bool, as_json: bool) -> int:  # noqa: C901 - one section per part of the plan
    """Validate a spec and show what a run would do. Creates nothing."""
    task = load_spec(spec_path)
    pre = runner.preflight(task, base_dir=spec_path.resolve().parent)
    snap = snapshot.take(pre.source)
    dirty = [line[3:] for line in snap.status]
    overlap = [p for p in dirty if task.allowlist_policy.allows(p)]
    plan: dict[str, Any] = {
        "task_id": task.task_id,
        "source": str(pre.source.work_tree),
        "base": pre.base,
        "backend": task.backend,
        "agent": pre.agent.name,
        "allowlist": list(task.allowlist_policy.entries),
        "definition_of_done": task.definition_of_done.model_dump(),
        "max_rounds": task.max_rounds,
        "timeout_s": task.timeout_s,
        "output_dir": str(task.output_dir),
        "output_dir_exists": task.output_dir.exists(),
        "mode": "apply to source" if task.apply_to_source else "patch only",
        "warnings": list(pre.warnings),
        "sandbox": pre.sandbox.posture() if pre.sandbox else {"kind": "none", "mode": "off"},
        "workspace": workspace.planned_kind(
            sandboxed=pre.sandbox is not None and pre.sandbox.use and os.geteuid() == 0,
            cached=not getattr(pre.agent, "edits_as_runner", False),
        ),
        # what the run would refuse (a missing env.python) dry-run refuses the same way
        "dod_environment": runner.project_env(Path(str(pre.source.work_tree)), task.env).describe(),
        "skills": [
            {k: v for k, v in skill.to_dict().items() if k != "files"}
            for skill in run_skills.read_skills(task)
        ],
    }
    risks: list[str] = []
    if explain_risk:
        if dirty:
            risks.append(
                f"the source has {len(dirty)} uncommitted change(s); the workspace starts "
                "from the base commit and will not see them"
            )
        if overlap:
            risks.append(
                "uncommitted source changes overlap the allowlist: " + ", ".join(overlap[:10])
            )
        if any(entry.count("/") == 0 and "." not in entry for entry in plan["allowlist"]):
            risks.append("a top-level directory is allowlisted: the agent may rewrite all of it")
        if "exit_code" not in task.definition_of_done.assertion:
            risks.append(
                "the assertion matches output text; make sure a failing run cannot print it"
            )
        if plan["output_dir_exists"]:
            risks.append("output_dir exists: files of an earlier run of this task_id are replaced")
        if pre.sandbox is None or not pre.sandbox.use:
            risks.append(
                "without an OS sandbox, agent commands, agent CLIs and the DoD run as you: "
                "your files, HOME secrets (keys, .netrc, sockets), network and processes are in "
                "reach; only the command policy (a pattern list, not a boundary) and the source "
                "snapshot guard; the runner is non-dumpable, so a same-user child cannot read "
                "its environment through /proc, but a root runner's children can; the run's "
                "processes are tracked by " + proc.describe_tracking()
            )
        risks += _repo_config_risks(pre.source.work_tree)
        if task.network and pre.sandbox is not None and pre.sandbox.use:
            risks.append("network: true lets agent commands and the DoD reach the network")
        plan["risks"] = risks
    if as_json:
        render.print_json(plan)
        return 0
    out = render.console()
    out.print(f"[bold]{task.task_id}[/]: {task.title}")
    for key in ("source", "base", "backend", "allowlist", "output_dir", "mode", "max_rounds"):
        out.print(f"  {key}: {plan[key]}")
    dod = task.definition_of_done
    out.print(f"  DoD: {dod.command!r} must satisfy {dod.assertion!r} within {dod.timeout_s:g} s")
    for line in plan["dod_environment"]:
        out.print(f"  DoD sees: {line}")
    out.print(f"  workspace: {_workspace_line(plan['workspace'])}")
    for skill in plan["skills"]:
        out.print(
            f"  skill: {skill['name']} from {skill['path']} ({skill['origin']}), sha256 "
            f"{skill['sha256'][:16]}: installed read-only for the worker"
        )
    for warning in pre.warnings:
        out.print(f"  [yellow]warning:[/] {warning}")
    for risk in risks:
        out.print(f"  [yellow]risk:[/] {risk}")
    out.print("nothing was created.")
    return 0


def _workspace_line(planned: dict[str, str]) -> str:
    if planned["kind"] == "overlay":
        return f"an overlay over the checkout cache ({planned['cache']})"
    return f"a clone and checkout ({planned['fallback']})"


def _repo_config_risks(source_dir: Path | None) -> list[str]:
    """What the source repo's code-runner.toml asks for, and whether the user trusts it."""
    from code_runner import config

    user = config.user_config_file()
    repo = config.repo_config(source_dir, config.read_toml(user)[0] if user.is_file() else {})
    if repo is None:
        return []
    if repo.trusted:
        return [f"repo config {repo.describe()}: you trusted this exact file"]
    return [
        f"repo config {repo.describe()}: untrusted, so it may not choose programs, "
        "endpoints, key variables or headers (`code-runner trust` after reading it)"
    ]

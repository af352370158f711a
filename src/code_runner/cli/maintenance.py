"""`doctor`, `gc` and `schema`: the machine, the leftovers, the contract."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import click

import code_runner.cli.render as render
from code_runner import agents, dirs, monitor, proc
from code_runner.errors import CodeRunnerError
from code_runner.repo import git
from code_runner.runner import gc
from code_runner.task import spec_json_schema

_TOOLS: dict[str, tuple[list[str], str]] = {
    "git": (["git", "--version"], "required: workspaces, audit and patches"),
    "rg": (["rg", "--version"], "required by the search_code tool (apt-get install ripgrep)"),
    "bwrap": (["bwrap", "--version"], "OS sandbox for agent commands"),
    "tmux": (["tmux", "-V"], "supervised agent CLI sessions"),
    "node": (["node", "--version"], "runs the Codex and Claude Code CLIs"),
    "npm": (["npm", "--version"], "installs the Codex and Claude Code CLIs"),
}
_CREDENTIALS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


def _probe(argv: list[str]) -> dict[str, Any]:
    path = shutil.which(argv[0])
    if path is None:
        return {"found": False, "path": None, "version": None}
    result = proc.capture(argv, cwd=None, env=git.hardened_env(), timeout_s=10)
    text = (result.stdout or result.stderr).decode("utf-8", "replace").strip().splitlines()
    return {"found": True, "path": path, "version": text[0] if text else None, "ok": result.ok}


def _model_backends(source_dir: Path | None) -> dict[str, Any]:
    from code_runner.agents.doctor import backend_report

    try:
        return backend_report(source_dir)
    except CodeRunnerError as exc:
        return {"config": None, "backends": {}, **_config_problem(exc)}


def _repo_config(source_dir: Path | None) -> dict[str, Any] | None:
    """The source repo's code-runner.toml: whether it is trusted and what it asks for."""
    from code_runner import config

    try:
        user = config.user_config_file()
        repo = config.repo_config(source_dir, config.read_toml(user)[0] if user.is_file() else {})
    except CodeRunnerError as exc:
        return _config_problem(exc)
    if repo is None:
        return None
    return {
        "path": str(repo.path),
        "sha256": repo.sha256,
        "trusted": repo.trusted,
        "asks": list(repo.asks),
        "shadowed": list(repo.shadowed),
        "describe": repo.describe(),
    }


def _config_problem(exc: CodeRunnerError) -> dict[str, Any]:
    """A config file doctor could not use: its problems (file, field) and the exit it owes."""
    return {
        "error": f"{exc.message}\nFix: correct the file as said above, then run "
        "`code-runner doctor` again.",
        "exit_code": exc.exit_code,
    }


def _exit_code(report: dict[str, Any]) -> int:
    """3 when a required tool is missing, else the exit a config problem owes, else 0."""
    if not (report["tools"]["git"]["found"] and report["tools"]["rg"]["found"]):
        return 3
    for part in (report["model_backends"], report["repo_config"] or {}):
        if part.get("error"):
            return int(part.get("exit_code") or 2)
    return 0


def _agent_clis() -> dict[str, Any]:
    from code_runner.agents.cli_agents.probe import cli_report

    return cli_report()


def _sandbox_report() -> dict[str, Any]:
    """The sandbox probe's result and why, and which limits the machine can enforce."""
    from code_runner.sandbox import probe

    return probe().to_dict()


def _workspace_report(sandbox_ok: bool) -> dict[str, str]:
    """Which workspace a sandboxed run gets here: an overlay over the checkout cache, or a
    clone (and why)."""
    from code_runner.workspace import planned_kind

    return planned_kind(sandboxed=sandbox_ok and os.geteuid() == 0)


def doctor_report(source_dir: Path | None = None) -> dict[str, Any]:
    tools = {name: {**_probe(argv), "why": why} for name, (argv, why) in _TOOLS.items()}
    box = _sandbox_report()
    state = dirs.state_dir()
    probe_dir = state if state.exists() else state.parent
    report: dict[str, Any] = {
        "tools": tools,
        "backends": agents.available_backends(),
        "model_backends": _model_backends(source_dir),
        "repo_config": _repo_config(source_dir),
        "agent_clis": _agent_clis(),
        "credentials": {name: name in os.environ for name in _CREDENTIALS},
        "state_dir": str(state),
        "state_dir_writable": os.access(probe_dir, os.W_OK) if probe_dir.exists() else False,
        "subreaper": proc.become_subreaper(),
        "sandbox": box,
        "workspace": _workspace_report(bool(box.get("ok"))),
    }
    report["exit_code"] = _exit_code(report)
    report["ok"] = report["exit_code"] == 0
    return report


def _login_line(found: dict[str, Any]) -> str:
    if found.get("problem"):
        return f"[red]{found['problem']}[/]"
    mark = "[green]ready[/]" if found.get("ready") else "[red]not ready[/]"
    other = (
        f"; with auth=inherit: your sign-in {found['login_file']} "
        f"({'present' if found.get('login_present') else 'missing'})"
        if found.get("auth") == "key" and found.get("login_file")
        else ""
    )
    return f"{found.get('uses')} {mark} (auth={found.get('auth')}){other}"


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--source",
    type=click.Path(path_type=Path, file_okay=False),
    help="Source repo whose code-runner.toml to read (default: the current directory).",
)
def doctor_command(as_json: bool, source: Path | None) -> int:
    """Check the machine: tools, backends, which credentials are set (by name only).

    Exit 0 when all is usable; 2 when a config file has problems (each named with its file and
    field); 3 when git or rg is missing. Everything is printed either way."""
    report = doctor_report(source or Path.cwd())
    if as_json:
        render.print_json(report)
    else:
        _print_doctor(report)
    if report["exit_code"] and not as_json:
        render.console(stderr=True).print(
            "doctor found problems (marked above); fix them and run `code-runner doctor` again.",
            markup=False,
        )
    return int(report["exit_code"])


def _print_doctor(report: dict[str, Any]) -> None:
    out = render.console()
    for name, info in report["tools"].items():
        mark = "[green]ok[/]" if info["found"] else "[red]missing[/]"
        out.print(f"{name:6} {mark} {info.get('version') or ''}  [dim]{info['why']}[/]")
    out.print(f"backends: {', '.join(report['backends'])}")
    repo = report["repo_config"]
    if repo is not None:
        out.print(f"repo config: {repo.get('describe') or repo.get('error')}")
    models = report["model_backends"]
    if models.get("error"):
        out.print(f"[red]config problem[/]: {models['error']}")
    else:
        out.print(f"model backends (from {models['config']}):")
    for name, info in models["backends"].items():
        key = info["api_key_env"]
        state = "set" if info["key_set"] else "not set"
        key_state = "no key needed" if key is None else f"${key} {state}"
        answers = "[green]answers[/]" if info.get("reachable") else f"[red]{info.get('problem')}[/]"
        model = info["model"] or "-"
        out.print(
            f"  {name} ({info['kind']}, model {model}): {info.get('base_url')} {answers}; "
            f"{key_state}"
        )
    for name, info in report["agent_clis"].items():
        found = f"[green]ok[/] {info['version'] or ''}" if info["found"] else "[red]missing[/]"
        how = info["path"] or f"{info['install']} (or set ${info['override']})"
        out.print(f"{name:6} {found}  [dim]{info['backend']} backend: {how}[/]")
        out.print(f"       login: {_login_line(info.get('login') or {})}")
        out.print(f"       skills: {info.get('skills')}")
    for name, present in report["credentials"].items():
        out.print(f"{name}: {'set' if present else 'not set'}")
    out.print(f"state dir: {report['state_dir']}")
    box = report["sandbox"]
    works = "[green]works[/]" if box["ok"] else "[red]not available[/]"
    out.print(f"sandbox: {works}: {box['reason']} [dim]({box['mode']})[/]")
    if box["fix"]:
        out.print(f"  fix: {box['fix']}")
    for name, how in box["limits"].items():
        out.print(f"  {name}: {how}")
    out.print(_workspace_line(report["workspace"]))


def _workspace_line(ws: dict[str, str]) -> str:
    if ws["kind"] == "overlay":
        return f"workspace: [green]overlay[/] over the checkout cache ({ws['cache']})"
    return f"workspace: clone and checkout [dim]({ws['fallback']})[/]"


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def gc_command(dry_run: bool, as_json: bool) -> int:
    """Clean up after killed runs: workspaces, half-applied patches, plans, experiments.

    Workspaces left by killed runs are removed and their records marked abandoned; a patch a
    killed apply left half-applied in a source is repaired (from the apply journal). First,
    plans whose run died are recovered: their processes killed, partial patches
    saved, attempts settled, owed pauses and findings paid. Exit 0 when all is clean; 3 when a
    half-applied patch needs you; 5 when the plan store cannot be read (the rest is still
    cleaned up)."""
    from code_runner.plans.recovery import recover_all

    plans_problem: CodeRunnerError | None = None
    try:  # first: it saves the partial patches gc removes
        plans = recover_all(dry_run=dry_run)
    except CodeRunnerError as exc:  # a broken plan store must not keep the rest uncleaned
        plans, plans_problem = [], exc
    removed = gc.collect(dry_run=dry_run)
    repaired = gc.repair_applies(dry_run=dry_run)
    orphans = monitor.collect_orphans(dry_run=dry_run)
    stuck = any(r.action == "needs you" for r in repaired)
    code = plans_problem.exit_code if plans_problem else 3 if stuck else 0
    if as_json:
        render.print_json(
            {
                "dry_run": dry_run,
                "removed": [r.to_dict() for r in removed],
                "repaired": [r.to_dict() for r in repaired],
                "experiments": [o.to_dict() for o in orphans],
                "plans": [p.to_dict() for p in plans],
                "plans_error": _problem(plans_problem),
            }
        )
    else:
        _print_gc(dry_run, plans, removed, repaired, orphans)
    if plans_problem and not as_json:
        render.console(stderr=True).print(
            f"plans were not recovered: {plans_problem.render()}", markup=False
        )
    return code


def _print_gc(
    dry_run: bool, plans: list[Any], removed: list[Any], repaired: list[Any], orphans: list[Any]
) -> None:
    out = render.console()
    if not removed and not repaired and not orphans and not plans:
        out.print("nothing to clean up")
    for done in plans:
        what = done.skipped or f"settled {len(done.settled)} attempt(s)"
        out.print(f"plan {done.plan_id}: {what}", markup=False)
    for orphan in orphans:
        out.print(f"experiment {orphan.run_dir} ({orphan.reason}): {orphan.action}")
    for fixed in repaired:
        out.print(
            f"half-applied patch in {fixed.source} (run {fixed.run_id}, {fixed.phase}): "
            f"{fixed.action}" + (f" — {fixed.detail}" if fixed.detail else "")
        )
    verb = "would remove" if dry_run else "removed"
    for item in removed:
        out.print(f"{verb} {item.path} (run {item.run_id}: {item.reason})")
        if item.killed_pids:
            out.print(f"  killed leftover processes: {', '.join(map(str, item.killed_pids))}")
        if item.record_marked:
            out.print(f"  marked {item.record_marked} abandoned")


def _problem(exc: CodeRunnerError | None) -> dict[str, Any] | None:
    return None if exc is None else {"message": exc.message, "fix": exc.fix}


@click.command("schema")
def schema_command() -> int:
    """Print the JSON Schema of the task spec."""
    click.echo(json.dumps(spec_json_schema(), indent=2, sort_keys=True))
    return 0

"""`doctor`, `gc` and `schema`: the machine, the leftovers, the contract."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import click

from code_runner import agents, cleanup, dirs, gitx, proc, spec
from code_runner.cli import render

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
    result = proc.capture(argv, cwd=None, env=gitx.hardened_env(), timeout_s=10)
    text = (result.stdout or result.stderr).decode("utf-8", "replace").strip().splitlines()
    return {"found": True, "path": path, "version": text[0] if text else None, "ok": result.ok}


def doctor_report() -> dict[str, Any]:
    tools = {name: {**_probe(argv), "why": why} for name, (argv, why) in _TOOLS.items()}
    state = dirs.state_dir()
    probe_dir = state if state.exists() else state.parent
    return {
        "tools": tools,
        "backends": agents.available_backends(),
        "credentials": {name: name in os.environ for name in _CREDENTIALS},
        "state_dir": str(state),
        "state_dir_writable": os.access(probe_dir, os.W_OK) if probe_dir.exists() else False,
        "subreaper": proc.become_subreaper(),
        "ok": tools["git"]["found"] and tools["rg"]["found"],
    }


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True)
def doctor_command(as_json: bool) -> int:
    """Check the machine: tools, backends, which credentials are set (by name only)."""
    report = doctor_report()
    if as_json:
        render.print_json(report)
        return 0 if report["ok"] else 3
    out = render.console()
    for name, info in report["tools"].items():
        mark = "[green]ok[/]" if info["found"] else "[red]missing[/]"
        out.print(f"{name:6} {mark} {info.get('version') or ''}  [dim]{info['why']}[/]")
    out.print(f"backends: {', '.join(report['backends'])}")
    for name, present in report["credentials"].items():
        out.print(f"{name}: {'set' if present else 'not set'}")
    out.print(f"state dir: {report['state_dir']}")
    return 0 if report["ok"] else 3


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--json", "as_json", is_flag=True)
def gc_command(dry_run: bool, as_json: bool) -> int:
    """Remove workspaces left by killed runs and mark their records abandoned."""
    removed = cleanup.collect(dry_run=dry_run)
    if as_json:
        render.print_json({"dry_run": dry_run, "removed": [r.to_dict() for r in removed]})
        return 0
    out = render.console()
    if not removed:
        out.print("nothing to clean up")
    verb = "would remove" if dry_run else "removed"
    for item in removed:
        out.print(f"{verb} {item.path} (run {item.run_id}: {item.reason})")
        if item.killed_pids:
            out.print(f"  killed leftover processes: {', '.join(map(str, item.killed_pids))}")
        if item.record_marked:
            out.print(f"  marked {item.record_marked} abandoned")
    return 0


@click.command("schema")
def schema_command() -> int:
    """Print the JSON Schema of the task spec."""
    click.echo(json.dumps(spec.spec_json_schema(), indent=2, sort_keys=True))
    return 0

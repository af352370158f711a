"""The report's Material Passport block: what ran, where, on what, from which code.

Rendered from `result.json` alone (its `run_id` and `provenance`), so the block a person
reads and the record a tool reads never disagree.
"""

from __future__ import annotations

from typing import Any

from code_runner.monitor.result import ExperimentResult


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _git(git: Any) -> str:
    if not isinstance(git, dict) or not git.get("commit"):
        return "not a git repository" if isinstance(git, dict) else "not recorded"
    dirty = f"dirty, diff in `{git['diff']}`" if git.get("diff") else "clean"
    return f"`{git['commit']}` ({dirty})"


def _python(python: Any) -> tuple[str, str]:
    if not isinstance(python, dict):
        return "not a Python command", "-"
    if "error" in python:
        return f"probe failed: {python['error']}", "-"
    packages = python.get("packages") or {}
    listed = ", ".join(f"{k} {v}" for k, v in packages.items()) or "none of the usual ones"
    return f"{python.get('python')} (`{python.get('executable')}`)", listed


def passport_lines(result: ExperimentResult) -> list[str]:
    p = result.provenance
    python, packages = _python(p.get("python"))
    seeds = p.get("seeds") or {}
    cpu = p.get("cpu") or {}
    memory = p.get("memory_total_bytes")
    rows = [
        ("run id", f"`{result.run_id}`" if result.run_id else "-"),
        ("command", f"`{result.display_command}`"),
        ("working dir", f"`{result.cwd}`"),
        ("code", _git(p.get("git"))),
        ("python", python),
        ("packages", packages),
        ("seeds", ", ".join(f"--{k} {v}" for k, v in seeds.items()) or "none in the command"),
        ("host", f"{p.get('host', '?')} ({p.get('platform', '?')})"),
        ("cpu", f"{cpu.get('model', '?')} x {cpu.get('count', '?')}"),
        ("memory", f"{memory / 2**30:.1f} GiB" if isinstance(memory, int) else "?"),
    ]
    lines = ["", "## Material Passport", "", "| field | value |", "| --- | --- |"]
    return lines + [f"| {name} | {_cell(value)} |" for name, value in rows]

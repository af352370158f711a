"""One plan item as a task: its spec, its DoD, how its run is judged, its commit message.

An item runs as a normal task in plan-item mode (the round loop keeps every safe change;
see `runner.rounds.RoundLoop.item_mode`). Its result is judged here: refused changes and
workspace git-state changes are violations (nothing committed), safe changes outside the
declared files are kept and reported as out of scope, and kept changes to protected files
need approval.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from code_runner.apply.commit import commit_title
from code_runner.plans.commands import CommandSyntax, tokenize
from code_runner.plans.model import CheckType, Item, Plan
from code_runner.record import Reason, ResultStatus, RunResult
from code_runner.task import TaskSpec
from code_runner.task.paths import Allowlist, path_problem

PROTECTED = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "*.lock",
    "tox.ini",
    "noxfile.py",
    "conftest.py",
    "Makefile",
    ".gitattributes",
    ".gitmodules",
)


class EveryPath(Allowlist):
    """Plan-item mode: every path git's rules accept may change; the plan judges scope."""

    def allows(self, path: str) -> bool:
        return path_problem(path) is None


def every_path() -> EveryPath:
    return EveryPath(entries=(".",))


def item_argvs(item: Item) -> list[list[str]]:
    out = []
    for check in item.acceptance:
        if check.type is CheckType.CMD:
            try:
                out.append(tokenize(check.text))
            except CommandSyntax:
                continue  # validation refused the plan already
    return out


NO_COMMAND = ("true",)  # an item without `cmd` checks: its DoD is a program that succeeds


def dod_argv(argvs: Sequence[Sequence[str]]) -> list[list[str]]:
    """The item's DoD: its approved commands in order, run without a shell (verify's argv
    form), the first one that fails ending it."""
    return [list(argv) for argv in argvs] or [list(NO_COMMAND)]


def declared(item: Item) -> set[str]:
    paths = {f.path for f in item.files}
    paths |= {f.renamed_from for f in item.files if f.renamed_from}
    return paths


def prompt(plan: Plan, item: Item) -> str:
    files = "\n".join(
        f"- {f.path} ({f.kind}{' from ' + f.renamed_from if f.renamed_from else ''}): {f.change}"
        for f in item.files
    )
    checks = "\n".join(f"- [{a.type}] {a.text}" for a in item.acceptance)
    return (
        f"Plan: {plan.summary}\n\nItem {item.id}: {item.title}\n\n{item.intent}\n\n"
        f"Files to change:\n{files}\n\nAcceptance:\n{checks}\n"
    )


def item_spec(
    plan: Plan,
    item: Item,
    *,
    cwd: Path,
    output_dir: Path,
    backend: str,
    max_rounds: int,
    timeout_s: float,
    on_scope: str = "warn",
) -> TaskSpec:
    """The item as a task; its allowlist is the declared files, so an agent CLI's live watch
    sees a write outside them at once (`on_scope`: warn, or stop the round)."""
    argvs = item_argvs(item)
    allow = sorted(p for p in declared(item) if path_problem(p) is None) or ["."]
    return TaskSpec.model_validate(
        {
            "task_id": item.id,
            "title": item.title,
            "prompt": prompt(plan, item),
            "backend": backend.replace("{item}", item.id),
            "cwd": str(cwd),
            "output_dir": str(output_dir),
            "allowlist": allow,
            "definition_of_done": {
                "argv": dod_argv(argvs),
                "assertion": "exit_code == 0",
                "timeout_s": min(timeout_s, 3600.0),
            },
            "max_rounds": max_rounds,
            "timeout_s": timeout_s,
            "on_scope": on_scope,
        }
    )


@dataclass(frozen=True)
class Judged:
    """How an item's run is judged for the plan."""

    ok: bool  # passed (with or without changes)
    unchanged: bool = False
    changed: tuple[str, ...] = ()
    out_of_scope: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    violations: tuple[str, ...] = field(default_factory=tuple)
    diagnostic: str = ""
    timeout: bool = False


_TIMEOUTS = {Reason.RUN_TIMEOUT, Reason.AGENT_TIMEOUT, Reason.BUDGET_WALL_CLOCK}


def judge(result: RunResult, item: Item, later_programs: set[str]) -> Judged:
    violations = list(result.safety_violations)
    violations += [f"{d.path}: {d.reason}" for d in result.dropped_changes if d.refused]
    changed = tuple(c.path for c in result.changed_files)
    if violations:
        return Judged(ok=False, changed=changed, violations=tuple(violations))
    if result.status is not ResultStatus.PASSED:
        why = result.error or result.reason.value
        return Judged(ok=False, changed=changed, diagnostic=why, timeout=result.reason in _TIMEOUTS)
    mine = {p.casefold() for p in declared(item)}
    outside = tuple(p for p in changed if p.casefold() not in mine)
    protected = tuple(p for p in changed if is_protected(p, later_programs))
    return Judged(
        ok=True,
        unchanged=not changed,
        changed=changed,
        out_of_scope=outside,
        protected=protected,
    )


def is_protected(path: str, later_programs: set[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    if path.startswith(".github/") or path in later_programs:
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in PROTECTED)


def later_programs(plan: Plan, item: Item) -> set[str]:
    """Files a later item's commands run as their program (a path, not a bare name)."""
    index = plan.items.index(item)
    found = set()
    for later in plan.items[index + 1 :]:
        for argv in item_argvs(later):
            program = argv[0].removeprefix("./")
            if "/" in argv[0] or argv[0].startswith("."):
                found.add(program)
    return found


_MENTION = re.compile(r"(?<![\w`])([@#])(?=\w)")


def item_title(item: Item) -> str:
    """`Pn: <title>`, one line, with issue references and @mentions neutralised."""
    text = commit_title(f"{item.id}: {item.title}", item.id)
    text = _MENTION.sub(lambda m: m.group(1) + " ", text)
    return re.sub(r"\bGH-(?=\d)", "GH ", text, flags=re.IGNORECASE)


def commit_message(item: Item, *, plan_id: str, revision: int, run_id: str, dod: str) -> str:
    return (
        f"{item_title(item)}\n\n"
        f"Plan-Item: {item.id}\nPlan-Revision: r{revision}\nCode-Runner-Plan: {plan_id}\n"
        f"Code-Runner-Run: {run_id}\nCode-Runner-DoD: {dod}\n"
    )

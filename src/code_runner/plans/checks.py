"""A plan checked whole: the file subset, the field rules, then the meaning checks.

Every problem is collected (never only the first), each on one line naming the item and
the field, so a plan costs one edit. Meaning checks: ids unique and increasing,
`depends_on` naming earlier items only (so no cycle can exist), the per-item file rules
(`renamed_from` only for a rename, no path in two operations), and the projected file
state across items (`code_runner.plans.projection`). `cmd` checks are tokenized and each
argv is looked up in the user's approvals; `check` statements are listed as unverified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from code_runner.errors import SpecError
from code_runner.plans.commands import Approvals, CommandSyntax, show_argv, tokenize
from code_runner.plans.document import read_plan_document
from code_runner.plans.model import CheckType, FileKind, Item, Plan, model_at
from code_runner.plans.projection import BaseTree, Projection, operation_problem, path_key
from code_runner.problems import describe_all, short

_ITEM_LOC = re.compile(r"\bitems\[(\d+)\]")


@dataclass(frozen=True)
class CommandCheck:
    """One `cmd` acceptance entry: its argv (or why it has none) and whether it may run."""

    item: str
    index: int
    text: str
    argv: tuple[str, ...] | None
    problem: str | None
    approved: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "item": self.item,
            "index": self.index,
            "text": self.text,
            "argv": list(self.argv) if self.argv is not None else None,
            "problem": self.problem,
            "approved": self.approved,
        }


@dataclass(frozen=True)
class Validation:
    source: str
    plan: Plan | None
    problems: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    commands: tuple[CommandCheck, ...] = ()
    unverified: tuple[tuple[str, str], ...] = ()  # (item, statement) of `check` entries
    base: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def unapproved(self) -> tuple[CommandCheck, ...]:
        return tuple(c for c in self.commands if c.argv is not None and not c.approved)

    def error(self) -> SpecError:
        return SpecError(
            self.source,
            self.problems,
            fix="correct the plan and validate again (`code-runner plan schema` shows the "
            "format); nothing was created.",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "valid": self.ok,
            "problems": list(self.problems),
            "warnings": list(self.warnings),
            "base": self.base,
            "plan_sha256": self.plan.content_sha256() if self.plan else None,
            "items": [item.id for item in self.plan.items] if self.plan else [],
            "commands": [command.to_dict() for command in self.commands],
            "unverified_checks": [{"item": i, "text": t} for i, t in self.unverified],
        }


def validate_file(path: Path, *, base: BaseTree | None, approvals: Approvals) -> Validation:
    data, problems = read_plan_document(path)
    if data is None:
        return Validation(source=str(path), plan=None, problems=tuple(problems))
    return validate_data(data, source=str(path), base=base, approvals=approvals)


def validate_data(
    data: object, *, source: str, base: BaseTree | None, approvals: Approvals
) -> Validation:
    if not isinstance(data, dict):
        return Validation(
            source, None, (f"the top level must be a mapping of plan fields, got {short(data)}",)
        )
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        lines = describe_all(exc, model_at=model_at)
        return Validation(source, None, tuple(_with_item_ids(lines, data)))
    report = _Report()
    _check_ids(plan, report)
    before = len(report.problems)
    for index, item in enumerate(plan.items):
        _check_item_files(index, item, report)
    if len(report.problems) == before:  # the projection assumes well-formed items
        _check_projection(plan, base, report)
    commands = _check_commands(plan, approvals, report)
    _warn(plan, commands, report)
    unverified = tuple(
        (item.id, check.text)
        for item in plan.items
        for check in item.acceptance
        if check.type is CheckType.CHECK
    )
    return Validation(
        source=source,
        plan=plan,
        problems=tuple(dict.fromkeys(report.problems)),
        warnings=tuple(report.warnings),
        commands=commands,
        unverified=unverified,
        base=base.commit if base else None,
    )


@dataclass
class _Report:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def at(self, index: int, item: Item, where: str, message: str) -> None:
        self.problems.append(f"items[{index}] ({item.id}).{where}: {message}")


def _with_item_ids(lines: list[str], data: dict[Any, Any]) -> list[str]:
    items = data.get("items")

    def named(match: re.Match[str]) -> str:
        index = int(match.group(1))
        item = items[index] if isinstance(items, list) and index < len(items) else None
        item_id = item.get("id") if isinstance(item, dict) else None
        if isinstance(item_id, str) and re.fullmatch(r"P[0-9]{1,3}", item_id):
            return f"{match.group(0)} ({item_id})"
        return match.group(0)

    return [_ITEM_LOC.sub(named, line, count=1) for line in lines]


def _number(item_id: str) -> int:
    return int(item_id[1:])


def _check_ids(plan: Plan, report: _Report) -> None:
    position = {item.id: index for index, item in reversed(list(enumerate(plan.items)))}
    previous = 0
    for index, item in enumerate(plan.items):
        if position[item.id] != index:
            report.at(index, item, "id", f"{item.id} is used twice; give each item its own id")
        elif _number(item.id) <= previous:
            report.at(
                index, item, "id", f"{item.id} comes after P{previous}; number items in run order"
            )
        previous = max(previous, _number(item.id))
        seen: set[str] = set()
        for dep in item.depends_on:
            where = "depends_on"
            if dep in seen:
                report.at(index, item, where, f"{dep} is listed twice; list it once")
            elif dep == item.id:
                report.at(index, item, where, f"{item.id} depends on itself; remove it")
            elif dep not in position:
                report.at(index, item, where, f"{dep} is not an item of this plan")
            elif position[dep] > index:
                report.at(
                    index,
                    item,
                    where,
                    f"{dep} runs later; an item depends only on earlier items "
                    "(reorder the items: a dependency cycle cannot run)",
                )
            seen.add(dep)


def _check_item_files(index: int, item: Item, report: _Report) -> None:
    used: dict[str, str] = {}
    for n, declared in enumerate(item.files):
        where = f"files[{n}]"
        if declared.kind is FileKind.RENAME and declared.renamed_from is None:
            report.at(index, item, f"{where}.renamed_from", "a rename needs the old path")
        if declared.kind is not FileKind.RENAME and declared.renamed_from is not None:
            report.at(
                index, item, f"{where}.renamed_from", "is only for kind rename; set it to null"
            )
        sides = [("path", declared.path)]
        if declared.kind is FileKind.RENAME and declared.renamed_from is not None:
            sides.append(("renamed_from", declared.renamed_from))
        for side, path in sides:
            key = path_key(path)
            if key in used:
                report.at(
                    index,
                    item,
                    f"{where}.{side}",
                    f"{short(path)} is already declared in this item ({used[key]}); "
                    "declare each path in one operation",
                )
            else:
                used[key] = f"files[{n}]"


def _depends(plan: Plan, item: Item) -> set[str]:
    """Every item `item` depends on, directly or through others."""
    ids = [each.id for each in plan.items]
    earlier = set(ids[: ids.index(item.id)])
    out: set[str] = set()
    pending = list(item.depends_on)
    while pending:
        dep = pending.pop()
        if dep in earlier and dep not in out:  # a bad reference is reported by the id rules
            out.add(dep)
            pending.extend(plan.item(dep).depends_on)
    return out


def _check_projection(plan: Plan, base: BaseTree | None, report: _Report) -> None:
    state = Projection(base=base)
    for index, item in enumerate(plan.items):
        needs = _depends(plan, item)
        failed = False
        for n, declared in enumerate(item.files):
            problem = operation_problem(state, declared) or _spelling(state, declared)
            if problem:
                report.at(index, item, f"files[{n}]", problem)
                failed = True
            for path in filter(None, (declared.path, declared.renamed_from)):
                maker = state.origin(path_key(path))
                if maker and maker not in needs and declared.kind is not FileKind.ADD:
                    report.at(
                        index,
                        item,
                        "depends_on",
                        f"uses {short(path)}, which {maker} creates; add {maker} to depends_on",
                    )
        if not failed:
            state.apply(item)


def _spelling(state: Projection, declared: Any) -> str | None:
    for path in filter(None, (declared.path, declared.renamed_from)):
        entry = state.entries.get(path_key(path))
        if entry and entry[0] != path and declared.kind is not FileKind.ADD:
            return f"{short(path)} is spelled {short(entry[0])} in the repository; use that"
    return None


def _check_commands(plan: Plan, approvals: Approvals, report: _Report) -> tuple[CommandCheck, ...]:
    out: list[CommandCheck] = []
    for index, item in enumerate(plan.items):
        for n, check in enumerate(item.acceptance):
            if check.type is not CheckType.CMD:
                continue
            try:
                argv = tokenize(check.text)
            except CommandSyntax as exc:
                report.at(index, item, f"acceptance[{n}].text", f"{short(check.text)} {exc}")
                out.append(CommandCheck(item.id, n, check.text, None, str(exc), False))
                continue
            out.append(
                CommandCheck(item.id, n, check.text, tuple(argv), None, approvals.approves(argv))
            )
    return tuple(out)


def _warn(plan: Plan, commands: tuple[CommandCheck, ...], report: _Report) -> None:
    with_cmd = {command.item for command in commands}
    for item in plan.items:
        if item.id not in with_cmd:
            report.warnings.append(
                f"{item.id}: no cmd check; it would run with Code-Runner-DoD: none"
            )
    for command in commands:
        if command.argv is not None and not command.approved:
            report.warnings.append(
                f"{command.item}: {show_argv(command.argv)} is not approved; approve it with "
                f"--allow-cmd '{show_argv(command.argv)}' or in [plans] allowed_commands of "
                "your config"
            )
    for question in plan.questions:
        report.warnings.append(f"open question: {question}")

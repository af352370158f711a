"""The items of a batch: task specs (a directory of spec files, or a JSONL of specs), or the
cells of an `exec` sweep (a command template and a parameter grid), read and checked whole.

Every problem with ITEMS is found before anything runs and reported at once (`SpecError`).
An item is a plain value that travels to a worker as JSON: it names its kind, its id, the
spec (or argv) to run and the directory its relative paths are anchored in.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner.errors import SpecError
from code_runner.problems import anchored_path, read_mapping_file, read_text_file, short

MAX_ITEMS_BYTES = 64 * 1024 * 1024
SPEC_SUFFIXES = (".json", ".yaml", ".yml", ".toml")
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")


class ItemKind(StrEnum):
    TASK = "task"
    EXEC = "exec"


@dataclass(frozen=True)
class Item:
    """One unit of a batch. `spec`: a task spec mapping, or for exec `argv`, `cwd` and options."""

    item_id: str
    kind: ItemKind
    spec: dict[str, Any]
    base_dir: str
    source: str | None = None  # a task's source repo, absolute: its lock and its bundle
    writes_source: bool = False  # apply_to_source: the item holds its source alone

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Item:
        return cls(**{**data, "kind": ItemKind(data["kind"])})


@dataclass(frozen=True)
class Batch:
    """What ITEMS held: its items in order, and whether they are the cells of a sweep."""

    items: tuple[Item, ...]
    sweep: bool = False
    origin: str = ""
    problems: tuple[str, ...] = field(default=())


def safe_id(text: str) -> str:
    """An item id usable as a directory name: unsafe characters become `_`."""
    cleaned = _ID_UNSAFE.sub("_", text).strip("._") or "item"
    return cleaned[:120]


def _task_item(data: dict[Any, object], base_dir: Path, where: str) -> tuple[Item | None, str]:
    task_id = data.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        return None, f"{where}: no task_id; every task spec needs one (it is the item's id)"
    cwd = data.get("cwd")
    source: str | None = None
    if isinstance(cwd, str):
        try:
            source = str(anchored_path(cwd, base_dir, what="the source repo"))
        except ValueError as exc:
            return None, f"{where}: cwd {exc}"
    item = Item(
        item_id=safe_id(task_id),
        kind=ItemKind.TASK,
        spec={str(k): v for k, v in data.items()},
        base_dir=str(base_dir),
        source=source,
        writes_source=bool(data.get("apply_to_source")),
    )
    return item, ""


def _from_directory(root: Path) -> tuple[list[Item], list[str]]:
    items: list[Item] = []
    problems: list[str] = []
    paths = sorted(p for p in root.iterdir() if p.suffix.lower() in SPEC_SUFFIXES and p.is_file())
    for path in paths:
        if path.name.endswith((".script.json", ".result.json", ".status.json")):
            continue  # a scripted backend's script or a record beside the specs
        data, found = read_mapping_file(path, what="a task spec", max_bytes=MAX_ITEMS_BYTES)
        problems.extend(f"{path.name}: {p}" for p in found)
        if data is None:
            continue
        item, problem = _task_item(data, root, path.name)
        if item is None:
            problems.append(problem)
        else:
            items.append(item)
    if not paths:
        problems.append(f"{root} holds no task spec ({', '.join(SPEC_SUFFIXES)} files)")
    return items, problems


def _from_jsonl(path: Path, text: str) -> tuple[list[Item], list[str]]:
    items: list[Item] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not JSON ({exc.msg}); write one spec object a line")
            continue
        if not isinstance(data, dict):
            problems.append(f"line {number}: a task spec must be an object, got {short(data)}")
            continue
        item, problem = _task_item(data, path.parent, f"line {number}")
        if item is None:
            problems.append(problem)
        else:
            items.append(item)
    if not items and not problems:
        problems.append("the file holds no spec; write one task spec object a line")
    return items, problems


SWEEP_OPTIONS = ("timeout", "success", "expect", "type", "grace")


def _grid_cells(grid: object) -> tuple[list[dict[str, object]], list[str]]:
    if not isinstance(grid, dict) or not grid:
        return [], ["grid must be a mapping of parameter names to lists of values"]
    problems = [
        f"grid.{name}: give a non-empty list of values"
        for name, values in grid.items()
        if not isinstance(values, list) or not values
    ]
    if problems:
        return [], problems
    names = [str(name) for name in grid]
    cells = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]
    return cells, []


def _template_words(command: object) -> tuple[list[str], list[str]]:
    if isinstance(command, str):
        try:
            return shlex.split(command), []
        except ValueError as exc:
            return [], [f"command cannot be split into words ({exc})"]
    if isinstance(command, list) and command and all(isinstance(w, str) for w in command):
        return list(command), []
    return [], ["command must be a string or a list of words, e.g. python train.py --lr {lr}"]


def _fill(words: list[str], cell: dict[str, object]) -> list[str]:
    return [word.format(**cell) for word in words]


def _from_sweep(path: Path, data: dict[Any, object]) -> tuple[list[Item], list[str]]:
    words, problems = _template_words(data.get("command"))
    cells, grid_problems = _grid_cells(data.get("grid"))
    problems += grid_problems
    unknown = sorted(str(k) for k in data if k not in ("command", "grid", "cwd", *SWEEP_OPTIONS))
    problems += [
        f"unknown field {name!r}; sweep fields: command, grid, cwd, timeout, success, "
        "expect, type, grace"
        for name in unknown
    ]
    cwd = anchored_path(str(data.get("cwd") or "."), path.parent, what="the sweep's cwd")
    items: list[Item] = []
    for index, cell in enumerate(cells):
        try:
            argv = _fill(words, cell)
        except (KeyError, IndexError, ValueError) as exc:
            problems.append(f"command: the template names {exc} that the grid does not define")
            break
        label = ",".join(f"{k}={v}" for k, v in cell.items())
        options = {k: data[k] for k in SWEEP_OPTIONS if k in data}
        spec: dict[str, Any] = {"argv": argv, "cwd": str(cwd), "cell": cell, **options}
        items.append(Item(safe_id(f"{index:03d}-{label}"), ItemKind.EXEC, spec, str(path.parent)))
    return items, problems


def _duplicates(items: list[Item]) -> list[str]:
    seen: dict[str, int] = {}
    for item in items:
        seen[item.item_id] = seen.get(item.item_id, 0) + 1
    return [
        f"item id {name!r} is used {n} times; ids must be unique"
        for name, n in seen.items()
        if n > 1
    ]


def load_items(path: Path) -> Batch:
    """ITEMS read whole: a directory of specs, a `.jsonl` of specs, or a sweep file.

    Raises `SpecError` listing every problem; nothing has run yet."""
    source = str(path)
    path = Path(os.path.abspath(path))
    sweep = False
    if path.is_dir():
        items, problems = _from_directory(path)
    elif path.suffix.lower() == ".jsonl":
        text, problems = read_text_file(
            path, what="a JSONL of task specs", max_bytes=MAX_ITEMS_BYTES
        )
        items = []
        if text is not None:
            items, problems = _from_jsonl(path, text)
    else:
        data, problems = read_mapping_file(path, what="a sweep file", max_bytes=MAX_ITEMS_BYTES)
        items = []
        if data is not None:
            items, found = _from_sweep(path, data)
            problems += found
            sweep = True
    problems += _duplicates(items)
    if problems:
        raise SpecError(
            source,
            problems,
            fix="ITEMS is a directory of task specs, a .jsonl with one spec a line, or a sweep "
            "file (command: a template with {name} fields, grid: name -> list of values)",
        )
    return Batch(tuple(items), sweep=sweep, origin=source)

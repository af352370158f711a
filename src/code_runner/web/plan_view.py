"""What the plan page shows: `plan.status.json`, its events, and per item the last attempt's
patch with each file marked declared, out of scope or protected.

The plan's views are files the plan executor writes (`plans.report.write_views`); an item's
attempt is a task run, read through `record` like any other. An attempt whose record is not
under a configured root is named, never read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import code_runner.web.diff as diff
from code_runner.record import RecordPaths
from code_runner.web.catalog import read_json
from code_runner.web.roots import OutsideRoots, Roots, RunKey, open_file
from code_runner.web.task_view import MAX_PATCH_BYTES, read_events
from code_runner.web.text import clean_value

LIVE_STATES = ("running", "pending")


@dataclass
class ItemView:
    item: dict[str, Any]
    record: RunKey | None = None  # the last attempt's task run, when under a root
    files: list[diff.FileDiff] = field(default_factory=list)
    declared: set[str] = field(default_factory=set)
    revision: object = None  # the plan's revision now

    @property
    def not_shown(self) -> str:
        """Why the item shows no diff."""
        if self.record is not None:
            return "No change recorded for this item."
        if not self.item.get("attempts"):
            return f"Not run yet ({self.item.get('state') or 'pending'})."
        return "Its run record is not under the configured roots."

    def mark(self, path: str) -> str:
        if path in (self.item.get("protected") or []):
            return "protected"
        if path in (self.item.get("out_of_scope") or []):
            if path in (self.item.get("declared") or []):  # an amendment declared it since
                return f"out of scope, declared in r{self.revision}"
            return "out of scope"
        return "declared" if path in self.declared else ""


@dataclass(frozen=True)
class PlanPage:
    record_dir: Path
    status: dict[str, Any]
    items: list[ItemView]
    events: list[dict[str, Any]]

    @property
    def live(self) -> bool:
        return str(self.status.get("status")) in LIVE_STATES

    @property
    def events_offset(self) -> int:
        try:
            return (self.record_dir / "plan.events.jsonl").stat().st_size
        except OSError:
            return 0


def locate_plan(roots: Roots, root: int, rel: str) -> Path:
    record_dir = roots.resolve(root, rel)
    if not (record_dir / "plan.status.json").is_file():
        raise OutsideRoots("no such plan")
    return record_dir


def _attempt(roots: Roots, view: ItemView) -> None:
    attempts = view.item.get("attempts") or []
    record_dir = attempts[-1].get("record_dir") if attempts else None
    if not isinstance(record_dir, str):
        return
    folder = Path(record_dir).resolve()
    if roots.key_of(folder) is None:
        return
    task_id = str(view.item.get("id", ""))
    paths = RecordPaths(folder, task_id)
    if not paths.status.is_file():
        return
    key = roots.key_of(paths.status.resolve())
    if key is not None:
        view.record = RunKey(key.root, key.rel.removesuffix(".status.json"))
    try:
        with open_file(paths.patch) as handle:
            patch = handle.read(MAX_PATCH_BYTES).decode("utf-8", errors="replace")
    except OSError:
        patch = ""
    view.files, _ = diff.parse(patch)
    spec = read_json(paths.request).get("spec") or {}
    view.declared = {str(p) for p in spec.get("allowlist") or []}


def load_plan(roots: Roots, record_dir: Path) -> PlanPage:
    status: dict[str, Any] = clean_value(read_json(record_dir / "plan.status.json"))  # type: ignore[assignment]
    items = []
    for item in status.get("items") or []:
        if isinstance(item, dict):
            view = ItemView(item, revision=status.get("revision"))
            _attempt(roots, view)
            items.append(view)
    events = read_events(record_dir / "plan.events.jsonl")
    return PlanPage(record_dir, status, items, events)


__all__ = ["ItemView", "PlanPage", "load_plan", "locate_plan"]

"""What the dashboard shows of a batch: its `results.jsonl`, one row per item, side by side.

The driver writes one line per finished try; the last line of each item is its result. An
item's own run (an exec run dir, or a task record) is linked, and its metrics overlaid in
Compare, only when it lies under a configured root: a path in the log is never read as it
is, only through `Roots`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code_runner.web.roots import OutsideRoots, Roots, RunKey, open_file
from code_runner.web.text import clean, clean_value

RESULTS_NAME = "results.jsonl"  # as batch/results.py names it
MAX_RESULTS_BYTES = 32 * 1024 * 1024


def locate_batch(roots: Roots, root: int, rel: str) -> Path:
    """The batch run dir a URL names; `OutsideRoots` for anything else."""
    run_dir = roots.resolve(root, rel)
    if not (run_dir / "batch.json").is_file() or not (run_dir / RESULTS_NAME).is_file():
        raise OutsideRoots("no such batch")
    return run_dir


def final_lines(run_dir: Path) -> list[dict[str, Any]]:
    """The last line of each item, in the order items first finished."""
    try:
        with open_file(run_dir / RESULTS_NAME) as handle:
            raw = handle.read(MAX_RESULTS_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    last: dict[str, dict[str, Any]] = {}
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "item_id" in record:
            last[str(record["item_id"])] = record
    return list(last.values())


@dataclass(frozen=True)
class BatchItem:
    item_id: str
    kind: str
    status: str
    exit_code: object
    duration_s: object
    cell: dict[str, Any]
    outcome: str  # the exec's state, or the task's status
    link: str  # the item's own run page, when under a root
    exec_key: RunKey | None = None


@dataclass(frozen=True)
class BatchView:
    name: str
    key: RunKey
    items: list[BatchItem]
    params: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for item in self.items:
            found[item.status] = found.get(item.status, 0) + 1
        return found


def _own_run(roots: Roots, record: dict[str, Any]) -> tuple[str, RunKey | None]:
    attempt = record.get("attempt_dir")
    if not isinstance(attempt, str) or not attempt:
        return "", None
    folder = Path(attempt)
    key = roots.key_of(folder.resolve()) if folder.is_absolute() else None
    if key is None:
        return "", None
    try:
        real = roots.resolve(key.root, key.rel)
    except OutsideRoots:
        return "", None
    if (real / "run" / "status.json").is_file():
        exec_key = RunKey(key.root, f"{key.rel}/run")
        return f"/exec/{exec_key.url_part}", exec_key
    status = sorted((real / "run").glob("*.status.json"))
    if status:
        task_id = status[0].name.removesuffix(".status.json")
        return f"/task/{key.url_part}/run/{task_id}", None
    return "", None


def load_batch(roots: Roots, run_dir: Path) -> BatchView:
    key = roots.key_of(run_dir) or RunKey(0, ".")
    items: list[BatchItem] = []
    params: dict[str, None] = {}
    for record in final_lines(run_dir):
        summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
        assert isinstance(summary, dict)
        cell = summary.get("cell") if isinstance(summary.get("cell"), dict) else {}
        assert isinstance(cell, dict)
        params.update(dict.fromkeys(str(k) for k in cell))
        link, exec_key = _own_run(roots, record)
        outcome = summary.get("state") or summary.get("status") or ""
        items.append(
            BatchItem(
                item_id=clean(str(record.get("item_id"))),
                kind=clean(str(record.get("kind") or "")),
                status=clean(str(record.get("status") or "")),
                exit_code=record.get("exit_code"),
                duration_s=record.get("duration_s"),
                cell={str(k): clean_value(v) for k, v in cell.items()},
                outcome=clean(str(outcome)),
                link=link,
                exec_key=exec_key,
            )
        )
    return BatchView(clean(run_dir.name), key, items, list(params))


__all__ = ["BatchItem", "BatchView", "final_lines", "load_batch", "locate_batch"]

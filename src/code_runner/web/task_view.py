"""What the task run page shows, read from the run's record through `record`.

The result (once there is one) comes from `load_result`; while the run works, the page
reads `status.json` and the rounds so far. Every text an agent or a command wrote is passed
through `text.clean`; the templates escape it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import code_runner.web.diff as diff
from code_runner.record import RecordPaths, RunResult
from code_runner.record.result import RoundDetail
from code_runner.web.catalog import read_json, task_result
from code_runner.web.roots import OutsideRoots, Roots, open_file
from code_runner.web.text import clean, clean_value

TAIL_BYTES = 64 * 1024
MAX_PATCH_BYTES = 4 * 1024 * 1024
MAX_EVENTS = 5_000


def tail(path: Path, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of a text file, cleaned ("" when it cannot be read)."""
    try:
        with open_file(path) as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - limit))
            data = handle.read(limit)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return clean(text if len(data) < limit else "…" + text.split("\n", 1)[-1])


def read_events(path: Path, limit: int = MAX_EVENTS) -> list[dict[str, Any]]:
    """The events of a record, cleaned; a torn last line is left for the next read."""
    found: list[dict[str, Any]] = []
    try:
        with open_file(path) as handle:
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    found.append(clean_value(event))  # type: ignore[arg-type]
    except OSError:
        return []
    return found[-limit:]


@dataclass(frozen=True)
class Exchange:
    """One turn of the transcript: what the agent said and the tool calls it made."""

    round: int
    text: str
    calls: list[dict[str, Any]] = field(default_factory=list)


def transcript(paths: RecordPaths, events: list[dict[str, Any]]) -> list[Exchange]:
    """The model's turns from transcript.jsonl, or the tool calls from the events."""
    turns: list[Exchange] = []
    for entry in read_events(paths.transcript):
        if entry.get("kind") != "response":
            continue
        calls = [
            {"name": c.get("name", ""), "args": c.get("arguments", ""), "result": ""}
            for c in entry.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        turns.append(Exchange(int(entry.get("round") or 0), str(entry.get("content") or ""), calls))
    if turns:
        return turns
    by_round: dict[int, Exchange] = {}
    for event in events:
        number = int(event.get("round") or 0)
        if event.get("kind") == "tool_call":
            args = json.dumps(event.get("args"), indent=2, ensure_ascii=False)
            by_round.setdefault(number, Exchange(number, "")).calls.append(
                {"name": event.get("name", ""), "args": args, "result": ""}
            )
        elif event.get("kind") == "tool_result" and number in by_round and by_round[number].calls:
            call = by_round[number].calls[-1]
            outcome = "ok" if event.get("ok") else f"error: {event.get('error')}"
            call["result"] = f"{outcome} — {event.get('summary', '')}"
    return [by_round[n] for n in sorted(by_round)]


@dataclass(frozen=True)
class TaskPage:
    paths: RecordPaths
    status: dict[str, Any]
    result: RunResult | None
    events: list[dict[str, Any]]
    rounds: list[dict[str, Any]]
    files: list[diff.FileDiff]
    cut: bool
    verifier_log: str
    response: str
    exchanges: list[Exchange]
    request: dict[str, Any]

    @property
    def title(self) -> str:
        spec = self.request.get("spec") or {}
        return clean(str(spec.get("title") or self.paths.task_id))

    @property
    def terminal(self) -> bool:
        return bool(self.status.get("terminal"))

    @property
    def events_offset(self) -> int:
        try:
            return self.paths.events.stat().st_size
        except OSError:
            return 0

    def side_by_side(self, file: diff.FileDiff) -> list[diff.Row]:
        return diff.side_by_side(file)


def locate_task(roots: Roots, root: int, rel: str) -> RecordPaths:
    """The record a task URL names; `OutsideRoots` for anything else."""
    folder, _, task_id = rel.rpartition("/")
    if not task_id or task_id in (".", "..") or len(task_id) > 200:
        raise OutsideRoots("not a task run")
    output_dir = roots.resolve(root, folder or ".")
    paths = RecordPaths(output_dir, task_id)
    if not paths.status.is_file() or roots.key_of(paths.status.resolve()) is None:
        raise OutsideRoots("no such task run")
    return paths


def _patch(paths: RecordPaths) -> str:
    try:
        with open_file(paths.patch) as handle:
            data = handle.read(MAX_PATCH_BYTES)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def _round_row(row: dict[str, Any]) -> dict[str, Any]:
    """A round as the page shows it: every field present (None when the record lacks it)."""
    whole = dict.fromkeys(RoundDetail.model_fields) | row
    return clean_value(whole)  # type: ignore[return-value]


def load_task(paths: RecordPaths) -> TaskPage:
    status: dict[str, Any] = clean_value(read_json(paths.status))  # type: ignore[assignment]
    result = task_result(paths) if status.get("terminal") else None
    events = read_events(paths.events)
    files, cut = diff.parse(_patch(paths))
    rows = (
        [r.model_dump(mode="json") for r in result.round_details]
        if result is not None
        else read_events(paths.rounds)
    )
    rounds = [_round_row(row) for row in rows]
    return TaskPage(
        paths=paths,
        status=status,
        result=result,
        events=events,
        rounds=rounds,
        files=files,
        cut=cut,
        verifier_log=tail(paths.verifier_log),
        response=tail(paths.response),
        exchanges=transcript(paths, events),
        request=read_json(paths.request),
    )


__all__ = ["Exchange", "TaskPage", "load_task", "locate_task", "read_events", "tail"]

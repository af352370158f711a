"""Repairing an apply whose process died: from its journal, back to a whole state.

The commit had landed -> finish it (the user's index entries for the committed paths).
Otherwise -> put every journaled path back. A path someone changed since (neither its prior
nor its target state) stops the repair: it is reported, never overwritten.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import code_runner.apply.journal as journal
from code_runner import workspace
from code_runner.apply.commit import commit_landed, update_index
from code_runner.apply.journal import Journal, Phase, apply_lock
from code_runner.errors import CodeRunnerError, RecordError
from code_runner.events import EventKind, EventSink
from code_runner.proc import kill_run_processes
from code_runner.record import RecordPaths, RunRecord, load_result, seal
from code_runner.repo import git


@dataclass(frozen=True)
class Repair:
    journal: str
    run_id: str
    source: str
    phase: str
    action: str  # "rolled back", "finished the commit", "closed", "needs you", "would repair"
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def repair(path: Path, *, sink: EventSink | None = None, dry_run: bool = False) -> Repair:
    """Bring a dead apply's source back to a whole state: the commit landed -> finish it,
    otherwise -> put every journaled path back. Paths someone changed since are left alone
    and reported."""
    j = Journal.load(path)
    base = {"journal": str(path), "run_id": j.run_id, "source": j.work_tree, "phase": str(j.phase)}
    if not j.is_open:
        return Repair(**base, action="closed")
    if dry_run:
        return Repair(**base, action="would repair")
    kill_run_processes(j.run_id)  # a DoD still running must not write while we restore
    others = journal.foreign(j)
    if others:
        note = "paths changed by someone else since: " + ", ".join(others)
        return Repair(**base, action="needs you", detail=note + f"; prior copies: {j.prior_dir}")
    source = git.Repo(Path(j.git_dir), Path(j.work_tree))
    source = git.Repo(source.git_dir, source.work_tree, git.filter_overrides(source))
    head = commit_landed(source, j.head_before, j.tree) if j.phase is Phase.COMMITTING else None
    if head is not None:
        update_index(source, head, tuple(e.path for e in j.entries))
        j.commit = head
        j.move_to(Phase.REPAIRED, f"repair: the commit {head} had landed; index updated")
        action = "finished the commit"
    else:
        kept = journal.restore(j)
        wrong = journal.differing(j, "before")
        if wrong:
            return Repair(**base, action="needs you", detail=f"could not restore: {wrong}")
        j.move_to(Phase.REPAIRED, "repair: rolled back from the journal")
        action = "rolled back" + (f" (kept non-empty dirs {kept})" if kept else "")
    journal.unregister(j.run_id)
    own = _record_of(j, sink)
    if sink is not None and sink is not own:
        sink.emit(EventKind.APPLY_REPAIRED, journal=str(path), action=action, phase=base["phase"])
    if own is not None:
        own.emit(EventKind.APPLY_REPAIRED, journal=str(path), action=action, phase=base["phase"])
        _note_repair_in_result(own, j, action)
    return Repair(**base, action=action)


def _record_of(j: Journal, sink: EventSink | None) -> RunRecord | None:
    """The record of the run whose apply is repaired: the caller's, when it is that one."""
    paths = RecordPaths(Path(j.record_dir) if j.record_dir else j.path.parent, j.task_id)
    if isinstance(sink, RunRecord) and sink.paths == paths:
        return sink
    try:
        return RunRecord.reopen(paths)
    except RecordError:
        return None  # no record to note it in (moved or deleted); the source is whole


def _note_repair_in_result(record: RunRecord, j: Journal, action: str) -> None:
    """Record the repair in the run's result (when the run wrote one)."""
    if not record.paths.result.exists():
        return
    try:
        seal.verify(record.paths, ["result.json"])  # never re-seal a result someone edited
        result = load_result(record.paths.result)
    except RecordError:
        return  # a damaged result is reported by whoever reads it; the source is whole
    rolled_back = action.startswith("rolled back")
    record.write_result(
        result.updated(
            source_rollback_applied=rolled_back or result.source_rollback_applied,
            source_commit=j.commit if not rolled_back else result.source_commit,
            source_apply_error=(result.source_apply_error or "the apply was interrupted")
            + f"; repaired from the journal: {action}",
        )
    )


def repair_stale(
    *,
    source_git_dir: str | None = None,
    sink: EventSink | None = None,
    dry_run: bool = False,
    locked: bool = False,
) -> list[Repair]:
    """Repair every registered apply whose process is gone (for one source, or all).

    `locked`: the caller already holds the apply lock of `source_git_dir`.
    """
    done: list[Repair] = []
    for pointer, data in journal.registered():
        if source_git_dir is not None and data.get("git_dir") != source_git_dir:
            continue
        if workspace.lease_is_live(data):
            continue
        path = Path(data["journal"])
        if not path.exists():
            if not dry_run:
                pointer.unlink(missing_ok=True)
            continue
        try:
            if locked or dry_run:
                done.append(repair(path, sink=sink, dry_run=dry_run))
            else:
                with apply_lock(Path(str(data.get("git_dir")))):
                    done.append(repair(path, sink=sink))
        except CodeRunnerError as exc:
            done.append(
                Repair(str(path), str(data.get("run_id")), "", "?", "needs you", exc.render())
            )
            continue
        if done[-1].action == "closed" and not dry_run:
            pointer.unlink(missing_ok=True)
    return done

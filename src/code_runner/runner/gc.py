"""`code-runner gc`: find what killed runs left behind, remove it, and say so.

A run that dies (SIGKILL, power loss) leaves its workspace in the state dir and its record
in a non-terminal state. The workspace lease names the owning pid and its start time, so a
live run is never touched; a dead one's workspace is removed and its record finished as
`abandoned`, with an event saying why."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import code_runner.runner.leases as run_leases
from code_runner import apply, dirs, files, workspace
from code_runner.errors import RecordError
from code_runner.proc import (
    kill_run_processes,
    leftover_groups,
    members,
    remove_group,
    stale_scratch,
)
from code_runner.record import RecordPaths, RunRecord
from code_runner.sandbox.cgroups import remove_leftovers
from code_runner.sandbox.idmap import remove_leftovers as detach_views


@dataclass(frozen=True)
class Removed:
    path: str
    run_id: str
    reason: str
    record_marked: str | None  # status.json that was marked abandoned
    killed_pids: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "run_id": self.run_id,
            "reason": self.reason,
            "record_marked": self.record_marked,
            "killed_pids": list(self.killed_pids),
        }


def _mark_abandoned(output_dir: Path, run_id: str, why: str) -> str | None:
    """Finish the record of `run_id` in `output_dir` as abandoned; its status path, or None
    when there is no such record or it is already final."""
    for status_path in sorted(output_dir.glob("*.status.json")):
        paths = RecordPaths(output_dir, status_path.name.removesuffix(".status.json"))
        try:
            record = RunRecord.reopen(paths)
        except RecordError:
            continue
        if record.run_id == run_id:
            return str(status_path) if record.mark_abandoned(why) else None
    return None


def collect(*, dry_run: bool = False, stale_after_s: float = 60.0) -> list[Removed]:
    removed: list[Removed] = []
    for left in workspace.find_leftovers(stale_after_s=stale_after_s):
        marked = None
        killed: tuple[int, ...] = ()
        if not dry_run:
            killed = kill_run_processes(left.run_id)
            workspace.remove_root(left.root)  # its mounts first, if it has any
            remove_leftovers(left.run_id)  # the run's sandbox cgroups, if it had any
            if left.output_dir:
                marked = _mark_abandoned(Path(left.output_dir), left.run_id, left.reason)
            run_leases.drop(left.run_id)
        removed.append(Removed(str(left.root), left.run_id, left.reason, marked, killed))
    removed += _collect_dead_runs(dry_run=dry_run, done={r.run_id for r in removed})
    if not dry_run:  # idle checkouts beyond the cache's bound, and half-made ones
        removed += [
            Removed(str(p), "", "an idle checkout beyond the cache's bound", None)
            for p in workspace.prune_checkouts()
        ]
    return removed + _collect_orphan_groups(dry_run=dry_run, done={r.run_id for r in removed})


def _collect_orphan_groups(*, dry_run: bool, done: set[str]) -> list[Removed]:
    """Remove run cgroups (`proc.tracking`) left empty: a run that ended with a shared leaf.

    Only empty ones: the hierarchy is the machine's, and a group with processes may belong
    to a live run of another state dir; a dead run of ours was emptied above, by its id.
    A live run of ours keeps its group, empty between its commands (its spare leaf)."""
    removed = [
        Removed(str(view), "", "an id-mapped view of a source a dead runner left", None)
        for view in detach_views(dry_run=dry_run)  # detached, never removed recursively
    ]
    for scratch in stale_scratch():  # a SIGKILLed runner's per-command output files
        if not dry_run:
            files.force_rmtree(scratch)
        removed.append(Removed(str(scratch), "", "scratch of a dead runner", None))
    live = _live_runs()  # a live run keeps an empty leaf between its commands
    for run_id, group in leftover_groups():
        if run_id in done or run_id in live or members(group):
            continue
        if not dry_run:
            remove_group(group)
        if dry_run or not group.exists():
            removed.append(Removed(str(group), run_id, "an empty run cgroup", None))
    return removed


def _live_runs() -> set[str]:
    """The ids of the runs of this state dir whose owner is alive."""
    return {
        str(lease.get("run_id") or path.stem)
        for path, lease in run_leases.registered()
        if lease and workspace.lease_is_live(lease)
    }


def _collect_dead_runs(*, dry_run: bool, done: set[str]) -> list[Removed]:
    """Runs whose process died where no workspace lease covers it: before the workspace
    existed (or had its lease), or after it was released but before the record was final."""
    removed: list[Removed] = []
    for path, lease in run_leases.registered():
        run_id = str(lease.get("run_id") or path.stem)
        if run_id in done or workspace.lease_is_live(lease):
            continue
        why = f"owner pid {lease.get('pid')} is gone"
        root = dirs.workspaces_dir() / run_id
        had_workspace = root.is_dir() and not root.is_symlink()
        marked = None
        killed: tuple[int, ...] = ()
        if not dry_run:
            killed = kill_run_processes(run_id)
            if had_workspace:
                workspace.remove_root(root)
            remove_leftovers(run_id)
            if lease.get("output_dir"):
                marked = _mark_abandoned(Path(str(lease["output_dir"])), run_id, why)
            path.unlink(missing_ok=True)
        if had_workspace or marked or killed:
            where = str(root) if had_workspace else str(path)
            removed.append(Removed(where, run_id, why, marked, killed))
    return removed


def repair_applies(*, dry_run: bool = False) -> list[apply.Repair]:
    """Applies whose process died half-way: their source paths go back from the journal
    (or a commit that had landed is finished). See `apply.repair`."""
    return apply.repair_stale(dry_run=dry_run)

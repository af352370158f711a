"""The whole apply step: prepare under the source's apply lock, transact, judge the result.

`apply_patch` never raises an expected failure: the `ApplyOutcome` says what happened, and
`ApplyOutcome.unexpected` lists every source change beyond the ones this step may make
(the patched paths; with a commit, HEAD, the branch and the index entries of those paths).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import code_runner.apply.fs as fs
import code_runner.apply.journal as journal
from code_runner import verify
from code_runner.apply.journal import apply_lock
from code_runner.apply.plan import ApplyRequest, Plan, prepare
from code_runner.apply.repair import repair_stale
from code_runner.apply.transaction import Transaction
from code_runner.errors import ApplyRefused, CodeRunnerError, Interrupted
from code_runner.events import EventKind, EventSink
from code_runner.repo import snapshot


@dataclass(frozen=True)
class ApplyOutcome:
    """What the apply step did; `result_fields()` is what result.json records."""

    applied: bool = False
    dod_passed: bool | None = None
    commit: str | None = None
    rolled_back: bool = False
    error: str | None = None
    refused: bool = False
    interrupted: bool = False
    plan: Plan | None = None
    verdict: verify.Verdict | None = None
    byproducts: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    pre: snapshot.SourceSnapshot | None = None
    post: snapshot.SourceSnapshot | None = None

    @property
    def ok(self) -> bool:
        return (
            self.applied
            and self.dod_passed is True
            and not self.rolled_back
            and self.error is None
            and not self.unexpected
        )

    def result_fields(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "source_patch_applied": self.applied,
            "source_dod_passed": self.dod_passed,
            "source_commit": self.commit,
            "source_rollback_applied": self.rolled_back,
            "source_apply_error": self.error,
            "source_apply": {
                "refused": self.refused,
                "interrupted": self.interrupted,
                "head_before": plan.head if plan else (self.pre.head if self.pre else None),
                "head_moved_since_base": plan.head_moved if plan else None,
                "changes": [c.to_dict() for c in plan.changes] if plan else [],
                "source_dod": self.verdict.to_dict() if self.verdict else None,
                "byproducts_moved": list(self.byproducts),
                "unexpected_changes": list(self.unexpected),
            },
        }


def apply_patch(req: ApplyRequest, sink: EventSink) -> ApplyOutcome:
    """Land `req.patch` in the source, verify it there, commit or roll back. Never raises an
    expected failure: the outcome says what happened (a signal is reported as interrupted)."""
    source = req.source
    sink.emit(EventKind.APPLY_STARTED, source=str(source.work_tree), commit=req.commit)
    try:
        with apply_lock(source.git_dir):
            repair_stale(source_git_dir=str(source.git_dir), sink=sink, locked=True)
            pre = snapshot.take(source)
            try:
                plan = prepare(req, pre)
            except (ApplyRefused, fs.UnsafePath) as exc:
                sink.emit(EventKind.APPLY_REFUSED, message=exc.message)
                return ApplyOutcome(refused=True, error=exc.render(), pre=pre, post=pre)
            return _transact(req, plan, pre, sink)
    except Interrupted as exc:  # before the journal: nothing was changed
        return ApplyOutcome(refused=True, interrupted=True, error=exc.render())
    except CodeRunnerError as exc:  # the lock, a git failure before the journal
        sink.emit(EventKind.APPLY_REFUSED, message=exc.message)
        return ApplyOutcome(refused=True, error=exc.render())


def _transact(  # noqa: C901 - the transaction's outcomes and failures in one place
    req: ApplyRequest, plan: Plan, pre: snapshot.SourceSnapshot, sink: EventSink
) -> ApplyOutcome:
    tx = Transaction(req, plan, sink)
    verdict: verify.Verdict | None = None
    error: str | None = None
    interrupted = False
    try:
        with tx:
            tx.write()
            verdict = tx.verify(pre)
            changed = tx.paths_changed_by_dod()
            outside = _unexpected(pre, snapshot.take(req.source), tx)  # before any commit
            if not verdict.passed or changed or outside:
                if not verdict.passed:
                    error = f"the DoD failed in the source: {verdict.reason}"
                elif changed:
                    error = f"the DoD in the source rewrote patched paths: {', '.join(changed)}"
                else:
                    error = "the DoD changed the source outside the patch: " + "; ".join(outside)
                if req.rollback:
                    tx.rollback(error)
                else:
                    tx.leave_applied()
            elif req.commit:
                tx.commit_now()
            else:
                tx.finish()
    except (Interrupted, KeyboardInterrupt) as exc:
        interrupted, error = True, f"interrupted ({exc or 'SIGINT'})"
    except CodeRunnerError as exc:
        error = exc.render()
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
    if tx.rollback_error:
        error = (error or "") + f"; the rollback failed: {tx.rollback_error}"
    if tx.entered and tx.journal.is_open:
        error = (error or "") + (
            f"; the source may be half-applied: run `code-runner gc` to repair it from "
            f"{tx.journal.path}"
        )
    post = snapshot.take(req.source)
    unexpected = _unexpected(pre, post, tx)
    outcome = ApplyOutcome(
        applied=tx.applied,
        dod_passed=verdict.passed if verdict is not None else None,
        commit=tx.commit,
        rolled_back=tx.rolled_back,
        error=error,
        interrupted=interrupted,
        plan=plan,
        verdict=verdict,
        byproducts=tuple(tx.byproducts),
        unexpected=tuple(unexpected),
        pre=pre,
        post=post,
    )
    sink.emit(
        EventKind.APPLY_FINISHED,
        applied=outcome.applied,
        dod_passed=outcome.dod_passed,
        commit=outcome.commit,
        rolled_back=outcome.rolled_back,
        error=outcome.error,
        unexpected=list(unexpected),
    )
    return outcome


def _without(snap: snapshot.SourceSnapshot, paths: set[str]) -> snapshot.SourceSnapshot:
    return dataclasses.replace(
        snap,
        status=tuple(line for line in snap.status if line[3:] not in paths),
        untracked={p: v for p, v in snap.untracked.items() if p not in paths},
        tracked_dirty={p: v for p, v in snap.tracked_dirty.items() if p not in paths},
    )


def _unexpected(
    pre: snapshot.SourceSnapshot, post: snapshot.SourceSnapshot, tx: Transaction
) -> list[str]:
    """What changed in the source beyond what this apply may change. Empty is the goal."""
    pre = snapshot.expect_apply(pre, post, committed=tx.commit is not None)
    if not tx.applied or tx.rolled_back:
        found = snapshot.differences(pre, post)
        wrong = journal.differing(tx.journal, "before") if tx.entered else []
        return found + [f"{p} was not restored to its prior bytes" for p in wrong]
    paths = set(tx.plan.paths)
    expected = _without(pre, paths)
    if tx.commit is not None:
        refs = dict(pre.refs)
        if tx.plan.branch:
            refs[tx.plan.branch] = tx.commit
        expected = dataclasses.replace(
            expected,
            head=tx.commit,
            head_ref=pre.head_ref if tx.plan.branch else tx.commit,
            refs=refs,
            git_files={**pre.git_files, "index": post.git_files.get("index", "")},
        )
    found = snapshot.differences(expected, _without(post, paths))
    if tx.commit is not None and post.status != pre.status:
        gained = sorted(set(post.status) - set(pre.status))
        lost = sorted(set(pre.status) - set(post.status))
        found.append(f"git status after the commit differs: gained {gained}, lost {lost}")
    return found

"""A finished run's record, checked, and the two decisions a person makes on it.

`code-runner apply` and `code-runner reject` start here. Both refuse a record that is not
whole (no terminal status, no result, no request, no patch) or whose patch does not match the
digest in result.json: a decision is only as good as the evidence it rests on. An apply
appends its events to the run's events.jsonl and its outcome to result.json; a reject marks
result.json, and neither touches anything else in the record.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from code_runner import apply, dirs, fsx, gitx, policy, runner, snapshot, verify
from code_runner import workspace as workspace_mod
from code_runner.apply import journal
from code_runner.errors import ApplyRefused, RecordError, UsageError
from code_runner.events import EventKind, EventSink
from code_runner.record import TERMINAL_STATES, RecordPaths, RunState, utc_now
from code_runner.spec import DefinitionOfDone

_RESULT_KEYS = ("run_id", "task_id", "status", "dod_passed", "base", "patch_sha256")


@dataclass(frozen=True)
class FinishedRun:
    """A run record that passed every check; what apply and reject act on."""

    paths: RecordPaths
    result: dict[str, Any]
    run_id: str
    task_id: str
    title: str
    base: str
    cwd: Path
    allowlist: policy.Allowlist
    dod: DefinitionOfDone
    rollback: bool
    patch: bytes

    @property
    def decision(self) -> str | None:
        value = self.result.get("decision")
        return value if isinstance(value, str) else None

    @property
    def applied_in_source(self) -> bool:
        """The patch is in the source now (applied and not rolled back)."""
        return bool(self.result.get("source_patch_applied")) and not self.result.get(
            "source_rollback_applied"
        )


class RecordEvents:
    """Appends events to a finished run's events.jsonl, continuing its sequence numbers."""

    def __init__(self, paths: RecordPaths, run_id: str) -> None:
        self.paths = paths
        self.run_id = run_id
        seqs = [e.get("seq") for e in fsx.read_jsonl(paths.events) if isinstance(e, dict)]
        self._seq = max((s for s in seqs if isinstance(s, int)), default=0)

    def emit(self, kind: EventKind, /, **data: object) -> None:
        self._seq += 1
        event = {"seq": self._seq, "ts": utc_now(), "run_id": self.run_id, "kind": kind.value}
        fsx.append_jsonl(self.paths.events, {**event, **data})


def _incomplete(path: Path, what: str) -> RecordError:
    return RecordError(
        f"the run record {path} is incomplete: {what}.",
        fix="apply or reject only a finished run's output_dir; re-run the task if its record "
        "was damaged.",
    )


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise _incomplete(path.parent, f"{path.name} is missing") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _incomplete(path.parent, f"{path.name} is not readable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise _incomplete(path.parent, f"{path.name} does not hold a JSON object")
    return data


def _result_path(target: Path) -> Path:
    if target.is_file() and target.name.endswith(".result.json"):
        return target
    if not target.is_dir():
        raise UsageError(
            f"{target} is not a run's output dir.",
            fix="pass the output_dir of a finished run (or its *.result.json).",
        )
    found = sorted(target.glob("*.result.json"))
    if not found:
        status = sorted(target.glob("*.status.json"))
        if status:
            raise _incomplete(target, "it has no result.json (is the run still going?)")
        raise UsageError(
            f"{target} holds no run record.", fix="pass the output_dir of a finished run."
        )
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise UsageError(
            f"{target} holds the records of several tasks ({names}).",
            fix="pass the *.result.json of the one you mean.",
        )
    return found[0]


def load(target: Path) -> FinishedRun:
    """Load and check a finished run's record; raise `RecordError` on any gap or mismatch."""
    result_path = _result_path(target)
    result = _json(result_path)
    missing = [k for k in _RESULT_KEYS if not result.get(k) and result.get(k) is not False]
    if missing:
        raise _incomplete(result_path.parent, f"result.json has no {', '.join(missing)}")
    paths = RecordPaths(result_path.parent, str(result["task_id"]))
    if paths.result != result_path:
        raise _incomplete(paths.output_dir, "result.json is named for another task")
    status = _json(paths.status)
    try:
        terminal = RunState(str(status.get("state"))) in TERMINAL_STATES
    except ValueError:
        terminal = False
    if not terminal or status.get("run_id") != result["run_id"]:
        raise _incomplete(paths.output_dir, "status.json is not the finished state of this run")
    request = _json(paths.request)
    spec = request.get("spec")
    if request.get("run_id") != result["run_id"] or not isinstance(spec, dict):
        raise _incomplete(paths.output_dir, "request.json is not this run's request")
    try:
        patch = paths.patch.read_bytes()
    except OSError as exc:
        raise _incomplete(paths.output_dir, f"the patch file cannot be read ({exc})") from exc
    digest = hashlib.sha256(patch).hexdigest()
    if digest != result["patch_sha256"]:
        raise RecordError(
            f"the patch file {paths.patch} does not match the digest recorded in result.json "
            f"(recorded {str(result['patch_sha256'])[:16]}…, file {digest[:16]}…): it was "
            "changed after the run.",
            fix="re-run the task to get a patch the runner verified; never apply an edited one.",
        )
    try:
        dod = DefinitionOfDone.model_validate(spec.get("definition_of_done"))
        allowlist = policy.Allowlist.parse(list(spec.get("allowlist") or []))
        cwd = Path(str(spec["cwd"]))
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise _incomplete(paths.output_dir, f"the request's spec is not usable ({exc})") from exc
    return FinishedRun(
        paths=paths,
        result=result,
        run_id=str(result["run_id"]),
        task_id=str(result["task_id"]),
        title=str(spec.get("title") or result.get("title") or result["task_id"]),
        base=str(result["base"]),
        cwd=cwd,
        allowlist=allowlist,
        dod=dod,
        rollback=spec.get("rollback_on_failure") is not False,
        patch=patch,
    )


def _must_be_appliable(run: FinishedRun) -> None:
    if run.decision == "rejected":
        raise UsageError(
            f"run {run.run_id} was rejected; a rejected run is never applied.",
            fix="re-run the task if you want its change after all.",
        )
    if run.applied_in_source:
        commit = run.result.get("source_commit")
        raise UsageError(
            f"run {run.run_id} is already applied to the source"
            + (f" (commit {commit})." if commit else " (left in the working tree)."),
            fix="nothing to do; `git revert` or `git restore` it in the source to undo.",
        )
    if not run.patch.strip():
        raise UsageError(
            f"run {run.run_id} has an empty patch: there is nothing to apply.",
            fix="nothing to do; the run made no allowlisted change.",
        )
    if run.result.get("dod_passed") is not True:
        raise UsageError(
            f"run {run.run_id} did not pass its DoD (status {run.result.get('status')}); only "
            "a verified patch is applied.",
            fix="re-run the task until it passes.",
        )
    if run.result.get("source_unchanged") is False:
        raise UsageError(
            f"run {run.run_id} changed the source while it worked (a safety failure); its "
            "patch is not trusted.",
            fix="inspect the source and the run's events.jsonl, then re-run the task.",
        )


@contextlib.contextmanager
def dod_env(run: FinishedRun) -> Iterator[dict[str, str]]:
    """The same DoD environment a run gives (private HOME and TMPDIR), for the source DoD."""
    root = dirs.state_dir() / "apply-env" / f"{run.run_id}-{secrets.token_hex(3)}"
    ws = workspace_mod.Workspace(run.run_id, root, run.cwd, run.base)
    ws.home_dir.mkdir(parents=True)
    ws.tmp_dir.mkdir()
    try:
        yield runner.command_env(ws)
    finally:
        workspace_mod.force_rmtree(root)


def request(run: FinishedRun, **options: Any) -> apply.ApplyRequest:
    source = gitx.open_source(run.cwd)
    return apply.ApplyRequest(
        source=source,
        run_id=run.run_id,
        task_id=run.task_id,
        title=run.title,
        base=run.base,
        patch=run.patch,
        allowlist=run.allowlist,
        dod=run.dod,
        env=options.pop("env", {}),
        record=run.paths,
        rollback=run.rollback,
        **options,
    )


def open_journal(run: FinishedRun) -> journal.Journal | None:
    path = run.paths.apply_journal
    if not path.exists():
        return None
    found = journal.Journal.load(path)
    return found if found.is_open else None


def plan(run: FinishedRun, *, commit: bool, author: apply.Identity | None) -> apply.Plan:
    """What `apply` would do, checked against the source now. Changes nothing."""
    _must_be_appliable(run)
    if open_journal(run) is not None:
        raise ApplyRefused(
            f"an earlier apply of run {run.run_id} was interrupted and left a journal "
            f"({run.paths.apply_journal}).",
            fix=f"run `code-runner apply {run.paths.output_dir}` (or `code-runner gc`) to "
            "repair it first.",
        )
    req = request(run, commit=commit, author=author)
    with apply.apply_lock(req.source.git_dir):
        return apply.prepare(req, snapshot.take(req.source))


def check_dod(run: FinishedRun, plan_: apply.Plan) -> verify.Verdict:
    """Run the DoD on HEAD + patch in a disposable checkout: would it pass? (`--check`)."""
    source = gitx.open_source(run.cwd)
    ws = workspace_mod.create(
        source, plan_.head, run_id=f"{run.run_id[:60]}-check-{secrets.token_hex(3)}"
    )
    try:
        ws.repo.run("apply", "--binary", "--index", "-", input_bytes=run.patch)
        return verify.run_dod(run.dod, cwd=ws.work_tree, env=runner.command_env(ws))
    finally:
        workspace_mod.release(ws)


def repair_first(run: FinishedRun, sink: EventSink) -> apply.Repair | None:
    """An earlier apply of this run that died half-way: repair it before anything else."""
    found = open_journal(run)
    if found is None:
        return None
    if found.owner_alive():
        raise ApplyRefused(
            f"another apply of run {run.run_id} is running (pid {found.pid}).",
            fix="wait for it to finish.",
        )
    with apply.apply_lock(Path(found.git_dir)):
        return apply.repair(run.paths.apply_journal, sink=sink)


def apply_run(
    run: FinishedRun,
    *,
    commit: bool,
    author: apply.Identity | None,
    run_hooks: bool,
    sink: EventSink,
) -> apply.ApplyOutcome:
    """Land a finished run's patch in the source; record the outcome in result.json."""
    _must_be_appliable(run)
    with dod_env(run) as env:
        outcome = apply.apply_patch(
            request(run, commit=commit, author=author, run_hooks=run_hooks, env=env), sink
        )
    result = {**run.result, **outcome.result_fields(), "apply_to_source": True}
    result["applied_by"] = "code-runner apply"
    result["applied_at"] = utc_now()
    if outcome.ok:
        result["decision"] = "applied"
    fsx.atomic_write_json(run.paths.result, result)
    return outcome


def reject(run: FinishedRun, reason: str | None, sink: EventSink) -> bool:
    """Mark the run rejected. False when it already was."""
    if run.decision == "rejected":
        return False
    if open_journal(run) is not None:
        raise ApplyRefused(
            f"an apply of run {run.run_id} was interrupted and its source may be half-applied.",
            fix="run `code-runner gc` to repair the source first, then reject.",
        )
    if run.applied_in_source:
        raise UsageError(
            f"run {run.run_id} is already applied to the source; rejecting it now would not "
            "take it out.",
            fix="undo it in the source (`git revert` the commit or `git restore` the paths).",
        )
    result = {
        **run.result,
        "decision": "rejected",
        "decided_at": utc_now(),
        "decision_reason": reason,
    }
    fsx.atomic_write_json(run.paths.result, result)
    sink.emit(EventKind.RUN_REJECTED, reason=reason)
    return True


__all__ = [
    "FinishedRun",
    "RecordEvents",
    "apply_run",
    "check_dod",
    "dod_env",
    "load",
    "plan",
    "reject",
    "repair_first",
    "request",
]

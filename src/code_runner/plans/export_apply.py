"""`plan export --apply [--commit]`: the plan's commits landed in the source through the
existing apply transaction (journal, atomic writes, the DoD in the source, rollback, repair).

With `--commit`, each item goes in turn: its own patch onto the source's HEAD, its own
commands as the DoD, and a commit carrying the item's runner message (title and trailers) by
the source's git identity (else `--author`, else code-runner's); the first refusal or
failure stops the export, and that item's journal rolls it back (the
items before it stay committed). Without `--commit`, the combined diff of the chain is one
transaction whose DoD is every item's commands in order, left in the work tree.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_runner import dirs, files
from code_runner.apply import (
    ApplyOutcome,
    ApplyRequest,
    GitIdentity,
    apply_patch,
    decide_dod_sandbox,
    private_patch,
)
from code_runner.apply.journal import Journal, Phase
from code_runner.errors import CodeRunnerError
from code_runner.events import EventKind
from code_runner.plans.export import Link, changed_paths, patch_between
from code_runner.plans.item import dod_argv, item_argvs
from code_runner.plans.lock import crash_point
from code_runner.plans.model import Plan
from code_runner.plans.runner_repo import RunnerRepo, item_identity
from code_runner.record import RecordPaths
from code_runner.repo import git
from code_runner.sandbox import SandboxMode
from code_runner.task import DefinitionOfDone
from code_runner.task.env import DodEnv
from code_runner.task.paths import Allowlist
from code_runner.workspace.env import command_env
from code_runner.workspace.python_env import from_section

DOD_TIMEOUT_S = 3600.0
PATCH_PIECE_BYTES = 1 << 20


class JsonlSink:
    """The apply step's events, one JSON line each, beside the step's journal."""

    def __init__(self, path: Path, step: str = "") -> None:
        self.path = path
        self.step = step

    def emit(self, kind: EventKind, /, **data: object) -> None:
        files.append_jsonl(self.path, {"kind": str(kind), **data})
        crash_point(self.step, f"export-{kind}")


def step_paths(record_dir: Path, step: str) -> RecordPaths:
    """The record of one apply step of an export (its journal is in the state dir)."""
    return RecordPaths(record_dir / step, step)


def landed_steps(record_dir: Path, steps: Sequence[str]) -> list[dict[str, Any]]:
    """The steps whose apply finished (committed, when asked), read from their journals:
    after a crash, what the source holds of the export. Stops at the first that did not."""
    landed: list[dict[str, Any]] = []
    for step in steps:
        try:
            journal = Journal.load(step_paths(record_dir, step).apply_journal)
        except (CodeRunnerError, OSError, ValueError, KeyError):
            break
        committed = journal.phase is Phase.REPAIRED and journal.commit is not None
        if journal.phase is not Phase.FINISHED and not committed:
            break
        landed.append({"step": step, "commit": journal.commit})
    return landed


@dataclass(frozen=True)
class Step:
    """One apply: what it lands, under which name, with which DoD and commit message."""

    name: str  # P3, or P1-P3 for the combined diff
    parent: str
    sha: str
    argvs: tuple[tuple[str, ...], ...]
    message: str | None  # the runner commit's message, for --commit


@dataclass(frozen=True)
class StepResult:
    step: str
    ok: bool
    commit: str | None
    rolled_back: bool
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def steps(
    runner: RunnerRepo,
    revisions: dict[int, Plan],
    links: Sequence[Link],
    commit: bool,
    skip: Sequence[str] = (),
) -> list[Step]:
    def argvs(link: Link) -> list[tuple[str, ...]]:
        return [tuple(a) for a in item_argvs(revisions[link.revision].item(link.item))]

    if commit:
        return [
            Step(
                link.item,
                link.parent,
                link.sha,
                tuple(argvs(link)),
                runner.repo.out("log", "-1", "--format=%B", link.sha) + "\n",
            )
            for link in links
            if link.item not in skip
        ]
    every = [argv for link in links for argv in argvs(link)]
    name = links[0].item if len(links) == 1 else f"{links[0].item}-{links[-1].item}"
    return [Step(name, links[0].parent, links[-1].sha, tuple(dict.fromkeys(every)), None)]


@contextlib.contextmanager
def _dod_env(run_id: str, source_dir: Path) -> Iterator[dict[str, str]]:
    """A private HOME and TMPDIR and the project's environment, as a run's DoD gets."""
    root = dirs.state_dir() / "apply-env" / f"{run_id[:80]}-{secrets.token_hex(3)}"
    home_dir, tmp_dir = root / "home", root / "tmp"
    home_dir.mkdir(parents=True)
    tmp_dir.mkdir()
    try:
        env = command_env(run_id=run_id, home_dir=home_dir, tmp_dir=tmp_dir)
        yield from_section(source_dir, DodEnv()).overlay(env)
    finally:
        files.force_rmtree(root)


@contextlib.contextmanager
def _step_patch(runner: RunnerRepo, step: Step, run_id: str) -> Iterator[Path]:
    """The step's diff as the apply's private patch: git writes it into an unnamed file,
    which is copied into place in pieces, so no patch is ever held in memory."""
    scratch = dirs.state_dir()
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=scratch) as diff:
        patch_between(runner.repo, step.parent, step.sha, diff)
        diff.seek(0)
        pieces = iter(functools.partial(diff.read, PATCH_PIECE_BYTES), b"")
        with private_patch(pieces, sha256=None, name=run_id) as path:
            yield path


def apply_steps(
    runner: RunnerRepo,
    source: git.Repo,
    todo: Sequence[Step],
    *,
    record_dir: Path,
    run_prefix: str,
    commit: bool,
    author: GitIdentity | None = None,
) -> list[StepResult]:
    """Each step through the apply transaction, in order, until one does not land."""
    assert source.work_tree is not None
    walls = decide_dod_sandbox(SandboxMode.AUTO)
    done: list[StepResult] = []
    for step in todo:
        run_id = f"{run_prefix}-{step.name}"
        dod = DefinitionOfDone.model_validate(
            {
                "argv": dod_argv(step.argvs),
                "assertion": "exit_code == 0",
                "timeout_s": DOD_TIMEOUT_S,
            }
        )
        paths = step_paths(record_dir, step.name)
        paths.output_dir.mkdir(parents=True, exist_ok=True)
        with (
            _dod_env(run_id, source.work_tree) as env,
            _step_patch(runner, step, run_id) as patch_path,
        ):
            outcome = apply_patch(
                ApplyRequest(
                    source=source,
                    run_id=run_id,
                    task_id=step.name,
                    title=(step.message or step.name).splitlines()[0],
                    base=step.parent,
                    patch=patch_path,
                    allowlist=Allowlist(tuple(changed_paths(runner.repo, step.parent, step.sha))),
                    dod=dod,
                    env=env,
                    record=paths,
                    commit=commit,
                    author=author or item_identity(source),
                    message=step.message,
                    sandbox=walls,
                ),
                JsonlSink(paths.output_dir / "apply.events.jsonl", step.name),
            )
        done.append(_result(step, outcome))
        if not done[-1].ok:
            break
    return done


def _result(step: Step, outcome: ApplyOutcome) -> StepResult:
    return StepResult(
        step=step.name,
        ok=outcome.ok,
        commit=outcome.commit,
        rolled_back=outcome.rolled_back,
        error=outcome.error,
    )

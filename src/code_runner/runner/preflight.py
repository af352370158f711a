"""Everything that can be checked before a run creates anything: the source is a git repo,
the base commit exists, the backend can be built and reached, the run dir can be written;
and `project_env`, the DoD's environment, which the run and `dry-run` both take from here."""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from code_runner import agents, apply, workspace
from code_runner.agents.base import Agent
from code_runner.errors import PreflightError
from code_runner.repo import git
from code_runner.sandbox import READ_ONLY_FIX, Decision, decide
from code_runner.task import TaskSpec
from code_runner.task.env import DodEnv


class DodCannotStart(PreflightError):
    """The DoD could not start at base: its command, interpreter or the project's own
    package is missing. A preflight error (exit 3): no agent round can fix it."""


@dataclass(frozen=True)
class Preflight:
    """What preflight established; nothing has been created yet."""

    spec: TaskSpec
    source: git.Repo
    base: str
    agent: Agent
    warnings: tuple[str, ...] = ()
    sandbox: Decision | None = None  # None: no sandbox was considered (as with `off`)


def preflight(spec: TaskSpec, *, base_dir: Path) -> Preflight:
    """Every check that can fail before anything is created."""
    source = git.open_source(spec.cwd)
    assert source.work_tree is not None
    if spec.commit_on_success and apply.commit_identity(source, None) is None:
        raise PreflightError(
            f"commit_on_success is set but the source repo {source.work_tree} has no git "
            "identity (user.name and user.email), so the runner could not commit.",
            fix="set them (`git -C SOURCE config user.name ...; ... user.email ...`), or set "
            "commit_on_success to false and commit with `code-runner apply --commit --author`.",
        )
    base_ref = spec.base or "HEAD"
    result = source.run("rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}", check=False)
    if not result.ok:
        what = "has no commits yet" if spec.base is None else f"has no commit {spec.base!r}"
        raise PreflightError(
            f"the source repo {source.work_tree} {what}.",
            fix="commit at least once, or set `base` to an existing commit.",
        )
    base = result.stdout.decode().strip()
    agent = agents.make_agent(spec.backend, base_dir=base_dir, source_dir=source.work_tree)
    if spec.skills and getattr(agent, "loads_skills", False) is not True:
        raise PreflightError(
            f"the task names skills, and backend {spec.backend.split(':', 1)[0]!r} cannot "
            "load them (skills are installed for the codex-cli and claude-cli backends).",
            fix="use a codex-cli or claude-cli backend, or remove `skills` from the spec.",
        )
    skills_problem = getattr(agent, "skills_problem", None)
    if spec.skills and callable(skills_problem) and (problem := skills_problem()):
        # the CLI's tools must not be able to change a skill: unguarded, no run
        raise PreflightError(
            f"the task names skills, and {problem}.",
            fix=f"{READ_ONLY_FIX}; or use Codex's workspace-write sandbox; or remove `skills`.",
        )
    warnings: list[str] = []
    if shutil.which("rg") is None:
        warnings.append("ripgrep (rg) is not installed: the search_code tool will fail")
    output = spec.output_dir
    probe = output
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise PreflightError(
            f"output_dir {output} cannot be created: {probe} is not writable.",
            fix="choose an output_dir you can write to.",
        )
    decision = decide(spec.sandbox, limits=spec.limits)  # `required` may stop here
    if not decision.use and decision.probe is not None:
        warnings.append(f"no OS sandbox: {decision.reason}")
    warnings += [f"limit not enforced: {gap}" for gap in decision.unenforced]
    return Preflight(
        spec=spec,
        source=source,
        base=base,
        agent=agent,
        warnings=tuple(warnings),
        sandbox=decision,
    )


def project_env(source_dir: Path, section: DodEnv) -> workspace.ProjectEnv:
    """The environment the spec's `env` section gives the DoD; an interpreter it names that
    does not exist is a `DodCannotStart`, in a run and in `dry-run` alike."""
    found = workspace.from_section(source_dir, section)
    if found.python is not None and not os.path.exists(found.python):
        raise DodCannotStart(
            f"the interpreter {found.python} (env.python) does not exist",
            fix="create that environment, or set env.python to an interpreter that exists "
            "(or to 'auto').",
        )
    return found


def new_run_id(task_id: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{task_id[:48]}-{stamp}-{secrets.token_hex(3)}"

"""What keeps an agent CLI's own tools from changing a named skill, before they run.

Codex's OS sandbox (`workspace-write` or `read-only`) leaves only the work tree and the
run's TMPDIR writable: its CODEX_HOME skills and each skill's own folder are out of reach.
Claude Code has no OS sandbox (its Bash runs as the runner, root included), so it runs
where the installed skills and each skill's folder are read-only mounts
(`sandbox.read_only_argv`). A CLI for which neither holds (Codex with
`danger-full-access`) cannot be given skills: preflight refuses the run. A skill's copy in
the work tree is the audit's, like any other path: dropped unless the allowlist names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from code_runner import sandbox
from code_runner.errors import PreflightError
from code_runner.task.skills import Skill


class SkillsGuard(StrEnum):
    """How a CLI's tools are kept from the skills: the CLI's own sandbox, our mount, none."""

    CLI_SANDBOX = "cli_sandbox"
    READ_ONLY_MOUNT = "read_only_mount"
    NONE = "none"


def problem(guard: SkillsGuard, backend: str) -> str | None:
    """Why skills cannot be given to this CLI here (None: they can)."""
    if guard is SkillsGuard.CLI_SANDBOX:
        return None
    if guard is SkillsGuard.NONE:
        return (
            f"backend {backend} runs without an OS sandbox of its own (sandbox="
            "danger-full-access), so nothing would keep its tools from changing a skill"
        )
    found = sandbox.read_only_view().problem
    return None if found is None else f"they cannot be mounted read-only here: {found}"


def read_only(
    argv: Sequence[str], skills_dir: Path, named: Sequence[Skill]
) -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """`argv` run where the installed skills and each skill's own folder are read-only,
    and those paths."""
    view = sandbox.read_only_view()
    if view.bwrap is None:
        raise PreflightError(
            f"the named skills cannot be mounted read-only for the agent CLI: {view.problem}.",
            fix=sandbox.READ_ONLY_FIX,
        )
    folders = [s.folder for s in named if s.folder.is_dir() and not s.folder.is_symlink()]
    paths = tuple(dict.fromkeys([skills_dir, *folders]))
    return tuple(sandbox.read_only_argv(view.bwrap, argv, paths)), paths


__all__ = ["SkillsGuard", "problem", "read_only"]

"""OS sandbox (bubblewrap) for agent commands and the DoD, with a capability probe.

    decision = decide(spec.sandbox)          # preflight: auto | required | off
    with open_session(ws, ...) as session:    # hands the work tree over, makes cgroups
        Toolbox(..., launch=session.run)      # every agent command and search
        verify.run_dod(..., launch=session.run)

`Session.run` starts one sandbox for the session on its first command and feeds it every
command after (`resident`); `Session.wrap` is the argv of a sandbox for one command, and
`wrap(argv, workspace=..., network=..., extra_ro_binds=...)` builds one outside a session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from code_runner import tuning
from code_runner.sandbox.cgroups import CgroupSupport, detect
from code_runner.sandbox.limits import DEFAULT_LIMITS, ResourceLimits
from code_runner.sandbox.probe import Decision, Probe, decide, probe, run_probe
from code_runner.sandbox.profile import Bind, Profile, Programs, SandboxUser
from code_runner.sandbox.readonly import READ_ONLY_FIX, ReadOnlyView, read_only_argv, read_only_view
from code_runner.sandbox.resident import RESIDENT_ENV
from code_runner.sandbox.session import (
    SandboxMode,
    SandboxWorkspace,
    Session,
    hand_over,
    new_identity,
)
from code_runner.sandbox.source import SourceTree, repo_owner, source_session


def open_session(
    workspace: SandboxWorkspace,
    *,
    env: Mapping[str, str],
    network: bool,
    limits: ResourceLimits,
    cpu_s: int,
    name: str,
    keep_vars: Sequence[str] = (),
    identity: SandboxUser | None = None,
    resident: bool = True,
) -> Session:
    """A session for a run, using what the (cached) probe found to work here; `keep_vars`
    are variables beyond the allowlist that commands get (the ones a task spec sets);
    `identity`, the uid a root runner's commands run as when it was chosen before (for the
    workspace's checkout), else a fresh one. `resident`: `Session.run` feeds commands to
    one sandbox started for the session, unless `CODE_RUNNER_SANDBOX_RESIDENT=off`."""
    found = probe()
    if not found.ok or found.programs is None:
        raise RuntimeError("open_session needs a passing probe; call decide() first")
    return Session(
        workspace,
        programs=found.programs,
        env=env,
        network=network,
        limits=limits,
        cpu_s=cpu_s,
        cgroups=found.cgroups if found.cgroups_usable else None,
        name=name,
        keep_vars=keep_vars,
        identity=identity,
        resident=resident and tuning.sandbox_resident(),
    )


def open_source_session(
    work_tree: Path,
    git_dir: Path,
    *,
    env: Mapping[str, str],
    limits: ResourceLimits = DEFAULT_LIMITS,
    cpu_s: int = 3600,
    name: str,
    frozen: Sequence[Path] = (),
) -> Session:
    """A session for a DoD in the user's repo (the apply step): bound read-write at its own
    path, its git dir read-only, no file changing owner. Needs a passing probe."""
    found = probe()
    if not found.ok or found.programs is None:
        raise RuntimeError("open_source_session needs a passing probe; call decide() first")
    return source_session(
        work_tree,
        git_dir,
        programs=found.programs,
        env=env,
        limits=limits,
        cpu_s=cpu_s,
        cgroups=found.cgroups if found.cgroups_usable else None,
        name=name,
        frozen=frozen,
    )


def wrap(
    argv: Sequence[str],
    *,
    workspace: SandboxWorkspace,
    network: bool,
    extra_ro_binds: Sequence[Bind] = (),
    env: Mapping[str, str] | None = None,
    limits: ResourceLimits = DEFAULT_LIMITS,
    cpu_s: int = 3600,
) -> list[str]:
    """`argv` wrapped in the profile, for a one-off command outside a run (no cgroups).

    A root runner's command runs as a fresh uid, so the work tree is handed to it first.
    """
    found = probe()
    if found.programs is None:
        raise RuntimeError(f"the sandbox is not available: {found.reason}")
    session = Session(
        workspace,
        programs=found.programs,
        env=env or {},
        network=network,
        limits=limits,
        cpu_s=cpu_s,
        cgroups=None,
        name="oneoff",
    )
    session.hand_over()
    profile = session.profile()
    extra = tuple(extra_ro_binds)
    if extra:
        profile = Profile(**{**profile.__dict__, "read_only": profile.read_only + extra})
    return profile.wrap(argv)


__all__ = [
    "DEFAULT_LIMITS",
    "READ_ONLY_FIX",
    "RESIDENT_ENV",
    "Bind",
    "CgroupSupport",
    "Decision",
    "Probe",
    "Profile",
    "Programs",
    "ReadOnlyView",
    "ResourceLimits",
    "SandboxMode",
    "SandboxUser",
    "SandboxWorkspace",
    "Session",
    "SourceTree",
    "decide",
    "detect",
    "hand_over",
    "new_identity",
    "open_session",
    "open_source_session",
    "probe",
    "read_only_argv",
    "read_only_view",
    "repo_owner",
    "run_probe",
    "source_session",
    "wrap",
]

"""Where the apply step's DoD runs: the same OS sandbox as a run's, or, only when the user
said so, without it.

The patched code runs in the user's repo, so it gets the run's walls: network off, HOME and
TMPDIR a private tmpfs, secrets masked, a PID namespace, the limits. The repo is bound
read-write at its own path and no file changes owner (`sandbox.open_source_session`); a root
runner's DoD runs as a uid of its own through an id-mapped view of the repo, and no DoD may
make a set-user-ID or set-group-ID file.
`--check` runs in a disposable checkout under a run's ordinary session.

`decide_dod_sandbox` turns the run's sandbox mode into a `DodSandbox`: `required` without a
working sandbox refuses; `auto` without one refuses unless the user passed `--unsandboxed`;
`off` is the user's own choice and runs without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from code_runner import sandbox
from code_runner.errors import ApplyRefused
from code_runner.sandbox import DEFAULT_LIMITS, ResourceLimits, SandboxMode

# Above this many tracked files the argv would outgrow the kernel's limit: the DoD may then
# write any tracked file, and the snapshot comparison after it is what catches a rewrite.
MAX_FROZEN = 8000

Wrapper = Callable[[Sequence[str]], list[str]]

UNSANDBOXED_RISK = (
    "the patched code's DoD would run as you, with your environment, HOME and network, "
    "outside any sandbox"
)


@dataclass(frozen=True)
class DodSandbox:
    """How the apply step runs a DoD: in the sandbox (`use`), or without it and why."""

    use: bool = True
    reason: str = "the OS sandbox, as in the run"
    limits: ResourceLimits = DEFAULT_LIMITS
    cpu_s: int = 3600

    def to_dict(self) -> dict[str, object]:
        return {"kind": "bwrap" if self.use else "none", "reason": self.reason}


def decide_dod_sandbox(
    mode: SandboxMode,
    *,
    unsandboxed: bool = False,
    limits: ResourceLimits = DEFAULT_LIMITS,
    cpu_s: int = 3600,
) -> DodSandbox:
    """The apply DoD's sandbox for a run made in `mode`. Refuses (ApplyRefused) when the
    DoD would run unsandboxed and nobody asked for that."""
    if mode is SandboxMode.OFF:
        return DodSandbox(False, "sandbox: off in the run's spec", limits, cpu_s)
    found = sandbox.probe()
    if found.ok:
        return DodSandbox(True, found.reason, limits, cpu_s)
    if mode is SandboxMode.AUTO and unsandboxed:
        why = f"--unsandboxed: the sandbox does not work here ({found.reason}); {UNSANDBOXED_RISK}"
        return DodSandbox(False, why, limits, cpu_s)
    flag = (
        "; or, to run it anyway, `code-runner apply RUN_DIR --unsandboxed`"
        if mode is SandboxMode.AUTO
        else ""
    )
    raise ApplyRefused(
        f"the OS sandbox does not work here ({found.reason}), and without it {UNSANDBOXED_RISK}.",
        fix=f"{found.fix or 'make the sandbox work (`code-runner doctor` says how)'}{flag}.",
    )


@contextlib.contextmanager
def source_wrapper(
    walls: DodSandbox,
    work_tree: Path,
    git_dir: Path,
    env: Mapping[str, str],
    name: str,
    frozen: Sequence[Path] = (),
    said: Callable[[Mapping[str, object]], None] | None = None,
) -> Iterator[Wrapper | None]:
    """The DoD's `wrap_argv` in the user's repo (None: unsandboxed, as decided). `frozen`
    files are read-only inside (the tracked files the patch leaves alone). `said` hears
    which uid the DoD runs as, and how (`Session.tree_posture`)."""
    if not walls.use:
        yield None
        return
    if not sandbox.probe().ok:
        raise ApplyRefused(
            f"the OS sandbox stopped working ({sandbox.probe().reason}); the DoD was not run.",
            fix="fix the sandbox (`code-runner doctor`), then apply again.",
        )
    session = sandbox.open_source_session(
        work_tree,
        git_dir,
        env=env,
        limits=walls.limits,
        cpu_s=walls.cpu_s,
        name=name,
        frozen=frozen if len(frozen) <= MAX_FROZEN else (),
    )
    with session:
        if said is not None:
            said(session.tree_posture())
        yield session.wrap


@contextlib.contextmanager
def checkout_wrapper(
    walls: DodSandbox, ws: sandbox.SandboxWorkspace, env: Mapping[str, str], name: str
) -> Iterator[Wrapper | None]:
    """The DoD's `wrap_argv` in a disposable checkout (`--check`): a run's session."""
    if not walls.use:
        yield None
        return
    session = sandbox.open_session(
        ws, env=env, network=False, limits=walls.limits, cpu_s=walls.cpu_s, name=name
    )
    with session:
        yield session.wrap


__all__ = ["DodSandbox", "Wrapper", "checkout_wrapper", "decide_dod_sandbox", "source_wrapper"]

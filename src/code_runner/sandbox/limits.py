"""Resource limits of sandboxed commands: what a spec may ask for, and the rlimit argv.

File size and CPU time are rlimits, set by `prlimit` right before the command (they hold
per process, cannot be raised without capabilities, and cost one exec). Process count is
an rlimit too when commands run as a uid of their own (RLIMIT_NPROC counts per uid), and
memory falls back to an address-space rlimit per process; a writable cgroup, when the
machine has one, bounds both for the whole tree instead (see `cgroups`).
"""

from __future__ import annotations

import resource
import shutil
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024
_Int = Annotated[int, Field(strict=True)]


class ResourceLimits(BaseModel):
    """Bounds on every command the sandbox runs (agent commands and the DoD)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_mb: _Int = Field(
        default=4096,
        ge=16,
        le=1024 * 1024,
        description="Memory for the command's whole process tree (a cgroup), or per process "
        "(address space) where no cgroup is writable.",
    )
    processes: _Int = Field(
        default=1024,
        ge=16,
        le=1024 * 1024,
        description="Processes and threads the command may have at once.",
    )
    file_size_mb: _Int = Field(
        default=512, ge=1, le=1024 * 1024, description="Largest file a command may write."
    )
    cpu_s: _Int | None = Field(
        default=None,
        ge=1,
        le=7 * 86_400,
        description="CPU seconds per process; default: the run's timeout_s.",
    )
    tmp_mb: _Int = Field(
        default=1024, ge=1, le=1024 * 1024, description="Size of the command's private /tmp."
    )
    disk_mb: _Int = Field(
        default=4096,
        ge=1,
        le=1024 * 1024,
        description="Bytes the whole run may add to its workspace (work tree, git dir, HOME, "
        "TMPDIR), checked after every tool call, round and DoD, with or without the sandbox.",
    )


DEFAULT_LIMITS = ResourceLimits()


def prlimit_path() -> str | None:
    return shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")


def rlimit_argv(
    prlimit: str,
    limits: ResourceLimits,
    *,
    own_processes: int = 0,
    cpu_s: int,
    processes: bool,
    address_space: bool,
) -> list[str]:
    """`prlimit ... --`: sets soft and hard limits, then execs the command.

    `own_processes`: the sandbox's own processes that run as the commands' uid (a resident
    executor), added to the process count so that a command gets all of its own.
    Each value is capped at the runner's own hard limit: inside the sandbox nothing may
    raise one, so a larger value would make every command fail instead of being bounded.
    """
    argv = [
        prlimit,
        f"--fsize={_capped(resource.RLIMIT_FSIZE, limits.file_size_mb * MIB)}",
        f"--cpu={_capped(resource.RLIMIT_CPU, cpu_s)}",
        "--core=0",
    ]
    if processes:
        nproc = limits.processes + own_processes
        argv.append(f"--nproc={_capped(resource.RLIMIT_NPROC, nproc)}")
    if address_space:
        argv.append(f"--as={_capped(resource.RLIMIT_AS, limits.memory_mb * MIB)}")
    return [*argv, "--"]


def _capped(which: int, wanted: int) -> int:
    _, hard = resource.getrlimit(which)
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)

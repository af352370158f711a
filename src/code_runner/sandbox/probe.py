"""Does the sandbox really work here? Run it once and look from the inside.

The probe builds the same profile a run would use around a scratch workspace and runs a
short script in it; it passes only if, seen from inside, every capability set is empty,
no-new-privs is on, the uid is the sandbox's, the workspace is writable and the root,
the `.git` pointer and new user namespaces are not, and there is no network but loopback.
A root runner's probe also checks that files written inside belong to the run's own uid
on the host. Cached per process (`probe()`); `run_probe()` always runs it afresh.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import code_runner.sandbox.cgroups as cgroups
from code_runner import proc
from code_runner.errors import PreflightError
from code_runner.sandbox.limits import DEFAULT_LIMITS, ResourceLimits
from code_runner.sandbox.profile import SANDBOX_UID, SYSTEM_BIN_PATH, Programs
from code_runner.sandbox.session import SandboxMode, Session

PROBE_TIMEOUT_S = 30.0
INSTALL_FIX = (
    "install bubblewrap and util-linux (`apt-get install bubblewrap util-linux`, or run "
    "scripts/bootstrap)"
)
PROCESSES_FIX = (
    "run code-runner as root (each run's commands then get a uid of their own, bounded by "
    "RLIMIT_NPROC), or delegate a cgroup with the pids controller to this user (cgroup v2: "
    "`systemd-run --user --scope -p Delegate=yes code-runner run ...`; v1: make the pids "
    "hierarchy's cgroup writable for this user); or drop `limits.processes` from the spec, "
    "or set `sandbox: auto` to run with it recorded as not enforced"
)
USERNS_FIX = (
    "allow unprivileged user namespaces (`sysctl -w kernel.unprivileged_userns_clone=1`, "
    "`sysctl -w user.max_user_namespaces=15000`; on Ubuntu 24.04+ also "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`), or run where they are allowed"
)
_SCRIPT = r"""
grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status
echo probe > probe.txt && echo check:workspace_writable
if ( : > /code-runner-probe ) 2>/dev/null; then echo check:root_writable; fi
if ( : > .git ) 2>/dev/null; then echo check:pointer_writable; fi
if command -v unshare >/dev/null && unshare --user true 2>/dev/null; then
  echo check:userns_allowed
fi
tail -n +3 /proc/self/net/dev | while IFS=: read -r name _; do echo "net:$name"; done
echo check:done
"""


@dataclass(frozen=True)
class _ScratchWorkspace:
    work_tree: Path
    git_dir: Path
    source_dir: Path


@dataclass(frozen=True)
class Probe:
    """What the probe found. `reason` says why it failed, or what held."""

    ok: bool
    reason: str
    fix: str | None = None
    programs: Programs | None = None
    privileged: bool = False
    bwrap_version: str | None = None
    cgroups: cgroups.CgroupSupport = field(default_factory=lambda: cgroups.CgroupSupport(()))
    cgroups_usable: bool = False
    cgroup_note: str | None = None
    duration_s: float = 0.0

    @property
    def limits_processes(self) -> bool:
        """Whether a process-count limit holds: a usable pids cgroup, or a uid of the run's
        own (a root runner). A runner that is not root shares its uid with its commands."""
        pids = self.cgroups_usable and self.cgroups.placement("pids") is not None
        return pids or self.privileged

    def unenforced(self) -> tuple[str, ...]:
        """The limits this machine cannot enforce, each with why."""
        if self.limits_processes:
            return ()
        why = self.cgroup_note or self.cgroups.describe().get("pids", "no pids cgroup")
        return (
            f"processes: not limited (no writable pids cgroup: {why}; commands share "
            "the runner's uid)",
        )

    def limits_report(self) -> dict[str, str]:
        """Which mechanism enforces each limit on this machine: cgroups, or only rlimits."""
        placements = self.cgroups.describe() if self.cgroups_usable else {}
        used = {k: v for k, v in placements.items() if v.startswith("cgroup")}
        if self.privileged:
            processes = "rlimit (RLIMIT_NPROC of the run's own uid)"
        else:
            processes = "not limited (no writable cgroup; commands share the runner's uid)"
        report = {
            "enforced_by": f"cgroups ({', '.join(used)}) and rlimits" if used else "rlimits only",
            "file_size": "rlimit (RLIMIT_FSIZE, per file)",
            "cpu_time": "rlimit (RLIMIT_CPU, per process)",
            "processes": used.get("pids", processes),
            "memory": used.get("memory", "rlimit (RLIMIT_AS, address space per process)"),
        }
        if not used:
            why = "; ".join(f"{k}: {v}" for k, v in self.cgroups.describe().items())
            report["cgroups"] = self.cgroup_note or why
        return report

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "fix": self.fix,
            "bwrap": self.programs.bwrap if self.programs else None,
            "bwrap_version": self.bwrap_version,
            "mode": "root: outer bwrap, then a uid of the run's own"
            if self.privileged
            else "unprivileged bwrap (user namespace)",
            "limits": self.limits_report(),
            "duration_s": round(self.duration_s, 3),
        }


@functools.cache
def probe() -> Probe:
    """The probe's result for this process (it runs once)."""
    return run_probe()


def run_probe() -> Probe:
    started = time.monotonic()
    programs = Programs.find()
    privileged = os.geteuid() == 0
    support = cgroups.detect()
    if programs is None:
        return Probe(False, "bwrap or prlimit is not installed", INSTALL_FIX, cgroups=support)
    if privileged and programs.setpriv is None:
        return Probe(False, "setpriv is not installed", INSTALL_FIX, programs, privileged)
    version = _version(programs.bwrap)
    ok, reason = _attempt(programs, support if support.placements else None)
    usable = bool(support.placements) and ok
    note = None
    if not ok and support.placements:
        ok, reason = _attempt(programs, None)
        if ok:
            note = "cgroups present but commands could not join them; rlimits only"
    fix = (
        None
        if ok
        else (
            USERNS_FIX
            if "namespace" in reason or "uid map" in reason
            else "run `code-runner doctor` for details; set `sandbox: auto` to fall "
            "back to the command policy, or `off`"
        )
    )
    return Probe(
        ok=ok,
        reason=reason,
        fix=fix,
        programs=programs,
        privileged=privileged,
        bwrap_version=version,
        cgroups=support,
        cgroups_usable=usable,
        cgroup_note=note,
        duration_s=time.monotonic() - started,
    )


def _version(bwrap: str) -> str | None:
    result = proc.capture(
        [bwrap, "--version"], cwd=None, env={"PATH": SYSTEM_BIN_PATH}, timeout_s=10
    )
    text = result.stdout.decode("utf-8", "replace").strip()
    return text or None


def _attempt(programs: Programs, support: cgroups.CgroupSupport | None) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="code-runner-probe-") as scratch:
        root = Path(scratch)
        ws = _ScratchWorkspace(root / "wt", root / "git", root / "src")
        for path in (ws.work_tree, ws.git_dir, ws.source_dir):
            path.mkdir()
        (ws.work_tree / ".git").write_text(f"gitdir: {ws.git_dir}\n")
        env = {"PATH": SYSTEM_BIN_PATH}
        session = Session(
            ws,
            programs=programs,
            env=env,
            network=False,
            limits=DEFAULT_LIMITS,
            cpu_s=int(PROBE_TIMEOUT_S),
            cgroups=support,
            name=f"probe-{os.getpid()}-{time.monotonic_ns()}",
        )
        with session:
            if support is not None and session.cgroup_error:
                return False, session.cgroup_error
            result = proc.run(
                session.wrap(["/bin/sh", "-c", _SCRIPT]),
                cwd=ws.work_tree,
                env=env,
                timeout_s=PROBE_TIMEOUT_S,
            )
        return _judge(result, ws, session)


def _judge(result: proc.ProcResult, ws: _ScratchWorkspace, session: Session) -> tuple[bool, str]:  # noqa: C901 - one check per guarantee probed
    lines = result.stdout.splitlines()
    fields = {k: v.split() for k, _, v in (line.partition(":") for line in lines) if v}
    checks = {line.split(":", 1)[1] for line in lines if line.startswith("check:")}
    nets = {line.split(":", 1)[1].strip() for line in lines if line.startswith("net:")}
    if "done" not in checks:
        detail = (result.stderr or result.stdout).strip().splitlines()
        why = detail[-1] if detail else result.describe()
        return False, f"bwrap could not start a sandbox ({why})"
    problems: list[str] = []
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        if any(int(v, 16) for v in fields.get(cap, ["1"])):
            problems.append(f"{cap} is not empty")
    if fields.get("NoNewPrivs") != ["1"]:
        problems.append("no-new-privs is not set")
    if fields.get("Uid", [""])[:2] != [str(SANDBOX_UID)] * 2:
        problems.append(f"the uid inside is {fields.get('Uid')}, not {SANDBOX_UID}")
    if "workspace_writable" not in checks or not (ws.work_tree / "probe.txt").exists():
        problems.append("the workspace is not writable")
    elif session.identity is not None:
        owner = (ws.work_tree / "probe.txt").stat().st_uid
        if owner != session.identity.uid:
            problems.append(f"files written inside belong to uid {owner} on the host")
    for check, what in (
        ("root_writable", "the root file system is writable"),
        ("pointer_writable", "the .git pointer is writable"),
        ("userns_allowed", "new user namespaces can be made"),
    ):
        if check in checks:
            problems.append(what)
    if nets - {"lo"}:
        problems.append(f"network interfaces are visible ({', '.join(sorted(nets))})")
    if problems:
        return False, "the sandbox did not hold: " + "; ".join(problems)
    return True, "bwrap sandbox: no capabilities, no-new-privs, uid 1000, read-only root"


@dataclass(frozen=True)
class Decision:
    """Whether a run uses the sandbox, and why (made in preflight)."""

    mode: SandboxMode
    use: bool
    reason: str
    probe: Probe | None = None
    unenforced: tuple[str, ...] = ()  # limits the sandbox will not enforce, each with why

    def posture(self) -> dict[str, Any]:
        """result.json's `sandbox` when no session ran (or before one starts)."""
        found: dict[str, Any] = {
            "kind": "bwrap" if self.use else "none",
            "mode": self.mode.value,
            "reason": self.reason,
        }
        if self.unenforced:
            found["unenforced"] = list(self.unenforced)
        return found


def decide(
    mode: SandboxMode, found: Probe | None = None, *, limits: ResourceLimits | None = None
) -> Decision:
    """auto: the sandbox if the probe passes; required: that or a PreflightError; off: none.

    `found` is a probe result to judge instead of this process's cached one. With `limits`
    (the spec's), `required` also refuses a limit the spec sets that the sandbox cannot
    enforce here, and the decision lists every limit left unenforced.
    """
    if mode is SandboxMode.OFF:
        return Decision(mode, False, "sandbox: off in the spec; commands run under the policy")
    found = found or probe()
    if found.ok:
        unenforced = found.unenforced() if limits is not None else ()
        if mode is SandboxMode.REQUIRED and limits is not None:
            _refuse_unenforced(limits, unenforced)
        return Decision(mode, True, found.reason, found, unenforced)
    if mode is SandboxMode.REQUIRED:
        raise PreflightError(
            f"the spec says `sandbox: required`, but the OS sandbox does not work here: "
            f"{found.reason}.",
            fix=f"{found.fix}; or set `sandbox: auto` to run with the command policy instead.",
        )
    return Decision(
        mode,
        False,
        f"the sandbox probe failed ({found.reason}); commands run under the policy",
        found,
    )


def _refuse_unenforced(limits: ResourceLimits, unenforced: tuple[str, ...]) -> None:
    """`required` with a limit the spec sets and this machine cannot hold: a preflight error."""
    asked = limits.model_fields_set
    refused = [gap for gap in unenforced if gap.split(":", 1)[0] in asked]
    if refused:
        name = refused[0].split(":", 1)[0]
        raise PreflightError(
            f"the spec says `sandbox: required` and sets `limits.{name}: "
            f"{getattr(limits, name)}`, but the sandbox cannot enforce it here: "
            f"{refused[0].split(':', 1)[1].strip()}.",
            fix=PROCESSES_FIX,
        )

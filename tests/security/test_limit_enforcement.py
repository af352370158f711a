"""No limit is silently not enforced. A runner that is not root and has no writable pids
cgroup cannot bound its commands' process count: with `sandbox: required` a spec that sets
`limits.processes` is refused before anything is created (exit 3, naming the limit and how
to get it enforced); with `auto` the run goes ahead and the record lists the limit as not
enforced. A root runner enforces it (a pids cgroup, or RLIMIT_NPROC of the run's own uid),
and a fork storm stops at the limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.agent_clis import PY
from tests.helpers.attacks import attack, call, cmd, dump, held
from tests.helpers.tasks import FIXED_BOTH, FORK_MANY, calc_repo, fingerprint, write_task
from tests.security.unprivileged import Nobody, nobody

pytestmark = pytest.mark.usefixtures("sandbox_works")
__all__ = ["nobody"]  # a fixture

LIMITS = {"processes": 32}


def _spec(who: Nobody, mode: str) -> Path:
    source = calc_repo(who.root)
    return write_task(
        who.root,
        source,
        [[call("write_file", path="calc.py", content=FIXED_BOTH)]],
        command="grep -q 'a [*] b' calc.py",
        sandbox=mode,
        limits=LIMITS,
    )


def test_required_refuses_a_process_limit_it_cannot_enforce(nobody: Nobody) -> None:
    spec = _spec(nobody, "required")
    nobody.own()
    source = nobody.root / "source"
    before = fingerprint(source)
    done = nobody.run(spec, timeout=120)
    text = done.stdout + done.stderr
    if done.returncode == 0 and "pids.max" in str(nobody.result()["sandbox"]["limits"]):
        pytest.skip("this machine delegates a pids cgroup to uid 65534: the limit holds")
    held("refused with exit 3", done.returncode == 3, text[-2000:])
    held("the message names the limit", "limits.processes: 32" in text, text[-2000:])
    held("the message says how to get it enforced", "pids" in text and "root" in text, text)
    held("no traceback", "Traceback" not in text, text[-2000:])
    held("nothing was run", not (nobody.root / "out/fix-calc.result.json").exists())
    held("no workspace was made", not any((nobody.state).rglob("workspaces/*")))
    held("the source is byte-identical", fingerprint(source) == before)


def test_auto_records_a_process_limit_it_cannot_enforce(nobody: Nobody) -> None:
    spec = _spec(nobody, "auto")
    done = nobody.run(spec, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    posture = nobody.result()["sandbox"]
    unenforced = posture.get("unenforced", [])
    held("the record lists the limit", any(u.startswith("processes:") for u in unenforced), posture)
    held("and says it is not limited", "not limited" in posture["limits"]["processes"], posture)
    held("the run warned about it", "limit not enforced: processes" in done.stderr + done.stdout)


def test_a_root_runner_enforces_the_process_limit(tmp_path: Path) -> None:
    calls = [
        call("write_file", path="fork.py", content=FORK_MANY),
        cmd(f"{PY} fork.py > report.txt"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    allow = ("calc.py", "report.txt", "fork.py")
    source = calc_repo(tmp_path)
    run = attack(tmp_path, calls, sandbox="required", source=source, allowlist=allow, limits=LIMITS)
    posture = run.result["sandbox"]
    held("nothing is left unenforced", posture.get("unenforced") == [], posture)
    report = run.added("report.txt")
    forked = int(report.split("=", 1)[1]) if report.startswith("forked=") else -1
    held("a fork storm stops at the limit", 0 <= forked < LIMITS["processes"], dump(run))
    assert run.result["status"] == "passed", dump(run)

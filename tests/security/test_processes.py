"""Process attacks inside the sandbox: what a command runs with, and that it cannot outlive
its call or exhaust the machine. Each command reports into `report.txt` (allowlisted), so
the patch carries the evidence out of the disposable workspace."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.attacks import attack, call, cmd, dump, held
from tests.helpers.tasks import FIXED_BOTH, FORK_MANY, PY

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_works")]

LIMITS = {"processes": 64, "memory_mb": 256, "file_size_mb": 16, "tmp_mb": 32}
STATUS = "grep -E '^(Uid|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status"


def _survivors(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or []):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.NoSuchProcess:
                continue
    return found


def _fields(report: str) -> dict[str, Any]:
    """`Key:\\tv1 v2` lines (from /proc) and `key=value` words (from the commands)."""
    fields: dict[str, Any] = {}
    for line in report.splitlines():
        if "=" in line:
            for part in line.split():
                key, value = part.split("=", 1)
                fields[key] = value
        else:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return fields


def test_capabilities_limits_and_escapes(tmp_path: Path) -> None:
    calls = [
        cmd(f"{STATUS} > report.txt"),
        # a daemon that detaches and ignores hangups, left by a command that then times out
        cmd("setsid nohup sleep 7771 >/dev/null 2>&1 & sleep 60", timeout_s=2),
        # ... and one left by a command that ends normally
        cmd("setsid nohup sleep 7772 >/dev/null 2>&1 & echo left"),
        # more processes than the limit: the forks fail, the count stays bounded
        cmd(f"{PY} -c '{FORK_MANY}' >> report.txt"),
        # a real fork bomb, bounded by the limit and ended by the timeout
        cmd("bomb() { bomb | bomb & }; bomb; sleep 60", timeout_s=3),
        # memory: a loop that keeps allocating until it is stopped
        cmd(
            f"{PY} -c 'b = []\nwhile True: b.append(bytearray(32 << 20))'; "
            'echo "memory_exit=$?" >> report.txt'
        ),
        # a 1 GiB write stops at the file size limit
        cmd(
            "head -c 1073741824 /dev/zero > big.bin; "
            'echo "write_exit=$? size=$(stat -c %s big.bin)" >> report.txt'
        ),
        # the private /tmp is bounded too: three 15 MB files do not fit in 32 MB
        cmd(
            "for i in 1 2 3; do head -c 15000000 /dev/zero > /tmp/f$i || tmp_exit=$?; done; "
            'echo "tmp_exit=${tmp_exit:-0} tmp_size=$(cat /tmp/f* | wc -c)" >> report.txt'
        ),
        # an output flood is cut off (the runner's output cap, or the file size limit)
        cmd("yes | head -c 100000000"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    started = time.monotonic()
    run = attack(tmp_path, calls, sandbox="required", limits=LIMITS)
    report = run.added("report.txt")
    fields = _fields(report)
    results = run.tool_results
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        held(f"{cap} is 0", fields[cap] == ["0000000000000000"], report)
    held("no-new-privs", fields["NoNewPrivs"] == ["1"], report)
    held("non-zero uid", fields["Uid"][:2] == ["1000", "1000"], report)
    held("timeout reported", results[1]["error"] == "TIMEOUT", results[1])
    held("timed-out daemon killed", not _survivors("sleep 7771"))
    held("left-behind daemon killed", not _survivors("sleep 7772"))
    held("process count bounded", int(fields["forked"]) < LIMITS["processes"], report)
    held("fork bomb stopped", results[4]["error"] == "TIMEOUT", results[4])
    held("no bomb or sleeper survives", not _survivors("sleep 30") and not _survivors("bomb"))
    memory = (fields.get("memory_exit"), results[5])  # missing: the shell itself was killed
    held("memory bomb stopped, the shell kept", memory[0] not in (None, "0"), memory)
    held("1 GiB write stopped at the limit", int(fields["size"]) <= 16 << 20, report)
    held("write failed", fields["write_exit"] != "0", report)
    held("/tmp bounded", int(fields["tmp_size"]) <= 32 << 20 and fields["tmp_exit"] != "0", report)
    flood = results[8]["details"]
    held("output flood cut off", flood["output_limited"] or flood["exit_code"] == 153, flood)
    held("the run itself finished", run.result["status"] == "passed", dump(run))
    assert time.monotonic() - started < 120

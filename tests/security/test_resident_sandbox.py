"""Attacks on the resident sandbox: one sandbox serves every command of a run, so each
command tries to reach the next one through it (a daemon, HOME and /tmp, the executor's
memory, code and socket, a forged answer, the executor killed). Each fails or is
contained, and the next command starts clean; the evidence leaves in `report.txt`."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_runner.sandbox import executor
from tests.helpers.attacks import attack, call, cmd, dump, held
from tests.helpers.tasks import FIXED_BOTH
from tests.security.test_processes import _fields, _survivors

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_works")]

FORGED = '{"nonce": "0", "returncode": 0, "killed": 0}'


def test_a_command_cannot_reach_the_next_one_through_the_resident_sandbox(
    tmp_path: Path,
) -> None:
    code = Path(executor.__file__)
    before = code.read_bytes()
    calls = [
        cmd("setsid nohup sleep 7791 >/dev/null 2>&1 & echo left"),
        cmd('echo "daemons=$(pgrep -c -f "slee[p] 7791")" > report.txt'),
        cmd(
            "echo planted > $HOME/.planted; echo planted > $TMPDIR/planted; "
            "head -c 40000000 /dev/zero > /tmp/fill; echo fill_exit=$? >> report.txt; "
            "ipcmk -M 4096 && ipcmk -Q && ipcmk -S 1; echo ipc=$(ipcs | grep -c ^0x) >> report.txt"
        ),
        cmd(
            "test -e $HOME/.planted; echo home_planted=$? >> report.txt; "
            "test -e /tmp/fill; echo tmp_fill=$? >> report.txt; "
            "head -c 20000000 /dev/zero > /tmp/again; echo refill_exit=$? >> report.txt; "
            "echo ipc_left=$(ipcs | grep -c ^0x) >> report.txt"
        ),
        cmd(
            "printf x > /proc/$PPID/mem; echo mem_exit=$? >> report.txt; "
            "ls /proc/$PPID/fd > /dev/null; echo fds_exit=$? >> report.txt; "
            f"echo pwned >> {code}; echo code_exit=$? >> report.txt"
        ),
        cmd(
            "for fd in /proc/$PPID/fd/* /proc/self/fd/*; do "
            f"printf '{FORGED}' > $fd; done 2>/dev/null; exit 7"
        ),
        cmd("kill -9 $PPID; sleep 5; echo survived"),
        cmd('echo "after_kill=$(pgrep -c -f "slee[p] 5")" >> report.txt'),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox="required", limits={"tmp_mb": 32})
    report = run.added("report.txt")
    fields = _fields(report)
    results = [r["details"] for r in run.tool_results]
    held("a left daemon is gone for the next command", fields["daemons"] == "0", report)
    held("and on the host", not _survivors("sleep 7791"))
    held("/tmp filled to its size", fields["fill_exit"] != "0", report)
    held("HOME is new for the next command", fields["home_planted"] == "1", report)
    held("so is /tmp, with its space back", fields["tmp_fill"] == "1", report)
    held("/tmp takes 20 MB again", fields["refill_exit"] == "0", report)
    held("System V IPC made", fields["ipc"] == "3", report)
    held("and gone for the next command", fields["ipc_left"] == "0", report)
    held("the executor's memory is not writable", fields["mem_exit"] != "0", report)
    held("its descriptors are not reachable", fields["fds_exit"] != "0", report)
    held("its code is not writable", fields["code_exit"] != "0", report)
    held("executor.py unchanged", code.read_bytes() == before)
    held("a forged answer is not the result", results[5]["exit_code"] == 7, results[5])
    held("a killed executor fails its command", results[6]["exit_code"] != 0, results[6])
    held("nothing of it survives", fields["after_kill"] == "0", report)
    posture = run.result["sandbox"]["executor"]
    held("the new sandbox is recorded", posture["started"] == 2, posture)
    held("with why", "ended during the command" in posture["restarts"][0], posture)
    held("the run itself finished", run.result["status"] == "passed", dump(run))

"""Processes that try to outlive their run: a daemon that leaves its session and clears its
environment (`setsid env -i`), with and without the sandbox, after a normal end and after the
runner is SIGKILLed (then `gc` must find it); and a same-user child reading the runner's
environment through /proc when the sandbox is off."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from code_runner import sandbox
from code_runner.proc import tracking
from code_runner.runner import gc
from tests.helpers.attacks import MODES, attack, call, cmd, dump, held
from tests.helpers.git import git
from tests.helpers.tasks import FIXED_BOTH, PY, calc_repo, fingerprint, write_task
from tests.security.unprivileged import Nobody, nobody

__all__ = ["nobody"]  # a fixture

pytestmark = pytest.mark.integration


def _alive(marker: str) -> list[psutil.Process]:
    found = []
    for candidate in psutil.process_iter(["cmdline"]):
        try:
            argv = candidate.info["cmdline"] or []
            if argv[-2:] == ["/bin/sleep", marker.split()[-1]] and (
                candidate.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(candidate)
        except psutil.Error:
            continue
    return found


def _wait_for(predicate, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


@pytest.mark.parametrize("mode", MODES)
def test_a_daemon_that_clears_its_environment_dies_with_its_command(
    tmp_path: Path, mode: str
) -> None:
    if mode == "required" and not _sandbox_works():
        pytest.skip("no working sandbox here")
    marker = f"77{os.getpid() % 100:02d}{len(mode)}"
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    calls = [
        cmd(f"setsid env -i /bin/sleep {marker} </dev/null >/dev/null 2>&1 & echo started"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox=mode, source=source)
    held(f"{mode}: the escaped daemon is gone after the run", not _alive(f"sleep {marker}"))
    held(f"{mode}: the run passed", run.result["status"] == "passed", dump(run))
    held(f"{mode}: the source is unchanged", fingerprint(source) == before)
    held(f"{mode}: no run group is left", not tracking.leftover_groups() or _no_group(run))


def _no_group(run: object) -> bool:
    run_id = str(getattr(run, "result", {}).get("run_id", ""))
    return all(rid != run_id for rid, _ in tracking.leftover_groups())


def _sandbox_works() -> bool:
    return bool(sandbox.probe().ok)


@pytest.mark.skipif(tracking.hierarchy() is None, reason="no writable cgroup to track runs in")
def test_gc_kills_what_a_sigkilled_run_left_even_without_its_environment(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    marker = f"78{os.getpid() % 100:02d}"
    started = tmp_path / "out/fix-calc.events.jsonl"
    spec = write_task(
        tmp_path,
        source,
        [[cmd(f"setsid env -i /bin/sleep {marker} </dev/null >/dev/null 2>&1 & sleep 60")]],
        sandbox="off",
    )
    runner = subprocess.Popen(
        [PY, "-m", "code_runner", "run", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: bool(_alive(f"sleep {marker}")) and started.exists())
    escaped = _alive(f"sleep {marker}")
    held(
        "the daemon shed the run id", all("CODE_RUNNER_RUN_ID" not in p.environ() for p in escaped)
    )
    runner.kill()
    runner.communicate()
    done = subprocess.run(
        [PY, "-m", "code_runner", "gc"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    _wait_for(lambda: not _alive(f"sleep {marker}"), timeout=10)
    held("gc killed the escaped daemon", not _alive(f"sleep {marker}"), done.stdout)
    held("the source is unchanged", fingerprint(source) == before)
    git(source, "status", "--porcelain")


def test_a_same_user_child_cannot_read_the_runner_environment(nobody: Nobody) -> None:
    secret = "probe-" + os.urandom(8).hex()
    source = calc_repo(nobody.root)
    spec = write_task(
        nobody.root,
        source,
        [
            [
                cmd(
                    "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done"
                    " | grep -c '^CODE_RUNNER_PROBE_API_KEY=' > report.txt; true"
                ),
                call("write_file", path="calc.py", content=FIXED_BOTH),
            ]
        ],
        allowlist=["calc.py", "report.txt"],
        command="grep -q 'a [*] b' calc.py",
        sandbox="off",
    )
    nobody.own()
    env = {**nobody.env(), "CODE_RUNNER_PROBE_API_KEY": secret}
    done = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "/usr/bin/env",
            "-i",
            *[f"{k}={v}" for k, v in env.items()],
            nobody.python,
            "-m",
            "code_runner",
            "run",
            str(spec),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=nobody.root,
        timeout=240,
    )
    assert nobody.result()["status"] == "passed", done.stderr
    patch = nobody.patch()
    held("the child found the runner's environ unreadable", "+0\n" in patch, patch)
    held("the secret is nowhere in the record", secret not in patch)


def test_gc_removes_the_scratch_of_a_dead_runner_and_keeps_a_live_ones(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    temp = Path(tempfile.gettempdir())
    stale = temp / f"code-runner-proc-{dead.pid}-x{os.getpid()}"
    live = temp / f"code-runner-proc-{os.getpid()}-y{os.getpid()}"
    for path in (stale, live):
        path.mkdir()
        (path / "stdout").write_text("output\n")
    try:
        removed = gc.collect()
        held("a dead runner's scratch is removed", not stale.exists(), removed)
        held("a live runner's scratch is kept", (live / "stdout").read_text() == "output\n")
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)

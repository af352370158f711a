"""The resident sandbox through `Session.run`: one sandbox for a session's commands, each
command still bounded (timeout, output cap) and followed by a clean slate, and the
per-command path wherever the executor cannot start."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner import proc, sandbox
from code_runner.sandbox import resident
from tests.helpers.tasks import FORK_MANY

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_works")]


class _Ws:
    def __init__(self, root: Path) -> None:
        self.work_tree = root / "wt"
        self.git_dir = root / "git"
        self.source_dir = root / "no-source"
        for made in (self.work_tree, self.git_dir):
            made.mkdir(parents=True)
        (self.work_tree / ".git").write_text(f"gitdir: {self.git_dir}\n")


@pytest.fixture
def sandbox_works() -> None:
    found = sandbox.probe()
    assert found.ok, f"the OS sandbox does not work here: {found.reason}"


def _session(
    root: Path, limits: sandbox.ResourceLimits = sandbox.DEFAULT_LIMITS
) -> sandbox.Session:
    found = sandbox.probe()
    assert found.programs is not None
    return sandbox.Session(
        _Ws(root),
        programs=found.programs,
        env={"PATH": "/usr/bin:/bin"},
        network=False,
        limits=limits,
        cpu_s=60,
        cgroups=found.cgroups if found.cgroups_usable else None,
        name=f"resident-{root.name}",
        resident=True,
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sandbox.Session]:
    with _session(tmp_path_factory.mktemp("resident")) as opened:
        yield opened


def _run(session: sandbox.Session, command: str, **bounds: float) -> proc.ProcResult:
    timeout_s = bounds.pop("timeout_s", 30.0)
    return session.run(
        proc.shell_argv(command),
        cwd=session.workspace.work_tree,
        env={"PATH": "/usr/bin:/bin"},
        timeout_s=timeout_s,
        **bounds,  # type: ignore[arg-type]
    )


def test_commands_share_one_sandbox_but_not_their_leftovers(session: sandbox.Session) -> None:
    first = _run(session, "echo hi; echo err >&2; touch $HOME/h $TMPDIR/t; sleep 300 & exit 3")
    assert (first.exit_code, first.stdout, first.stderr) == (3, "hi\n", "err\n")
    assert first.killed_descendants == 1  # the background sleep
    second = _run(session, "ls -A $HOME $TMPDIR | grep -c '^[ht]$'; pgrep -c sleep")
    assert second.stdout.split() == ["0", "0"], second
    assert session.executor_posture() == {
        "mode": "resident",
        "started": 1,
        "restarts": [],
        "fell_back": None,
    }


def test_timeout_and_output_cap_still_end_the_command(session: sandbox.Session) -> None:
    started = time.monotonic()
    slow = _run(session, "sleep 60", timeout_s=0.5, grace_s=0.2)
    assert slow.timed_out and slow.exit_code == proc.TIMEOUT_EXIT_CODE
    assert time.monotonic() - started < 10
    flood = _run(session, "yes", max_output_bytes=200_000)
    assert flood.output_limited and flood.exit_code != 0
    assert _run(session, "echo still").stdout == "still\n"
    assert session.executor_posture()["started"] == 1  # one sandbox served them all


def test_the_command_tree_goes_before_the_executor_from_its_first_instruction(
    session: sandbox.Session,
) -> None:
    """The OOM preference is set in the child before exec, so the first process the command
    runs and whatever it forks at once already have it. Set from the executor after the start,
    a busy machine let a shell's first child win the race and keep 0: under a memory cgroup
    the shell was then killed in place of the memory hog. Busy loops make that race likely."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        seen = [_run(session, "cat /proc/self/oom_score_adj; cat /proc/self/oom_score_adj")]
        seen += [_run(session, "cat /proc/self/oom_score_adj") for _ in range(40)]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    late = [r.stdout for r in seen if set(r.stdout.split()) != {"1000"}]
    assert not late, f"{len(late)} of {len(seen)} commands ran before their OOM preference"


def test_the_process_limit_is_the_commands_own(tmp_path: Path) -> None:
    """The resident sandbox's own processes (its bwrap stages, the executor) are not taken
    from the command's count: a command limited to 32 processes runs itself and 31 more."""
    limits = sandbox.ResourceLimits(processes=32)
    with _session(tmp_path, limits) as limited:
        for _ in range(2):  # and again after the first command's processes were swept
            forks = _run(limited, f"python3 -c '{FORK_MANY}'")
            if "pids" in limited.cgroup_controllers:
                assert forks.stdout.strip() == "forked=31", (forks.stdout, forks.stderr)
            else:  # RLIMIT_NPROC also counts the sandbox uid's bwrap stage and executor
                assert 27 <= int(forks.stdout.split("=")[1]) <= 31, forks


def test_an_executor_that_cannot_start_leaves_the_per_command_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resident, "python_for_executor", lambda: "/bin/false")
    with _session(tmp_path) as session:
        result = _run(session, "echo per-command")
        assert result.stdout == "per-command\n" and result.exit_code == 0
        posture = session.posture()["executor"]
    assert posture["mode"] == "per-command"
    assert "ended before it was ready" in posture["why"], posture

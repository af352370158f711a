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
    root: Path,
    limits: sandbox.ResourceLimits = sandbox.DEFAULT_LIMITS,
    frozen: tuple[str, ...] = (),
) -> sandbox.Session:
    found = sandbox.probe()
    assert found.programs is not None
    ws = _Ws(root)
    return sandbox.Session(
        ws,
        frozen=[ws.work_tree / name for name in frozen],
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


def test_the_executor_lends_its_oom_score_only_for_the_start(session: sandbox.Session) -> None:
    """The executor raises its own score to 1000 around a command's start (the command
    inherits it) and is back at its own while the command runs: under a memory cgroup the
    command's tree goes first, never the executor. The command's parent is the executor."""
    own = Path("/proc/self/oom_score_adj").read_text().strip()  # what the executor inherited
    seen = _run(session, "sleep 0.3; cat /proc/$PPID/oom_score_adj /proc/self/oom_score_adj")
    assert seen.stdout.split() == [own, "1000"], seen
    refused = _run(session, "echo 1000 > /proc/$PPID/oom_score_adj")
    assert refused.exit_code != 0, refused  # the executor's score is not the command's to set
    assert _run(session, "sleep 0.3; cat /proc/$PPID/oom_score_adj").stdout.split() == [own]


def test_where_the_executor_cannot_lend_its_score_each_command_sets_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor that cannot open its own score file starts each command with code in the
    child that sets the command's score before exec: slower, the same guarantee."""
    source = resident.executor_source()
    blind = source.replace('"/proc/self/oom_score_adj", os.O_RDWR', '"/nonexistent", os.O_RDWR')
    assert blind != source
    monkeypatch.setattr(resident, "executor_source", lambda: blind)
    own = Path("/proc/self/oom_score_adj").read_text().strip()
    with _session(tmp_path) as lent:
        for _ in range(2):
            seen = _run(
                lent, "cat /proc/self/oom_score_adj; sleep 0.3; cat /proc/$PPID/oom_score_adj"
            )
            assert seen.stdout.split() == ["1000", own], seen
        assert lent.executor_posture()["started"] == 1


def test_a_commands_output_is_its_own_though_the_files_are_reused(
    session: sandbox.Session,
) -> None:
    """The output files of commands given no path are made once per sandbox: a command sees
    in its result nothing an earlier one wrote, however much, nor anything a leftover of
    it would have written late (the leftover is killed before the answer)."""
    loud = _run(
        session,
        "head -c 300000 /dev/zero | tr '\\0' a; head -c 70000 /dev/zero >&2; "
        "(sleep 0.3; echo late; echo late >&2) & echo done",
    )
    assert (loud.stdout_size, loud.stderr_size) == (300_005, 70_000), loud
    quiet = _run(session, "sleep 0.6; printf next")
    assert (quiet.stdout, quiet.stdout_size, quiet.stderr, quiet.stderr_size) == (
        "next",
        4,
        "",
        0,
    ), quiet


def test_a_mount_source_the_runner_replaced_gets_a_new_sandbox(tmp_path: Path) -> None:
    """A frozen file is bound read-only onto itself when the sandbox starts; when the runner
    replaces it (another inode) or removes it, the running sandbox's mount would show the
    old file or a stale mount point, so the next command gets a new sandbox."""
    with _session(tmp_path, frozen=("pinned.txt",)) as pinned:
        target = pinned.workspace.work_tree / "pinned.txt"
        target.write_text("one\n")
        assert _run(pinned, "cat pinned.txt; echo x >> pinned.txt").stdout == "one\n"
        assert _run(pinned, "cat pinned.txt").stdout == "one\n"  # same sandbox, still one
        fresh = target.with_name("fresh")
        fresh.write_text("two\n")
        fresh.replace(target)
        assert _run(pinned, "cat pinned.txt").stdout == "two\n"
        target.unlink()
        assert _run(pinned, "test -e pinned.txt; echo $?").stdout == "1\n"
        posture = pinned.executor_posture()
    assert posture["started"] == 3, posture
    assert posture["restarts"] == ["its mounts changed", "its mounts changed"], posture


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


def test_a_sandbox_started_ahead_serves_the_first_command(tmp_path: Path) -> None:
    """`start` runs no command: the executor waits, and the first command is its first."""
    with _session(tmp_path) as ahead:
        ahead.start({"PATH": "/usr/bin:/bin"})
        executor = ahead.resident_pid
        assert executor is not None and ahead.executor_posture()["started"] == 1
        first = _run(ahead, "echo first")
        assert first.stdout == "first\n" and first.killed_descendants == 0
        assert ahead.resident_pid == executor
        assert ahead.executor_posture()["started"] == 1  # no second sandbox for it
    assert ahead.resident_pid is None

"""The supervisor's endings as check objects: each on its own, their order, and a real run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from code_runner import proc
from code_runner.agents.cli_agents.supervisor import (
    BlockerSeen,
    Ending,
    EndingCheck,
    Exited,
    IdleTimeout,
    Moment,
    OutputCap,
    OutputStreams,
    StopRequested,
    SupervisedCommand,
    SupervisionLimits,
    WallClock,
    ending_checks,
    supervise,
)
from code_runner.agents.cli_agents.translate import PlainTranslator
from code_runner.events import ListSink

PY = sys.executable


def _command(tmp_path: Path, *argv: str) -> SupervisedCommand:
    return SupervisedCommand(
        argv=argv or ("true",),
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        stdout_path=tmp_path / "out.log",
        stderr_path=tmp_path / "err.log",
    )


def _first(checks: tuple[EndingCheck, ...], moment: Moment) -> tuple[Ending, str] | None:
    """As the supervisor decides: the first check that holds, in order."""
    return next((f for f in (c.check(moment) for c in checks) if f is not None), None)


def test_each_check_alone() -> None:
    calm = Moment(elapsed_s=1.0, silent_s=1.0, exit_code=None)
    assert WallClock(5).check(calm) is None
    assert WallClock(0.5).check(calm) == (Ending.TIMEOUT, "the CLI ran longer than 0.5 s")
    assert IdleTimeout(5).check(calm) is None
    assert IdleTimeout(0.5).check(calm) == (Ending.IDLE_TIMEOUT, "the CLI wrote nothing for 0.5 s")
    assert StopRequested(lambda: False).check(calm) is None
    assert StopRequested(lambda: True).check(calm) is not None
    assert Exited().check(calm) is None
    assert Exited().check(Moment(1.0, 1.0, 0)) == (Ending.EXITED, "")


def test_a_blocker_wins_over_an_exit_and_an_exit_over_the_clocks(tmp_path: Path) -> None:
    translator = PlainTranslator(ListSink())
    streams = OutputStreams(_command(tmp_path), translator)
    limits = SupervisionLimits(timeout_s=1, idle_timeout_s=1, max_output_bytes=10)
    checks = ending_checks(limits, translator, streams, lambda: True)
    assert [type(c) for c in checks] == [
        BlockerSeen,
        Exited,
        StopRequested,
        WallClock,
        IdleTimeout,
        OutputCap,
    ]
    late_exit = Moment(elapsed_s=9.0, silent_s=9.0, exit_code=0)
    assert _first(checks, late_exit) == (Ending.EXITED, "")
    translator.stderr_line("Error: 401 Unauthorized: invalid api key")
    assert translator.state.blocker is not None
    assert _first(checks, late_exit) == (Ending.BLOCKED, "")


def test_output_cap_counts_unread_bytes_on_disk(tmp_path: Path) -> None:
    command = _command(tmp_path)
    streams = OutputStreams(command, PlainTranslator(ListSink()))
    command.stdout_path.write_bytes(b"x" * 64)
    assert OutputCap(100, streams).check(Moment(0, 0, None)) is None
    assert OutputCap(10, streams).check(Moment(0, 0, None)) is not None


@pytest.mark.integration
def test_a_real_exit_is_exited_with_its_code_and_output(tmp_path: Path) -> None:
    proc.become_subreaper()
    command = _command(tmp_path, PY, "-c", "print('done'); import sys; sys.exit(4)")
    done = supervise(command, SupervisionLimits(30, 30), PlainTranslator(ListSink()))
    assert done.ending is Ending.EXITED and done.exit_code == 4
    assert done.output_bytes == len("done\n") and done.killed == 0

"""`supervise` on real processes: every ending, and the tree always gone afterwards."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

from code_runner import proc
from code_runner.agents.cli_agents.supervisor import (
    Ending,
    SupervisedCommand,
    SupervisionLimits,
    supervise,
)
from code_runner.agents.cli_agents.translate import ClaudeTranslator, PlainTranslator
from code_runner.events import EventKind, ListSink
from tests.helpers.agent_clis import leftovers

pytestmark = pytest.mark.integration

PY = sys.executable


@pytest.fixture(autouse=True)
def _subreaper() -> None:
    proc.become_subreaper()  # as the runner is: orphaned daemons stay findable


def _launch(tmp_path: Path, program: str, *args: str) -> SupervisedCommand:
    script = tmp_path / "child.py"
    script.write_text(program)
    return SupervisedCommand(
        argv=(PY, str(script), *args),
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        stdout_path=tmp_path / "out.log",
        stderr_path=tmp_path / "err.log",
    )


DAEMON = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]],"
    " start_new_session=True)\n"
)


def test_idle_timeout_kills_the_child_and_its_escaped_daemon(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    launch = _launch(tmp_path, DAEMON + "print('hello', flush=True)\ntime.sleep(300)\n", marker)
    done = supervise(
        launch, SupervisionLimits(timeout_s=60, idle_timeout_s=1.0), PlainTranslator(ListSink())
    )
    assert done.ending is Ending.IDLE_TIMEOUT and done.silent_s >= 1.0
    assert done.duration_s < 10 and done.killed >= 1
    assert leftovers(marker) == []


def test_output_keeps_an_idle_child_alive_until_the_wall_clock(tmp_path: Path) -> None:
    program = "import time\nwhile True:\n    print('.', flush=True)\n    time.sleep(0.2)\n"
    done = supervise(
        _launch(tmp_path, program),
        SupervisionLimits(timeout_s=1.5, idle_timeout_s=1.0),
        PlainTranslator(ListSink()),
    )
    assert done.ending is Ending.TIMEOUT and 1.5 <= done.duration_s < 8
    assert done.output_bytes > 0


def test_a_known_failure_text_on_stderr_ends_it_at_once(tmp_path: Path) -> None:
    program = (
        "import sys, time\nsys.stderr.write('Error: Missing environment variable: `KEY`\\n')\n"
        "sys.stderr.flush()\ntime.sleep(300)\n"
    )
    translator = ClaudeTranslator(ListSink())  # JSON CLIs: stderr is an error channel
    done = supervise(_launch(tmp_path, program), SupervisionLimits(60, 60), translator)
    assert done.ending is Ending.BLOCKED and done.duration_s < 10
    assert done.blocker is not None and done.blocker.kind.value == "authentication_required"


def test_a_tool_output_mentioning_a_failure_text_does_not_block(tmp_path: Path) -> None:
    line = (
        '{"type":"user","message":{"content":[{"type":"tool_result","content":'
        '"README: if you see invalid api key, export it"}]}}'
    )
    result = '{"type":"result","subtype":"success","is_error":false,"result":"ok"}'
    program = f"print({line!r})\nprint({result!r})\n"
    sink = ListSink()
    translator = ClaudeTranslator(sink)
    done = supervise(_launch(tmp_path, program), SupervisionLimits(60, 60), translator)
    assert done.ending is Ending.EXITED and done.exit_code == 0
    assert translator.state.final_seen and translator.state.final_ok
    assert [k for k, _ in sink.events if k is EventKind.TOOL_RESULT]


def test_a_stop_request_ends_it(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    stop_file = tmp_path / "stop"
    launch = _launch(tmp_path, DAEMON + "time.sleep(300)\n", marker)
    started = time.monotonic()

    def stop_requested() -> bool:
        if time.monotonic() - started > 0.5:
            stop_file.touch()
        return stop_file.exists()

    done = supervise(
        launch,
        SupervisionLimits(60, 60),
        PlainTranslator(ListSink()),
        stop_requested=stop_requested,
    )
    assert done.ending is Ending.STOPPED and done.duration_s < 10
    assert leftovers(marker) == []


def test_a_flood_of_output_hits_the_cap(tmp_path: Path) -> None:
    # bounded (16 MiB, then silence) so a slow check can never fill the disk
    program = (
        "import sys, time\nfor _ in range(256):\n    sys.stdout.write('x' * 65536 + '\\n')\n"
        "sys.stdout.flush()\ntime.sleep(300)\n"
    )
    done = supervise(
        _launch(tmp_path, program),
        SupervisionLimits(timeout_s=60, idle_timeout_s=60, max_output_bytes=2 * 1024 * 1024),
        PlainTranslator(ListSink()),
    )
    assert done.ending is Ending.OUTPUT_LIMIT


def test_a_program_that_cannot_start_is_reported_not_raised(tmp_path: Path) -> None:
    launch = SupervisedCommand(
        argv=(str(tmp_path / "missing-cli"),),
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        stdout_path=tmp_path / "out.log",
        stderr_path=tmp_path / "err.log",
    )
    done = supervise(launch, SupervisionLimits(60, 60), PlainTranslator(ListSink()))
    assert done.ending is Ending.BLOCKED
    assert done.blocker is not None and done.blocker.kind.value == "not_installed"


def test_exit_127_from_a_wrapper_is_not_installed(tmp_path: Path) -> None:
    launch = SupervisedCommand(
        argv=("/bin/sh", "-c", "no-such-agent-cli --go"),
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        stdout_path=tmp_path / "out.log",
        stderr_path=tmp_path / "err.log",
    )
    done = supervise(launch, SupervisionLimits(60, 60), PlainTranslator(ListSink()))
    assert done.ending is Ending.BLOCKED and done.exit_code == 127

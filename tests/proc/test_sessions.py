"""A command's process group, and its session: with no terminal the runner gives it a process
group of its own in the runner's session (a session of its own is as safe there, and costs
the command's wall time: the kernel groups each session for the scheduler); with a terminal,
a session of its own, so the command cannot read what the user types."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PY = sys.executable
# the command reports its pid, process group and session, then tries the terminal
PROBE = 'echo "$$ $(ps -o pgid= -p $$) $(ps -o sid= -p $$)"; read line </dev/tty; echo "got:$line"'
RUN_PROBE = textwrap.dedent(
    f"""
    import json, os, sys
    from code_runner import proc
    result = proc.run(
        ["sh", "-c", {PROBE!r}], cwd="/", env={{"PATH": os.environ["PATH"]}}, timeout_s=30
    )
    ids, got = result.stdout.splitlines()
    typed = sys.stdin.readline() if os.isatty(0) else ""
    print("RESULT " + json.dumps(
        {{"ids": ids.split(), "got": got, "typed": typed.strip(), "sid": os.getsid(0)}}
    ), flush=True)
    """
)


def test_without_a_terminal_a_command_gets_a_group_of_its_own_in_the_runners_session(
    tmp_path: Path,
) -> None:
    done = subprocess.run(  # a runner of its own session: no terminal
        [PY, "-c", RUN_PROBE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.split("RESULT ", 1)[1])
    pid, pgid, sid = (int(n) for n in found["ids"])
    assert pgid == pid, "the command is not the leader of a process group of its own"
    assert sid == found["sid"] != pid, "the command made a session of its own"
    assert found["got"] == "got:", "the command read a terminal"


def test_with_a_terminal_a_command_gets_a_session_of_its_own_and_cannot_read_it() -> None:
    child, terminal = pty.fork()  # the runner, with a terminal of its own
    if child == 0:  # pragma: no cover - the forked runner
        os.execv(PY, [PY, "-c", RUN_PROBE])
    os.write(terminal, b"typed-by-the-user\n")
    out = b""
    deadline = time.monotonic() + 60
    while b"RESULT " not in out or not out.endswith(b"\n"):
        assert time.monotonic() < deadline, out
        try:
            chunk = os.read(terminal, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(child, 0)
    os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 0, out
    found = json.loads(out.split(b"RESULT ", 1)[1].splitlines()[0])
    pid, pgid, sid = (int(n) for n in found["ids"])
    assert pid == pgid == sid, "the command has no session of its own"
    assert found["got"] == "got:", "the command read the user's terminal"
    assert found["typed"] == "typed-by-the-user", "what the user typed was taken from them"

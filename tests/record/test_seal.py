"""The record key is made once, by whichever run comes first, and never seen half-written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SLOW_MAKER = """
import os, pathlib, sys, time
from code_runner.record import seal
write = os.write
def slow_write(fd, data):
    pathlib.Path(sys.argv[1]).touch()  # the key file is made and still empty
    time.sleep(1.0)  # descheduled between making the key file and filling it
    return write(fd, data)
os.write = slow_write
seal.stream("t", "events.jsonl")
os.write = write
print(seal.mac("t", "x", b"same key?"))
"""
PROMPT_RUN = """
from code_runner.record import seal
print(seal.mac("t", "x", b"same key?"))
"""


def test_a_run_starting_while_another_makes_the_key_never_reads_it_half_written(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "CODE_RUNNER_STATE_DIR": str(tmp_path / "state")}
    inside = tmp_path / "inside-the-write"
    slow = subprocess.Popen(
        [sys.executable, "-c", SLOW_MAKER, str(inside)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60  # a busy machine may take long to start it
    while not inside.exists() and slow.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inside.exists(), slow.communicate()  # the slow one is inside its write now
    prompt = subprocess.run(
        [sys.executable, "-c", PROMPT_RUN], env=env, capture_output=True, text=True, check=False
    )
    out, err = slow.communicate(timeout=30)
    assert prompt.returncode == 0, prompt.stderr  # was: "the record key ... is not a 32-byte file"
    assert slow.returncode == 0, err.decode()
    assert prompt.stdout == out.decode()  # one key for both
    key = tmp_path / "state" / "record.key"
    assert sorted(p.name for p in key.parent.iterdir()) == [key.name]  # no draft left
    assert key.stat().st_size == 32 and key.stat().st_mode & 0o777 == 0o600

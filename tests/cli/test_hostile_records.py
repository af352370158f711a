"""A finished run's record tampered with by hand, met through the real commands: a file
replaced by a FIFO or a directory, a status left non-terminal by a killed runner.

Each command ends at once with a message and a non-zero exit (or skips the run, for
`summarize`), never waits forever and never shows a traceback. One real run is shared; each
test edits its own copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from code_runner import dirs
from code_runner.cli.boundary import run_cli as invoke
from code_runner.cli.main import cli
from tests.helpers.tasks import FIXED_BOTH, PY, calc_repo, run_cli, write, write_task

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(a passed run's output dir, the state dir that sealed it)."""
    root = tmp_path_factory.mktemp("finished")
    state = root / "state"
    task = write_task(
        root,
        calc_repo(root),
        [[write("calc.py", FIXED_BOTH)]],
        command="grep -q 'a [*] b' calc.py",
    )
    env = {**os.environ, "CODE_RUNNER_STATE_DIR": str(state)}
    ran = subprocess.run(
        [PY, "-m", "code_runner", "run", str(task)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 0, ran.stderr
    yield root / "out", state


@pytest.fixture
def record(finished: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the finished record, readable with its seal key."""
    out, state = finished
    monkeypatch.setenv("CODE_RUNNER_STATE_DIR", str(state))
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    return copy


def _replace(path: Path, kind: str) -> None:
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def _said(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = invoke(cli, list(args))
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text and "internal error" not in text, text
    return code, text


def test_record_files_replaced_by_a_fifo_or_a_directory(
    record: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Used to: a traceback (a directory) or a command blocked forever (a FIFO)."""
    _replace(record / "fix-calc.result.json", "directory")
    for command in ("result", "reject"):
        code, text = _said(capsys, command, str(record))
        assert code == 5 and "fix-calc.result.json is not a regular file" in text, text
    _replace(record / "fix-calc.result.json", "fifo")
    code, text = _said(capsys, "summarize", str(record))
    assert code == 0 and "no runs under" in text, text
    _replace(record / "fix-calc.status.json", "fifo")
    code, text = _said(capsys, "status", str(record))
    assert code == 5 and "fix-calc.status.json is not a regular file (a FIFO)" in text, text
    _replace(record / "fix-calc.events.jsonl", "fifo")
    code, text = _said(capsys, "watch", str(record))
    assert code == 5 and "fix-calc.events.jsonl is not a regular file (a FIFO)" in text, text


def test_watch_ends_when_no_process_writes_an_unfinished_record(
    record: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A runner killed mid-run leaves a non-terminal status; watch used to wait forever."""
    status_path = record / "fix-calc.status.json"
    status = json.loads(status_path.read_text())
    status.update(state="agent_working", terminal=False, pid=2**22 + 1)
    status_path.write_text(json.dumps(status))
    ran = run_cli("watch", str(record), "--interval", "0.1", timeout=20)
    assert ran.returncode == 5, ran.stderr
    assert "no process is writing its record" in ran.stderr
    assert "code-runner gc" in ran.stderr and "Traceback" not in ran.stderr


def test_result_of_another_record_file_is_a_usage_error(
    record: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Used to: exit 5 and "has no valid seal", as if the record had been tampered with."""
    code, text = _said(capsys, "result", str(record / "fix-calc.patch"))
    assert code == 2 and "is not a run's result file" in text and "seal" not in text, text


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_plan_store_that_is_not_a_file_is_named_so(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Used to: "has other hard links" (a directory) or "disk I/O error" (a FIFO)."""
    store = dirs.state_dir() / "plans" / "plans.sqlite"
    store.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(store)
    else:
        store.mkdir()
    code, text = _said(capsys, "plan", "list")
    assert code == 5 and "plans.sqlite is not a regular file" in text, text
    assert "move it away" in text


def test_apply_after_the_source_moved_says_how_to_land_the_patch(
    record: Path, finished: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Used to: "set `cwd` in the task spec", which a finished run's record cannot take."""
    source = finished[0].parent / "source"
    moved = source.with_name("source-moved")
    source.rename(moved)
    try:
        code, text = _said(capsys, "apply", str(record), "--check")
    finally:
        moved.rename(source)
    assert code == 3 and f"the run's source repo {source} cannot be used" in text, text
    assert f"restore the repository at {source}" in text and "git apply" in text
    assert "task spec" not in text

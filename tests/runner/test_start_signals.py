"""A SIGTERM that lands while a run is starting (its record being opened and its request
written) ends the run as interrupted, with a result and no workspace, as one that lands in
the rounds does; never a death by signal that leaves a record without a result."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from code_runner import proc
from tests.helpers.tasks import FIXED_BOTH, calc_repo, write, write_task

pytestmark = pytest.mark.integration

# A real run whose own listener sends SIGTERM to the runner at the first event it sees
# (`run_started`, written with the request): a signal at a known step of the start-up,
# however slow or busy the machine is.
SIGNAL_AT_START = """
import json, os, signal, sys
from pathlib import Path
from code_runner import runner
from code_runner.errors import Interrupted
from code_runner.events import EventKind
from code_runner.task import load_spec

def on_event(kind, event):
    if kind is EventKind.RUN_STARTED:
        os.kill(os.getpid(), signal.SIGTERM)

spec_path = Path(sys.argv[1])
pre = runner.preflight(load_spec(spec_path), base_dir=spec_path.parent)
try:
    result = runner.run_task(pre, listeners=[on_event])
except Interrupted as exc:
    print(json.dumps({"raised": exc.message}))
    sys.exit(exc.exit_code)
print(json.dumps({"status": result.status.value, "reason": result.reason.value}))
"""


def _no_workspaces() -> bool:
    from code_runner import dirs

    root = dirs.workspaces_dir()
    return not root.exists() or not any(root.iterdir())


def test_a_sigterm_as_the_run_starts_ends_it_as_interrupted(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]], sandbox="off")
    script = tmp_path / "signal_at_start.py"
    script.write_text(SIGNAL_AT_START)
    ran = subprocess.run(
        [sys.executable, str(script), str(spec)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert ran.returncode == 0, (ran.returncode, ran.stderr)  # not -15: the runner handled it
    assert json.loads(ran.stdout) == {"status": "interrupted", "reason": "interrupted"}
    result = json.loads((tmp_path / "out/fix-calc.result.json").read_text())
    assert (result["status"], result["worktree_removed"]) == ("interrupted", True)
    events = (tmp_path / "out/fix-calc.events.jsonl").read_text().splitlines()
    kinds = [json.loads(line)["kind"] for line in events]
    assert kinds[0] == "run_started" and "signal_received" in kinds
    assert kinds[-1] == "run_finished" and "workspace_created" not in kinds
    assert _no_workspaces()


def test_a_handler_already_in_place_is_kept() -> None:
    """Inside a plan, whose handler holds the signals, a run installs none of its own; a
    handler someone else left (a library's: Ray's driver installs one) is no reason to."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert signal.SIGTERM in proc.unhandled_signals()  # the default action: death
        signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
        assert signal.SIGTERM in proc.unhandled_signals()  # not code-runner's
        with proc.signals_as_interrupt(RuntimeError, signals=[signal.SIGTERM]):
            assert signal.SIGTERM not in proc.unhandled_signals()
            with proc.signals_as_interrupt(RuntimeError):
                assert proc.unhandled_signals() == ()
        assert signal.SIGTERM in proc.unhandled_signals()
    finally:
        signal.signal(signal.SIGTERM, previous)

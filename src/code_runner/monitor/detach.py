"""`exec --detach`: the monitor runs in the background, in a session of its own.

The confirmed spec is written into the run dir (`detach.json`) and a background
`code-runner exec --yes --spec detach.json` takes it from there; its own output goes to
`monitor.log` in the run dir. No terminal signal reaches it, and its watchdog holds the
timeout as for any run. `start_detached` returns once the run's record exists, so `status`,
`watch` and `result` on the printed run dir work at once.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from code_runner import files, proc
from code_runner.errors import EnvironmentProblem
from code_runner.monitor.detect import Detection
from code_runner.monitor.record import DETACHED_LOG, DETACHED_SPEC
from code_runner.monitor.spec import ExperimentSpec

STARTUP_TIMEOUT_S = 30.0  # the background monitor's start, up to its first status.json


def start_detached(spec: ExperimentSpec, detection: Detection, run_dir: Path) -> Path:
    """Start the run in the background; its run dir (absolute)."""
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    options = spec.model_dump(mode="json", exclude={"run_dir"})
    options["type"] = (spec.type or detection.type).value
    spec_path = run_dir / DETACHED_SPEC
    files.atomic_write_json(spec_path, options)
    argv = [sys.executable, "-m", "code_runner.cli.exec_cmd", "--yes", "--spec", str(spec_path)]
    argv += ["--run-dir", str(run_dir)]
    log = run_dir / DETACHED_LOG
    child = proc.spawn(argv, cwd=spec.cwd, env=os.environ, stdout_path=log, stderr_path=log)
    _wait_for_the_record(child, run_dir / "status.json", log)
    return run_dir


def _wait_for_the_record(child: proc.Process, status: Path, log: Path) -> None:
    """Until the background monitor has written its first status (or clearly failed)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not status.exists():
        code = child.poll()
        if code is not None and not status.exists():
            raise EnvironmentProblem(
                f"the background monitor ended (exit {code}) before it started the run.",
                fix=f"read {log} for why, then run the same command without --detach.",
            )
        if time.monotonic() > deadline:
            raise EnvironmentProblem(
                f"the background monitor did not start the run within {STARTUP_TIMEOUT_S:g} s.",
                fix=f"read {log}; the machine may be overloaded.",
            )
        time.sleep(0.02)

"""`exec --detach`: the monitor runs in the background, in a session of its own.

The confirmed spec is written into the run dir (`detach.json`) and a background
`code-runner exec --yes --spec detach.json` takes it from there; its own output goes to
`monitor.log` in the run dir. No terminal signal reaches it, and its watchdog holds the
timeout as for any run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from code_runner import files, proc
from code_runner.monitor.detect import Detection
from code_runner.monitor.record import DETACHED_LOG, DETACHED_SPEC
from code_runner.monitor.spec import ExperimentSpec


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
    proc.spawn(argv, cwd=spec.cwd, env=os.environ, stdout_path=log, stderr_path=log)
    return run_dir

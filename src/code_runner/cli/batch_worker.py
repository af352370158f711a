"""The resident batch item process: `python -m code_runner.cli.batch_worker SOCKET [LABEL]`.

The batch layer's loop (`batch.child.serve`) with a sweep cell run in this process as
`code-runner exec --yes` runs it, through the experiment monitor, which only this layer may
use. A slot starts this process once (`batch.slots`), so the monitor's imports are paid once
per slot, not once per cell. LABEL only names the batch in a process list.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from code_runner import monitor, proc
from code_runner.batch.child import INTERRUPTED_EXIT, serve
from code_runner.batch.items import Item
from code_runner.cli.exec_cmd import _git_state as git_state


def exec_options(item: Item, try_dir: Path) -> dict[str, Any]:
    """The cell as `code-runner exec` options: its command, cwd, run dir and checks."""
    spec = item.spec
    options: dict[str, Any] = {
        "command": tuple(str(word) for word in spec["argv"]),
        "cwd": str(Path(str(spec["cwd"])).resolve()),
        "run_dir": str(try_dir / "run"),
    }
    for option in ("timeout", "type", "grace"):
        if spec.get(option) is not None:
            options[option] = str(spec[option])
    for option in ("success", "expect"):
        values = spec.get(option) or []
        options[option] = tuple(str(v) for v in ([values] if isinstance(values, str) else values))
    return options


def run_exec(item: Item, try_dir: Path) -> int:
    """The cell as `code-runner exec --yes` runs it, in this process (its imports are paid
    once per resident, not once per cell); the exit code exec would have."""
    spec = monitor.build_spec({}, exec_options(item, try_dir), source=f"item {item.item_id}")
    monitor.check_launchable(spec.argv, spec.cwd, os.environ)
    run_dir = try_dir / "run"
    monitor.check_run_dir(run_dir)
    detection = (
        monitor.Detection(spec.type, ("given",), False, ())
        if spec.type
        else monitor.detect_type(spec.argv, spec.cwd)
    )
    ui = monitor.PlainUI()
    ui.show_plan(spec, detection, run_dir)
    record = monitor.ExperimentRecord(run_dir)
    provenance = {"git": git_state(spec.cwd, run_dir)}  # as `exec` records it
    result = monitor.Experiment(spec, detection, record, ui, provenance=provenance).run()
    ui.finished(result, run_dir)
    if result.state is monitor.ExperimentState.TIMEOUT:
        return proc.TIMEOUT_EXIT_CODE
    if result.interrupted:
        return INTERRUPTED_EXIT
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], run_exec))

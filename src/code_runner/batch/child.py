"""The process that runs one try of a batch item: `python -m code_runner.batch.child ITEM DIR`.

A task runs here, in process, as `code-runner run` would run it, with its record in
`DIR/run`; a sweep cell runs `code-runner exec` under this process. The child watches the
process that started it: when that worker dies (killed, force-cancelled, its driver gone),
the child interrupts itself, so the run ends as any interrupted run does and leaves nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from code_runner import proc
from code_runner.batch.items import Item, ItemKind
from code_runner.errors import CodeRunnerError, Interrupted

WATCH_S = 0.2


def watch_parent(parent: int) -> None:
    """SIGTERM ourselves once our parent is gone (we were re-parented)."""

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=loop, name="parent-watch", daemon=True).start()


def run_task(item: Item, try_dir: Path) -> int:
    # imported here: a sweep cell's child never pays for the runner
    from code_runner import runner
    from code_runner.task import validate_spec_data

    data = {**item.spec, "output_dir": str(try_dir / "run")}
    spec = validate_spec_data(data, base_dir=Path(item.base_dir), source=item.item_id)
    pre = runner.preflight(spec, base_dir=Path(item.base_dir))
    run_id = runner.new_run_id(spec.task_id)
    (try_dir / "run_id").write_text(run_id)
    result = runner.run_task(pre, run_id=run_id)
    return 0 if result.passed else 1


def exec_argv(item: Item, try_dir: Path) -> list[str]:
    spec = item.spec
    argv = [sys.executable, "-m", "code_runner", "exec", "--yes"]
    argv += ["--run-dir", str(try_dir / "run"), "--cwd", str(spec["cwd"])]
    for option in ("timeout", "type", "grace"):
        if spec.get(option) is not None:
            argv += [f"--{option}", str(spec[option])]
    for option in ("success", "expect"):
        values = spec.get(option) or []
        for value in [values] if isinstance(values, str) else values:
            argv += [f"--{option}", str(value)]
    return [*argv, "--", *[str(word) for word in spec["argv"]]]


def _interrupted(name: str) -> Interrupted:
    return Interrupted(f"the batch item was stopped ({name})")


def run_exec(item: Item, try_dir: Path) -> int:
    with proc.signals_as_interrupt(_interrupted):
        process = proc.spawn(
            exec_argv(item, try_dir),
            cwd=str(item.spec["cwd"]),
            env=os.environ,
            stdout_path=try_dir / "exec.out",
            stderr_path=try_dir / "exec.err",
        )
        return process.wait().exit_code


def main(argv: list[str]) -> int:
    watch_parent(os.getppid())
    item = Item.from_dict(json.loads(Path(argv[0]).read_text()))
    try_dir = Path(argv[1])
    try:
        if item.kind is ItemKind.EXEC:
            return run_exec(item, try_dir)
        return run_task(item, try_dir)
    except CodeRunnerError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

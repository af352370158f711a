"""`--notify CMD`: tell the user's own command about each alert and the end of the run.

The command is a shell line, run with the news in its environment (a webhook is just
`curl` in it): `CODE_RUNNER_NOTIFY_EVENT` (`alert` or `finished`), `CODE_RUNNER_NOTIFY_TEXT`
(one line for people), `CODE_RUNNER_ALERT` (the alert kind), `CODE_RUNNER_STATE` (the final
state), `CODE_RUNNER_RUN_DIR`. It is bounded (10 s, whole tree killed after) and its outcome
is one event in the record; a failing notifier never affects the experiment.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from code_runner import proc
from code_runner.monitor.record import ExperimentRecord, MonitorEvent

NOTIFY_TIMEOUT_S = 10.0


def notify(
    command: str | None,
    record: ExperimentRecord,
    env: Mapping[str, str],
    *,
    event: str,
    text: str,
    **fields: str,
) -> None:
    """Run `command` (if any) with the news in its environment; record how it went."""
    if not command:
        return
    news = {
        "CODE_RUNNER_NOTIFY_EVENT": event,
        "CODE_RUNNER_NOTIFY_TEXT": text,
        "CODE_RUNNER_RUN_DIR": str(Path(record.run_dir).resolve()),
        **{f"CODE_RUNNER_{k.upper()}": v for k, v in fields.items()},
    }
    done = proc.run(
        proc.shell_argv(command),
        cwd=record.run_dir,
        env={**env, **news},
        timeout_s=NOTIFY_TIMEOUT_S,
        grace_s=1.0,
    )
    record.emit(
        MonitorEvent.NOTIFIED,
        event=event,
        exit_code=done.exit_code,
        timed_out=done.timed_out,
    )

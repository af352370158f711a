"""How runs look on a terminal, in plain logs, and as JSON. No logic lives here."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.status import Status

from code_runner.events import EventKind


def console(stderr: bool = False) -> Console:
    """A console that honours NO_COLOR and never emits colour into a pipe."""
    return Console(
        stderr=stderr,
        no_color=bool(os.environ.get("NO_COLOR")),
        highlight=False,
        soft_wrap=True,
    )


def is_terminal() -> bool:
    return sys.stderr.isatty()


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


class ProgressPrinter:
    """Turns run events into one line per meaningful step (round, audit, DoD, result).

    On a terminal it also keeps a live status line (state, round, step, elapsed) under the
    log; in a pipe it prints plain lines only.
    """

    def __init__(self, out: Console, *, live: bool | None = None) -> None:
        self.out = out
        self.live = is_terminal() if live is None else live
        self._status: Status | None = None

    def __call__(self, kind: EventKind, event: dict[str, Any]) -> None:
        line = self.describe(kind, event)
        if line:
            self.out.print(line)
        if not self.live:
            return
        if kind is EventKind.STATE_CHANGED:
            text = f"{event['to_state']}: {event.get('step') or ''}"
            if self._status is None:
                self._status = self.out.status(text)
                self._status.start()
            else:
                self._status.update(text)
        if kind is EventKind.RUN_FINISHED and self._status is not None:
            self._status.stop()
            self._status = None

    @staticmethod
    def describe(kind: EventKind, e: dict[str, Any]) -> str | None:  # noqa: C901 - one line per event kind: a flat dispatch
        r = e.get("round", 0)
        if kind is EventKind.WORKSPACE_CREATED:
            return f"[dim]workspace[/] {e['path']} ({e.get('workspace_kind', 'clone')})"
        if kind is EventKind.DOD_FINISHED:
            mark = "[green]pass[/]" if e["passed"] else "[red]fail[/]"
            return f"{e['label']}: DoD {mark} — {e['reason']}"
        if kind is EventKind.AGENT_STARTED:
            return f"round {r}: agent ({e['backend']}) working"
        if kind is EventKind.TOOL_RESULT:
            status = "ok" if e.get("ok") else f"[yellow]{e.get('error')}[/]"
            return f"  [dim]tool[/] {e.get('name')} {status}"
        if kind is EventKind.MODEL_TURN:
            calls = ", ".join(e.get("tool_calls") or []) or "no tool call"
            tokens = (e.get("usage") or {}).get("total_tokens")
            used = f", {tokens} tokens" if tokens is not None else ""
            return f"  [dim]model turn {e.get('turn')}[/]: {calls} ({e.get('duration_s')} s{used})"
        if kind is EventKind.CHANGES_DROPPED:
            return f"round {r}: [yellow]dropped[/] {', '.join(e['paths'])}"
        if kind is EventKind.BEST_KEPT:
            return f"round {r}: kept as best (score {e['score']:.2f})"
        if kind is EventKind.BEST_RESTORED:
            return f"round {r}: scored lower; restored round {e['best_round']}"
        if kind is EventKind.PATCH_EXPORTED:
            files = ", ".join(e["files"]) or "no files"
            return f"patch: {e['bytes']} bytes ({files})"
        if kind is EventKind.SOURCE_CHECKED and not e["unchanged"]:
            return "[red]source repo changed:[/] " + "; ".join(e["differences"])
        if kind is EventKind.SIGNAL_RECEIVED:
            return f"[yellow]{e['signal']} received: cleaning up[/]"
        return ProgressPrinter.describe_apply(kind, e) or ProgressPrinter.describe_watch(kind, e)

    @staticmethod
    def describe_watch(kind: EventKind, e: dict[str, Any]) -> str | None:
        """What the live watch of an agent CLI's round saw (`agents.cli_agents.watch`)."""
        r = e.get("round", 0)
        if kind is EventKind.SCOPE_EXPANSION:
            then = "stopping the round" if e.get("action") == "stop" else "the audit will drop it"
            return (
                f"round {r}: [red]scope expansion[/]: wrote outside the owned paths: "
                f"{', '.join(e.get('paths') or [])} ({then})"
            )
        if kind is EventKind.REPEATING_FAILURE:
            return (
                f"round {r}: [yellow]repeating failure[/]: {e.get('command')!s:.120} failed "
                f"{e.get('times')} times"
            )
        if kind is EventKind.NO_PROGRESS:
            return f"round {r}: [yellow]no progress[/] (advisory): {e.get('message')}"
        if kind is EventKind.SKILL_CHANGED:
            return f"round {r}: [red]skill changed[/]: {', '.join(e.get('files') or [])}"
        return None

    @staticmethod
    def describe_apply(kind: EventKind, e: dict[str, Any]) -> str | None:
        """The apply step (complete-task mode): one line per change to the source."""
        if kind is EventKind.APPLY_REFUSED:
            return f"[red]apply refused[/] (source untouched): {e['message']}"
        if kind is EventKind.SOURCE_PATCH_APPLIED:
            return f"source: applied {', '.join(e['paths'])}; running the DoD there"
        if kind is EventKind.SOURCE_ROLLED_BACK:
            return f"[yellow]source: rolled back[/] {', '.join(e['paths'])}"
        if kind is EventKind.SOURCE_COMMITTED:
            return f"[green]source: committed[/] {e['commit']} ({', '.join(e['paths'])})"
        if kind is EventKind.APPLY_REPAIRED:
            return f"[yellow]repaired an interrupted apply:[/] {e['action']}"
        return None

"""How runs look on a terminal, in plain logs, and as JSON. No logic lives here."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console

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
    """Turns run events into one line per meaningful step (round, audit, DoD, result)."""

    def __init__(self, out: Console) -> None:
        self.out = out

    def __call__(self, kind: EventKind, event: dict[str, Any]) -> None:
        line = self.describe(kind, event)
        if line:
            self.out.print(line)

    @staticmethod
    def describe(kind: EventKind, e: dict[str, Any]) -> str | None:
        r = e.get("round", 0)
        if kind is EventKind.WORKSPACE_CREATED:
            return f"[dim]workspace[/] {e['path']}"
        if kind is EventKind.DOD_FINISHED:
            mark = "[green]pass[/]" if e["passed"] else "[red]fail[/]"
            return f"{e['label']}: DoD {mark} — {e['reason']}"
        if kind is EventKind.AGENT_STARTED:
            return f"round {r}: agent ({e['backend']}) working"
        if kind is EventKind.TOOL_RESULT:
            status = "ok" if e.get("ok") else f"[yellow]{e.get('error')}[/]"
            return f"  [dim]tool[/] {e.get('name')} {status}"
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
        return None

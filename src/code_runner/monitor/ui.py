"""How the monitor talks to a person: a terminal (ask, tail, answer alerts) or none.

The monitor loop never blocks on a person: on a terminal it selects on the input fd together
with the child's pidfd, so a pending question never delays a check or the hard timeout.
Without a terminal nothing is asked; alerts go to stderr (and always to the record).
Colour follows rich's rules, and NO_COLOR turns it off.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Protocol, TextIO

from rich.console import Console
from rich.text import Text

from code_runner.monitor.alerts import Alert, Option
from code_runner.monitor.detect import Detection
from code_runner.monitor.report import headline
from code_runner.monitor.result import ExperimentResult
from code_runner.monitor.spec import ExperimentSpec

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|\x1b\[[0-9;?]*[A-Za-z]")


def clock(seconds: float) -> str:
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{sec:02d}"


def make_console(file: TextIO) -> Console:
    """A console that honours NO_COLOR explicitly (any non-empty value, per no-color.org)."""
    return Console(
        file=file,
        no_color=bool(os.environ.get("NO_COLOR")),
        highlight=False,
        soft_wrap=True,
    )


class MonitorUI(Protocol):
    interactive: bool
    live: bool

    def input_fd(self) -> int | None: ...
    def show_plan(self, spec: ExperimentSpec, detection: Detection, run_dir: Path) -> None: ...
    def ask(self, question: str) -> str: ...
    def tail(self, stream: str, lines: list[str], transient: str | None) -> None: ...
    def alert(self, alert: Alert, options: tuple[Option, ...], repeated: bool) -> None: ...
    def read_lines(self) -> list[str]: ...
    def say(self, text: str) -> None: ...
    def finished(self, result: ExperimentResult, run_dir: Path) -> None: ...


class PlainUI:
    """No terminal: nothing is asked, no live tail, alerts to stderr in one paragraph."""

    interactive = False
    live = False

    def __init__(self, err: Console | None = None, out: Console | None = None) -> None:
        self.err = err or make_console(sys.stderr)
        self.out = out or make_console(sys.stdout)

    def input_fd(self) -> int | None:
        return None

    def show_plan(self, spec: ExperimentSpec, detection: Detection, run_dir: Path) -> None:
        self.err.print(_plan_text(spec, detection, run_dir))

    def ask(self, question: str) -> str:
        return ""

    def tail(self, stream: str, lines: list[str], transient: str | None) -> None:
        return None

    def alert(self, alert: Alert, options: tuple[Option, ...], repeated: bool) -> None:
        again = " (repeated)" if repeated else ""
        self.err.print(
            Text(
                f"[{alert.kind.value}]{again} detected at check #{alert.check_no} "
                f"({clock(alert.elapsed_s)}): {alert.detail} Advisory only: the command keeps "
                "running.",
                style="bold yellow",
            )
        )

    def read_lines(self) -> list[str]:
        return []

    def say(self, text: str) -> None:
        self.err.print(Text(text))

    def finished(self, result: ExperimentResult, run_dir: Path) -> None:
        style = "bold green" if result.success else "bold red"
        self.out.print(Text(headline(result), style=style))
        self.out.print(Text(f"record: {run_dir}  report: {run_dir / 'experiment_result.md'}"))


class TerminalUI(PlainUI):
    """A person at a terminal: confirmation, live tail, alert options, typed answers."""

    interactive = True
    live = True

    def __init__(self, fd: int, err: Console | None = None, out: Console | None = None) -> None:
        super().__init__(err, out)
        self.fd = fd
        self._buffer = b""
        self._closed = False
        self._transient = False

    def input_fd(self) -> int | None:
        return None if self._closed else self.fd

    def ask(self, question: str) -> str:
        """Blocking question (before launch only): prompt, then one line."""
        self.err.print(Text(question, style="bold"), end=" ")
        self.err.file.flush()
        while b"\n" not in self._buffer and not self._closed:
            chunk = os.read(self.fd, 1024)
            if not chunk:
                self._closed = True
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", errors="replace").strip()

    def tail(self, stream: str, lines: list[str], transient: str | None) -> None:
        """Whole lines scroll; a line being rewritten (progress bar) is redrawn in place."""
        style = "dim" if stream == "stdout" else "dim red"
        if lines:
            self._clear_transient()
        for line in lines:
            self.err.print(Text("│ ", style=style) + Text(_CONTROL.sub("", line)))
        if transient is not None:
            width = max(10, self.err.width - 3)
            self.err.file.write("\r\x1b[2K│ " + _CONTROL.sub("", transient)[:width])
            self.err.file.flush()
            self._transient = True

    def _clear_transient(self) -> None:
        if self._transient:
            self.err.file.write("\r\x1b[2K")
            self._transient = False

    def alert(self, alert: Alert, options: tuple[Option, ...], repeated: bool) -> None:
        self._clear_transient()
        again = " (repeated)" if repeated else ""
        self.err.print(
            Text(
                f"\n[{alert.kind.value}]{again} detected at check #{alert.check_no} "
                f"({clock(alert.elapsed_s)})",
                style="bold yellow",
            )
        )
        self.err.print(Text(f"Detail: {alert.detail}"))
        self.err.print(Text("Options:"))
        for option in options:
            self.err.print(Text(f"{option.key}. {option.label}"))
        self.err.print(
            Text("Type a letter and Enter (the command keeps running meanwhile).", style="dim")
        )

    def say(self, text: str) -> None:
        self._clear_transient()
        super().say(text)

    def finished(self, result: ExperimentResult, run_dir: Path) -> None:
        self._clear_transient()
        self.err.file.flush()
        super().finished(result, run_dir)

    def read_lines(self) -> list[str]:
        """Lines typed since the last call; call only when the fd is readable."""
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            self._closed = True
            return []
        self._buffer += chunk
        lines: list[str] = []
        while b"\n" in self._buffer:
            line, _, self._buffer = self._buffer.partition(b"\n")
            lines.append(line.decode("utf-8", errors="replace").strip())
        return lines


def _plan_text(spec: ExperimentSpec, detection: Detection, run_dir: Path) -> Text:
    kind = spec.type.value if spec.type else detection.type.value
    how = (
        "given"
        if spec.type
        else ("auto-detected, uncertain" if detection.uncertain else "auto-detected")
    )
    text = Text()
    text.append("I'm about to run: ", style="bold")
    text.append(spec.display_command)
    text.append(f"\n  in: {spec.cwd}\n  type: {kind} ({how})")
    text.append(f"\n  timeout: {spec.timeout_s:g} s, checks every {spec.interval_s:g} s")
    if spec.expect:
        text.append(f"\n  expected outputs: {', '.join(spec.expect)}")
    if spec.monitor:
        text.append(f"\n  monitored files: {', '.join(spec.monitor)}")
    text.append(f"\n  record: {run_dir}")
    return text


def choose_ui(force_plain: bool = False) -> PlainUI:
    """TerminalUI when stdin and stderr are terminals, else PlainUI."""
    if not force_plain and sys.stdin.isatty() and sys.stderr.isatty():
        return TerminalUI(sys.stdin.fileno())
    return PlainUI()


def silence_terminal() -> None:
    """Point stdin, stdout and stderr at /dev/null: the terminal is gone (SIGHUP), and a
    write to a hung-up terminal fails."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)

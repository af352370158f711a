"""Agent CLIs' JSON event streams, translated into code-runner events.

A translator reads the CLI's stdout one line at a time, emits what matters as events
(tool calls and their results, messages, errors), and keeps the state the round's
outcome is decided from: whether the CLI's final event arrived and said success, the
final text (where the worker's RESULT block is), the last error, and any known failure
text (`blockers`) in its error channels. Unknown event types are counted, not fatal: a
CLI may add events in any release.

- Codex (`codex exec --json`): `thread.started`, `turn.started`, `item.started` /
  `item.completed` (command_execution, file_change, agent_message, reasoning, error, ...),
  `error`, and the final `turn.completed` (success) or `turn.failed`.
- Claude Code (`claude -p --output-format stream-json --verbose`): `system` (init),
  `assistant` (text and tool_use blocks), `user` (tool_result blocks), and the final
  `result` (`is_error`, `subtype`, `result` text).
- Plain text (`command`): no events; the last lines are the final text.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from code_runner.agents.cli_agents.blockers import Blocker, classify
from code_runner.agents.cli_agents.usage import ReportedUsage, add, claude_usage, codex_usage
from code_runner.events import EventKind, EventSink

_PREVIEW_CHARS = 400
_PLAIN_TAIL_LINES = 200


@dataclass
class StreamState:
    """What a CLI has reported so far in one round."""

    final_event: str  # the event that marks a finished run, for messages
    final_seen: bool = False
    final_ok: bool = False
    final_text: str = ""
    error: str | None = None
    turn_limit: bool = False
    blocker: Blocker | None = None
    steps: int = 0  # tool calls and messages
    unknown_events: int = 0
    session: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)  # as the CLI printed it
    reported: ReportedUsage | None = None  # its tokens (and cost), read from `usage`

    def to_dict(self) -> dict[str, Any]:
        return {
            "final_event": self.final_event,
            "final_seen": self.final_seen,
            "final_ok": self.final_ok,
            "error": self.error,
            "turn_limit": self.turn_limit,
            "blocker": self.blocker.to_dict() if self.blocker else None,
            "steps": self.steps,
            "unknown_events": self.unknown_events,
            "session": self.session,
            "usage": self.usage,
        }


class Translator(Protocol):
    state: StreamState

    def stdout_line(self, line: str) -> None: ...

    def stderr_line(self, line: str) -> None: ...

    def finish(self, exit_code: int | None) -> None: ...


def _preview(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.strip()
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 3] + "..."


def _json(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


class _Base:
    def __init__(self, events: EventSink, *, cli: str, final_event: str) -> None:
        self.events = events
        self.cli = cli
        self.state = StreamState(final_event=final_event)

    def stderr_line(self, line: str) -> None:
        self._check(line)

    def finish(self, exit_code: int | None) -> None:
        return None

    def _check(self, text: str) -> None:
        if self.state.blocker is None and text.strip():
            found = classify(text)
            if found is not None:
                self.state.blocker = found

    def _error(self, message: str) -> None:
        self.state.error = message
        self.events.emit(EventKind.CLI_EVENT, cli=self.cli, type="error", message=_preview(message))
        self._check(message)

    def _message(self, text: str) -> None:
        self.state.steps += 1
        self.state.final_text = text
        self.events.emit(EventKind.AGENT_MESSAGE, cli=self.cli, text=_preview(text))


class CodexTranslator(_Base):
    def __init__(self, events: EventSink) -> None:
        super().__init__(events, cli="codex", final_event="turn.completed")

    def stdout_line(self, line: str) -> None:
        data = _json(line)
        if data is None:
            return
        kind = data.get("type")
        if kind == "thread.started":
            self.state.session = str(data.get("thread_id"))
            self.events.emit(
                EventKind.CLI_EVENT, cli=self.cli, type=kind, session=self.state.session
            )
        elif kind == "turn.started":
            self.events.emit(EventKind.CLI_EVENT, cli=self.cli, type=kind)
        elif kind in ("item.started", "item.updated", "item.completed"):
            item = data.get("item")
            if isinstance(item, Mapping):
                self._item(str(kind), item)
        elif kind == "turn.completed":
            self.state.final_seen = True
            self.state.final_ok = True
            usage = data.get("usage")
            self.state.usage = dict(usage) if isinstance(usage, Mapping) else {}
            self.state.reported = add(self.state.reported, codex_usage(usage))
            self.events.emit(EventKind.CLI_EVENT, cli=self.cli, type=kind, usage=self.state.usage)
        elif kind == "turn.failed":
            self.state.final_seen = True
            self.state.final_ok = False
            error = data.get("error")
            message = error.get("message") if isinstance(error, Mapping) else error
            self._error(str(message or "turn failed"))
        elif kind == "error":
            self._error(str(data.get("message") or "error"))
        else:
            self.state.unknown_events += 1

    def _item(self, kind: str, item: Mapping[str, Any]) -> None:
        item_type = str(item.get("type"))
        done = kind == "item.completed"
        if item_type == "agent_message":
            if done:
                self._message(str(item.get("text") or ""))
        elif item_type == "command_execution":
            if kind == "item.started":
                self.events.emit(
                    EventKind.TOOL_CALL,
                    name="codex:command",
                    cli=self.cli,
                    command=_preview(item.get("command")),
                )
            elif done:
                self.state.steps += 1
                code = item.get("exit_code")
                self.events.emit(
                    EventKind.TOOL_RESULT,
                    name="codex:command",
                    cli=self.cli,
                    ok=code == 0,
                    error=None if code == 0 else f"exit {code}",
                    exit_code=code,
                    output=_preview(item.get("aggregated_output") or ""),
                )
        elif item_type == "file_change":
            if done:
                self.state.steps += 1
                changes = item.get("changes")
                listed = changes if isinstance(changes, list) else []
                paths = [str(c.get("path")) for c in listed if isinstance(c, Mapping)]
                self.events.emit(
                    EventKind.TOOL_RESULT,
                    name="codex:file_change",
                    cli=self.cli,
                    ok=item.get("status") != "failed",
                    paths=paths,
                )
        elif item_type == "error":
            # Codex reports warnings as error items too ("model metadata not found"):
            # recorded, and a known failure text among them still blocks.
            message = str(item.get("message") or "")
            self.events.emit(
                EventKind.CLI_EVENT, cli=self.cli, type="warning", message=_preview(message)
            )
            self._check(message)
        elif done:
            self.state.steps += 1
            self.events.emit(
                EventKind.CLI_EVENT, cli=self.cli, type=f"item:{item_type}", item=_preview(item)
            )


class ClaudeTranslator(_Base):
    def __init__(self, events: EventSink) -> None:
        super().__init__(events, cli="claude", final_event="result")

    def stdout_line(self, line: str) -> None:
        data = _json(line)
        if data is None:
            return
        kind = data.get("type")
        if kind == "system":
            if data.get("subtype") == "init":
                self.state.session = str(data.get("session_id"))
                self.events.emit(
                    EventKind.CLI_EVENT,
                    cli=self.cli,
                    type="init",
                    session=self.state.session,
                    model=data.get("model"),
                    tools=data.get("tools"),
                    permission_mode=data.get("permissionMode"),
                )
            else:
                self.events.emit(
                    EventKind.CLI_EVENT, cli=self.cli, type=f"system:{data.get('subtype')}"
                )
        elif kind == "assistant":
            self._assistant(data)
        elif kind == "user":
            self._tool_results(data)
        elif kind == "result":
            self._result(data)
        else:
            self.state.unknown_events += 1

    def _blocks(self, data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        message = data.get("message")
        content = message.get("content") if isinstance(message, Mapping) else None
        return [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []

    def _assistant(self, data: Mapping[str, Any]) -> None:
        texts: list[str] = []
        for block in self._blocks(data):
            if block.get("type") == "text":
                texts.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                self.state.steps += 1
                self.events.emit(
                    EventKind.TOOL_CALL,
                    name=f"claude:{block.get('name')}",
                    cli=self.cli,
                    args=_preview(block.get("input")),
                )
        text = "\n".join(t for t in texts if t)
        if data.get("error"):  # an API error Claude Code turned into a synthetic message
            self._error(f"{data.get('error')}: {text}")
        elif text:
            self._message(text)

    def _tool_results(self, data: Mapping[str, Any]) -> None:
        for block in self._blocks(data):
            if block.get("type") != "tool_result":
                continue
            content = block.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            failed = bool(block.get("is_error"))
            self.events.emit(
                EventKind.TOOL_RESULT,
                name="claude:tool",
                cli=self.cli,
                ok=not failed,
                error="tool error" if failed else None,
                output=_preview(content or ""),
            )

    def _result(self, data: Mapping[str, Any]) -> None:
        self.state.final_seen = True
        subtype = str(data.get("subtype") or "")
        is_error = bool(data.get("is_error")) or subtype != "success"
        self.state.final_ok = not is_error
        text = data.get("result")
        if isinstance(text, str) and text:
            self.state.final_text = text
        usage = data.get("usage")
        self.state.usage = dict(usage) if isinstance(usage, Mapping) else {}
        self.state.reported = claude_usage(data)
        if subtype == "error_max_turns":
            self.state.turn_limit = True
        self.events.emit(
            EventKind.CLI_EVENT,
            cli=self.cli,
            type="result",
            subtype=subtype,
            is_error=is_error,
            turns=data.get("num_turns"),
            cost_usd=data.get("total_cost_usd"),
            api_error_status=data.get("api_error_status"),
        )
        if is_error:
            self._error(str(text or subtype or "the run ended with an error"))


class PlainTranslator(_Base):
    """Any program: every output line may carry a known failure text; the tail of stdout
    is the final text. With `final_event`, a JSON line of that `type` marks completion
    (otherwise a clean exit does)."""

    def __init__(self, events: EventSink, *, final_event: str | None = None) -> None:
        super().__init__(events, cli="command", final_event=final_event or "exit 0")
        self.expected = final_event
        self.tail: deque[str] = deque(maxlen=_PLAIN_TAIL_LINES)

    def stdout_line(self, line: str) -> None:
        self.tail.append(line)
        self._check(line)
        if self.expected is not None:
            data = _json(line)
            if data is not None and data.get("type") == self.expected:
                self.state.final_seen = True
                self.state.final_ok = not data.get("is_error")
                self.events.emit(EventKind.CLI_EVENT, cli=self.cli, type=self.expected)

    def finish(self, exit_code: int | None) -> None:
        self.state.final_text = "\n".join(self.tail)
        if self.state.final_text.strip():
            self.events.emit(
                EventKind.AGENT_MESSAGE, cli=self.cli, text=_preview(self.state.final_text[-2000:])
            )
        if self.expected is None:
            self.state.final_seen = exit_code == 0
            self.state.final_ok = exit_code == 0


__all__ = [
    "ClaudeTranslator",
    "CodexTranslator",
    "PlainTranslator",
    "StreamState",
    "Translator",
]

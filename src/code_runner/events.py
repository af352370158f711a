"""Event kinds: every state change of a run is exactly one event in `events.jsonl`."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class EventKind(StrEnum):
    RUN_STARTED = "run_started"
    PREFLIGHT_PASSED = "preflight_passed"
    WORKSPACE_CREATED = "workspace_created"
    ROUND_STARTED = "round_started"
    AGENT_STARTED = "agent_started"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    MODEL_TURN = "model_turn"  # one model call answered (usage, timing, tool calls)
    AGENT_WARNING = "agent_warning"  # e.g. a price or usage the budget cannot count
    AGENT_FINISHED = "agent_finished"
    # agent CLIs (codex-cli, claude-cli, command): the process and what it reported
    CLI_STARTED = "cli_started"
    CLI_EVENT = "cli_event"  # one translated event of the CLI's own JSON stream
    AGENT_MESSAGE = "agent_message"  # text the agent wrote (a CLI's message, a model's)
    CLI_FINISHED = "cli_finished"
    AGENT_BLOCKED = "agent_blocked"  # a known failure text: a person must decide
    SKILLS_INSTALLED = "skills_installed"  # named skills written read-only for a CLI
    SKILL_CHANGED = "skill_changed"  # a named skill's installed copy differs after a round
    SCOPE_EXPANSION = "scope_expansion"  # a write outside the owned paths, seen live
    REPEATING_FAILURE = "repeating_failure"  # the same failing command again and again
    NO_PROGRESS = "no_progress"  # output flows but the tree has not changed (advisory)
    STOP_REQUESTED = "stop_requested"  # `code-runner stop` asked the run to end
    RESULT_CONTRACT = "result_contract"  # the worker's claimed result against the evidence
    AUDIT = "audit"
    CHANGES_DROPPED = "changes_dropped"
    DOD_STARTED = "dod_started"
    DOD_FINISHED = "dod_finished"
    ROUND_FINISHED = "round_finished"
    BEST_KEPT = "best_kept"
    BEST_RESTORED = "best_restored"
    STATE_CHANGED = "state_changed"
    PATCH_EXPORTED = "patch_exported"
    WORKSPACE_RELEASED = "workspace_released"
    SOURCE_CHECKED = "source_checked"
    SIGNAL_RECEIVED = "signal_received"
    # the apply step (complete-task mode, `code-runner apply`, `reject`, repairs)
    APPLY_STARTED = "apply_started"
    APPLY_REFUSED = "apply_refused"
    APPLY_JOURNALED = "apply_journaled"
    SOURCE_PATCH_APPLIED = "source_patch_applied"
    SOURCE_BYPRODUCTS_MOVED = "source_byproducts_moved"
    SOURCE_ROLLED_BACK = "source_rolled_back"
    SOURCE_COMMITTED = "source_committed"
    APPLY_FINISHED = "apply_finished"
    APPLY_REPAIRED = "apply_repaired"
    RUN_REJECTED = "run_rejected"
    ERROR = "error"
    RUN_FINISHED = "run_finished"


class EventSink(Protocol):
    """Where components report what they did. The run record is the real one."""

    def emit(self, kind: EventKind, /, **data: object) -> None: ...


class NullSink:
    """For callers that do not keep a record (tests of a single tool, `dry-run`)."""

    def emit(self, kind: EventKind, /, **data: object) -> None:
        return None


class ListSink:
    """Collects events in memory; used by tests and by the scripted backend's self-checks."""

    def __init__(self) -> None:
        self.events: list[tuple[EventKind, dict[str, object]]] = []

    def emit(self, kind: EventKind, /, **data: object) -> None:
        self.events.append((kind, dict(data)))

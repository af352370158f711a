"""What happened, in words: one line per run event, for `watch` and `status`.

Each event of `events.jsonl` becomes a sentence a person understands without the JSON:
`round 1: the DoD failed (exit 1) — 1 failed, 3 passed`, `the patch changes calc.py
(371 bytes)`. An event kind this code-runner does not know is still shown, as its name and
its fields in plain words, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from code_runner.record import RunUsage

Event = Mapping[str, Any]
_HIDDEN = frozenset({"seq", "ts", "elapsed_s", "run_id", "kind", "round"})


def _paths(e: Event, key: str = "paths") -> str:
    items = e.get(key) or []
    return ", ".join(str(p) for p in items) if items else "nothing"


def _who(e: Event) -> str:
    r = e.get("round")
    return f"round {r}: " if isinstance(r, int) and r > 0 else ""


def _usage(value: object) -> str:
    if not isinstance(value, Mapping):
        return ""
    try:
        return RunUsage.model_validate(value).describe()
    except ValidationError:
        return ""


def _state(e: Event) -> str:
    step = f" ({e['step']})" if e.get("step") else ""
    return f"state: {e.get('from_state')} -> {e.get('to_state')}{step}"


def _dod_finished(e: Event) -> str:
    verdict = "passed" if e.get("passed") else "failed"
    return f"{e.get('label')}: the DoD {verdict} — {e.get('reason')}"


def _agent_finished(e: Event) -> str:
    turns = e.get("turns")
    said = f"{_who(e)}the agent stopped ({e.get('stop')}) after {turns} turn(s)"
    if e.get("error"):
        said += f": {e['error']}"
    usage = _usage(e.get("usage"))
    return said + (f"; so far {usage}" if usage else "")


def _model_turn(e: Event) -> str:
    calls = ", ".join(e.get("tool_calls") or []) or "no tool call"
    usage = e.get("usage") or {}
    tokens = f", {usage['total_tokens']:,} tokens" if "total_tokens" in usage else ""
    took = f"{e.get('duration_s')} s{tokens}"
    return f"{_who(e)}model turn {e.get('turn')} asked for {calls} ({took})"


def _tool_result(e: Event) -> str:
    if e.get("ok"):
        summary = e.get("summary")
        return f"{_who(e)}tool {e.get('name')} ok" + (f": {summary}" if summary else "")
    return f"{_who(e)}tool {e.get('name')} refused or failed: {e.get('error')}" + (
        f" ({e['summary']})" if e.get("summary") else ""
    )


def _audit(e: Event) -> str:
    allowed = [c.get("path") for c in e.get("allowed") or [] if isinstance(c, Mapping)]
    rejected = [c.get("path") for c in e.get("rejected") or [] if isinstance(c, Mapping)]
    said = f"{_who(e)}audit: {len(allowed)} allowed change(s)"
    if allowed:
        said += f" ({', '.join(str(p) for p in allowed)})"
    if rejected:
        said += f", {len(rejected)} outside the allowlist dropped"
    if e.get("violations"):
        said += f", safety violations: {'; '.join(e['violations'])}"
    return said


def _patch(e: Event) -> str:
    applies = "" if e.get("applies", True) else " (it does NOT apply on a clean base)"
    files = ", ".join(e.get("files") or []) or "no files"
    return f"the patch changes {files} ({e.get('bytes')} bytes){applies}"


def _source_checked(e: Event) -> str:
    if e.get("unchanged"):
        return "the source repo is unchanged"
    return "the source repo CHANGED: " + "; ".join(e.get("differences") or [])


def _apply_finished(e: Event) -> str:
    if e.get("commit"):
        return f"apply: committed {e['commit']}"
    if e.get("rolled_back"):
        return f"apply: rolled back ({e.get('error') or 'the DoD failed in the source'})"
    if e.get("applied"):
        return "apply: the patch is in the source (not committed)"
    return f"apply: nothing applied ({e.get('error') or 'refused'})"


def _contract(e: Event) -> str:
    claimed = e.get("claimed_status")
    said = f"the evidence says {e.get('evidence_status')}; " + (
        f"the worker claimed {claimed}" if claimed else "the worker made no claim"
    )
    mismatches = e.get("mismatches") or []
    return said + (f"; mismatch: {'; '.join(mismatches)}" if mismatches else "")


_SAYINGS: dict[str, Callable[[Event], str]] = {
    "run_started": lambda e: (
        f"run started: task {e.get('task_id')} with {e.get('backend')} "
        f"on base {str(e.get('base'))[:12]}"
    ),
    "preflight_passed": lambda e: "preflight passed",
    "workspace_created": lambda e: f"workspace created at {e.get('path')}",
    "round_started": lambda e: f"round {e.get('round')} of {e.get('max_rounds')} started",
    "agent_started": lambda e: f"{_who(e)}the agent ({e.get('backend')}) is working",
    "tool_call": lambda e: f"{_who(e)}the agent calls {e.get('name')}",
    "tool_result": _tool_result,
    "model_turn": _model_turn,
    "agent_warning": lambda e: f"{_who(e)}warning: {e.get('message')}",
    "agent_finished": _agent_finished,
    "cli_started": lambda e: f"{_who(e)}{e.get('backend')} started in {e.get('cwd')}",
    "cli_event": lambda e: f"{_who(e)}{e.get('cli')} reported {e.get('type')}",
    "agent_message": lambda e: f"{_who(e)}the agent wrote: {str(e.get('text'))[:200]}",
    "cli_finished": lambda e: f"{_who(e)}{e.get('backend')} ended",
    "agent_blocked": lambda e: f"{_who(e)}the agent is blocked: a person must decide",
    "stop_requested": lambda e: "`code-runner stop` asked the run to end",
    "result_contract": _contract,
    "audit": _audit,
    "changes_dropped": lambda e: f"{_who(e)}dropped changes outside the allowlist: {_paths(e)}",
    "dod_started": lambda e: f"{e.get('label')}: running the DoD `{e.get('command')}`",
    "dod_finished": _dod_finished,
    "round_finished": lambda e: (
        f"{_who(e)}round finished "
        f"({'passed' if e.get('passed') else 'not passed'}, score {e.get('score')})"
    ),
    "best_kept": lambda e: f"{_who(e)}kept as the best so far (score {e.get('score'):.2f})",
    "best_restored": lambda e: (
        f"{_who(e)}scored lower ({e.get('score')}); went back to round {e.get('best_round')}"
    ),
    "state_changed": _state,
    "patch_exported": _patch,
    "workspace_released": lambda e: (
        "workspace removed"
        if e.get("removed")
        else "the workspace could NOT be removed (`code-runner gc` will)"
    ),
    "source_checked": _source_checked,
    "signal_received": lambda e: f"{e.get('signal')} received: cleaning up",
    "apply_started": lambda e: f"apply: started on {e.get('source')}",
    "apply_refused": lambda e: f"apply refused, the source is untouched: {e.get('message')}",
    "apply_journaled": lambda e: f"apply: journaled {_paths(e)}",
    "source_patch_applied": lambda e: f"apply: patched {_paths(e)}; running the DoD there",
    "source_byproducts_moved": lambda e: f"apply: files the DoD left moved to {e.get('moved_to')}",
    "source_rolled_back": lambda e: f"apply: rolled back {_paths(e)} ({e.get('why')})",
    "source_committed": lambda e: f"apply: committed {e.get('commit')} ({_paths(e)})",
    "apply_finished": _apply_finished,
    "apply_repaired": lambda e: f"repaired an interrupted apply: {e.get('action')}",
    "run_rejected": lambda e: f"a person rejected the run: {e.get('reason')}",
    "skills_installed": lambda e: (
        f"{_who(e)}skills installed read-only for the worker: "
        + (", ".join(str(k.get("name")) for k in e.get("skills") or []) or "none")
    ),
    "skill_changed": lambda e: (
        f"{_who(e)}a skill changed in the {e.get('where', 'installed copy')}: {_paths(e, 'files')}"
    ),
    "scope_expansion": lambda e: (
        f"{_who(e)}scope expansion: the worker wrote outside the owned paths: {_paths(e)} ("
        + ("stopping the round" if e.get("action") == "stop" else "the audit will drop it")
        + ")"
    ),
    "repeating_failure": lambda e: (
        f"{_who(e)}repeating failure: {str(e.get('command'))[:120]} failed {e.get('times')} times"
    ),
    "no_progress": lambda e: f"{_who(e)}no progress (advisory): {e.get('message')}",
    "error": lambda e: f"error: {e.get('message')}",
    "run_finished": lambda e: f"run finished: {e.get('status')} ({e.get('reason')})",
}


def _fallback(e: Event) -> str:
    fields = ", ".join(f"{k} {v}" for k, v in e.items() if k not in _HIDDEN and v not in (None, ""))
    return f"{_who(e)}{str(e.get('kind')).replace('_', ' ')}" + (f": {fields}" if fields else "")


def narrate(event: Event) -> str:
    """One event in words (a bad or unknown event is shown with its fields, never dropped)."""
    saying = _SAYINGS.get(str(event.get("kind")), _fallback)
    try:
        return saying(event)
    except (KeyError, TypeError, ValueError):
        return _fallback(event)


def narrated(event: Event) -> str:
    """The event's time, then what happened."""
    stamp = str(event.get("ts") or "")[11:19]
    return f"{stamp} {narrate(event)}".strip()


__all__ = ["narrate", "narrated"]

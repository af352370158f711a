"""Known failure texts: output that means a person must decide, not that waiting helps.

Agent CLIs report a missing key, a denied sandbox or an exhausted context in their own
words and then either exit or sit still. Each pattern here names one such situation; the
supervisor checks the CLI's error output as it arrives and ends the round as
BLOCKED_NEEDS_DECISION with the reason and the fix, instead of waiting for the idle
timeout. Patterns are matched against error channels only (stderr, the CLI's error
events), never against file contents a tool printed, so a test fixture that mentions "an
invalid API key" does not block a run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class BlockerKind(StrEnum):
    NOT_INSTALLED = "not_installed"
    AUTHENTICATION = "authentication_required"
    SANDBOX_DENIED = "sandbox_denied"
    CONTEXT_EXHAUSTED = "context_exhausted"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    UNREACHABLE = "model_server_unreachable"


@dataclass(frozen=True)
class Blocker:
    kind: BlockerKind
    text: str  # the line that matched, trimmed

    @property
    def reason(self) -> str:
        return f"{_WHAT[self.kind]}: {self.text}"

    @property
    def fix(self) -> str:
        return _FIX[self.kind]

    def to_dict(self) -> dict[str, str]:
        return {
            "blocker": self.kind.value,
            "text": self.text,
            "reason": self.reason,
            "fix": self.fix,
        }


_WHAT = {
    BlockerKind.NOT_INSTALLED: "the agent CLI is not installed",
    BlockerKind.AUTHENTICATION: "the agent CLI needs credentials",
    BlockerKind.SANDBOX_DENIED: "the agent CLI's sandbox was denied",
    BlockerKind.CONTEXT_EXHAUSTED: "the model's context window is exhausted",
    BlockerKind.WAITING_FOR_APPROVAL: "the agent CLI is waiting for an approval",
    BlockerKind.UNREACHABLE: "the model server cannot be reached",
}
_FIX = {
    BlockerKind.NOT_INSTALLED: "install it (`npm install -g @openai/codex` or "
    "`npm install -g @anthropic-ai/claude-code`), or name the program with `bin=PATH`.",
    BlockerKind.AUTHENTICATION: "export the API key variable the backend names "
    "(`api_key_env`) with a valid key; code-runner never reads the CLI's own login.",
    BlockerKind.SANDBOX_DENIED: "run where the CLI's sandbox works (user namespaces), or "
    "choose another sandbox mode (`sandbox=...`) after weighing the risk.",
    BlockerKind.CONTEXT_EXHAUSTED: "narrow the task (fewer read_context files, a smaller "
    "allowlist) or use a model with a larger context window.",
    BlockerKind.WAITING_FOR_APPROVAL: "give the CLI the permissions the task needs up front "
    "(tools, sandbox mode); headless runs cannot answer a prompt.",
    BlockerKind.UNREACHABLE: "start the model server or correct `base_url`, then run again.",
}

_PATTERNS: tuple[tuple[BlockerKind, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        (
            BlockerKind.NOT_INSTALLED,
            r"command not found|is not installed|missing optional dependency|"
            r"no such file or directory.*\b(codex|claude|node)\b",
        ),
        (
            BlockerKind.AUTHENTICATION,
            r"\b401\b|unauthori[sz]ed|invalid (api|x-api)[ -]?key|incorrect api key|"
            r"authentication[_ ](error|failed|required)|missing environment variable|"
            r"not logged in|please run /login|oauth token has expired|api key .*(missing|not set)",
        ),
        (
            BlockerKind.SANDBOX_DENIED,
            r"sandbox.{0,40}\b(denied|not supported|unavailable|failed to)|"
            r"bwrap: .*(denied|not permitted|failed)|landlock.{0,40}(denied|unsupported)",
        ),
        (
            BlockerKind.CONTEXT_EXHAUSTED,
            r"context[_ ]length[_ ]exceeded|context window|prompt is too long|"
            r"maximum context length|ran out of room",
        ),
        (
            BlockerKind.WAITING_FOR_APPROVAL,
            r"waiting for (your |user )?approval|approval (is )?required|requires? approval|"
            r"awaiting approval|do you want to (proceed|allow|continue)\?",
        ),
        (
            BlockerKind.UNREACHABLE,
            r"connection (refused|failed)|unable to connect to api|error sending request|"
            r"could not resolve host|failed to connect|network is unreachable",
        ),
    )
)
_MAX_TEXT = 300
_SCAN_CHARS = 1000


def classify(text: str) -> Blocker | None:
    """The first known failure `text` shows, or None. A failure message is short: only
    the start and end of a long line are looked at, so a flood of output stays cheap."""
    if len(text) > 2 * _SCAN_CHARS:
        text = text[:_SCAN_CHARS] + " " + text[-_SCAN_CHARS:]
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            line = " ".join(text.split())
            return Blocker(kind, line if len(line) <= _MAX_TEXT else line[: _MAX_TEXT - 3] + "...")
    return None


def not_installed(program: str, detail: str) -> Blocker:
    return Blocker(BlockerKind.NOT_INSTALLED, f"{program}: {detail}")


__all__ = ["Blocker", "BlockerKind", "classify", "not_installed"]

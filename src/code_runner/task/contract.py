"""The result contract: what a worker is told, what it must report, and how its report is
weighed against the evidence.

The prompt states the objective, the owned paths, the non-goals and the acceptance
command, and asks for a final block::

    RESULT_STATUS: SUCCESS | PARTIAL | BLOCKED_NEEDS_DECISION | FAILED
    SUMMARY: ...
    CHANGED_FILES: a.py, b.py
    VERIFICATION: ...
    OPEN_DECISIONS: none

The runner parses the block but never believes it: `assess` derives the status from its
own evidence (the DoD verdict, the audited patch, why the run ended) and records every
way the claim disagrees as a mismatch. Any backend's final text can carry a block, so
this works for the built-in loop as well as for agent CLIs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from code_runner.task.spec import TaskSpec
    from code_runner.verify import Verdict

MAX_OUTPUT_TAIL_CHARS = 3000


class WorkerStatus(StrEnum):
    SUCCESS = "SUCCESS"  # accepted behaviour and proof are complete
    PARTIAL = "PARTIAL"  # useful work landed; named follow-up remains
    BLOCKED_NEEDS_DECISION = "BLOCKED_NEEDS_DECISION"  # a person must decide something
    FAILED = "FAILED"  # errored, looped, or produced unusable or unsafe work


_KEYS = (
    "RESULT_STATUS",
    "SUMMARY",
    "CHANGED_FILES",
    "VERIFICATION",
    "OPEN_DECISIONS",
    "SKILL_BEHAVIOR_NOTES",
)
# a key at the start of a line, allowing markdown decoration: `- **SUMMARY**: ...`
_KEY_LINE = re.compile(
    r"^[ \t>*_`#-]*(" + "|".join(_KEYS) + r")[*_`]*[ \t]*[:=][ \t]*(.*)$", re.MULTILINE
)
_NONE_WORDS = {"", "none", "n/a", "na", "-", "nothing", "no", "(none)"}


@dataclass(frozen=True)
class ResultClaim:
    """The worker's final block, as written. `status` is None when it is not a known value."""

    raw_status: str
    status: WorkerStatus | None
    summary: str
    changed_files: tuple[str, ...]
    verification: str
    open_decisions: tuple[str, ...]
    skill_behavior_notes: tuple[str, ...] = ()  # how the named skills served the work

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value if self.status else None,
            "raw_status": self.raw_status,
            "summary": self.summary,
            "changed_files": list(self.changed_files),
            "verification": self.verification,
            "open_decisions": list(self.open_decisions),
            "skill_behavior_notes": list(self.skill_behavior_notes),
        }


# --- the prompt -----------------------------------------------------------------------


def build_prompt(
    task: TaskSpec,
    *,
    round_index: int,
    max_rounds: int,
    previous: Verdict | None = None,
    skills: Sequence[tuple[str, str]] = (),
) -> str:
    """The whole instruction a worker CLI gets for one round; `skills`: (name, description)."""
    dod = task.definition_of_done
    owned = "\n".join(f"- `{path}`" for path in task.allowlist)
    parts = [
        f"# Task: {task.title}",
        "## Objective\n" + task.prompt.strip(),
        "## Owned paths\nYou may change only these (a directory covers everything under it):\n"
        + owned,
        "## Non-goals\n"
        "- Do not change anything outside the owned paths: the runner discards such changes "
        "and reports them.\n"
        "- Do not run git commands that write (commit, branch, tag, stash, reset, checkout, "
        "config): the runner owns git, and a commit or ref change fails the run.\n"
        "- Do not install packages, reach the network, or start background processes.\n"
        "- Do not weaken the acceptance check (tests, fixtures, the command) unless it is "
        "among the owned paths and the objective asks for it.",
        "## Acceptance\nThe runner judges the work by running this command on the base "
        "commit plus your changes to the owned paths, and nothing else you leave behind:\n"
        f"```\n{dod.command}\n```\n"
        f"It must satisfy `{dod.assertion}` within {dod.timeout_s:g} s. You may run it "
        "yourself to check.",
    ]
    if task.read_context:
        parts.append(
            "## Context (read-only)\nRead these before you start:\n"
            + "\n".join(f"- `{path}`" for path in task.read_context)
        )
    if skills:
        parts.append(_skills_section(skills))
    if round_index > 1:
        parts.append(_previous_round(round_index, max_rounds, previous))
    parts.append(
        "## Final block\nEnd your final message with these lines (a value may "
        "continue on the lines after its key):\n"
        "```\n"
        "RESULT_STATUS: SUCCESS | PARTIAL | BLOCKED_NEEDS_DECISION | FAILED\n"
        "SUMMARY: what you changed and why, in one paragraph\n"
        "CHANGED_FILES: comma-separated repo-relative paths, or none\n"
        "VERIFICATION: what you ran to check and what it showed\n"
        "OPEN_DECISIONS: what a person must decide, or none\n"
        + (
            "SKILL_BEHAVIOR_NOTES: where a skill helped, misled or was missing, or none\n"
            if skills
            else ""
        )
        + "```\n"
        "SUCCESS only if the acceptance command passes with your changes. PARTIAL if useful "
        "work landed but named follow-up remains. BLOCKED_NEEDS_DECISION if a real user or "
        "environment decision is required (credentials, paid services, changes outside the "
        "owned paths, destructive actions). FAILED if you could not do the task. Must not "
        "regress: what passes today must still pass. The runner checks your block against "
        "its own evidence (the workspace diff and the acceptance command)."
    )
    return "\n\n".join(parts) + "\n"


def _skills_section(skills: Sequence[tuple[str, str]]) -> str:
    listed = "\n".join(f"- `{name}`: {description}" for name, description in skills)
    return (
        "## Skills\nUse these named skills; they are installed in your CLI's own skills "
        "directory, read-only (never edit a skill's files: the runner reports any change):\n"
        + listed
        + "\nIn the final block, SKILL_BEHAVIOR_NOTES says where a skill helped, misled or "
        "was missing (or none)."
    )


def _previous_round(round_index: int, max_rounds: int, previous: Verdict | None) -> str:
    head = f"## Round {round_index} of {max_rounds}\nThe previous round did not pass."
    if previous is None:
        return head
    output = (previous.stdout_tail + "\n" + previous.stderr_tail).strip()
    if len(output) > MAX_OUTPUT_TAIL_CHARS:
        output = "[...]\n" + output[-MAX_OUTPUT_TAIL_CHARS:]
    return (
        f"{head} The runner's verdict: {previous.reason} (exit code {previous.exit_code}"
        + (", timed out" if previous.timed_out else "")
        + "). The owned paths hold the best attempt so far. The end of the acceptance "
        f"command's output:\n```\n{output or '(no output)'}\n```"
    )


# --- parsing --------------------------------------------------------------------------


def parse_claim(text: str) -> ResultClaim | None:
    """The worker's final block in `text` (the last value of each key), or None."""
    text = text or ""
    matches = list(_KEY_LINE.finditer(text))
    if not any(m.group(1) == "RESULT_STATUS" for m in matches):
        return None
    values: dict[str, str] = {}
    for number, match in enumerate(matches):
        end = matches[number + 1].start() if number + 1 < len(matches) else len(text)
        value = (match.group(2) + text[match.end() : end]).strip().strip("`").strip()
        values[match.group(1)] = _unfence(value)
    lines = values["RESULT_STATUS"].splitlines()
    raw = lines[0].strip() if lines else ""
    return ResultClaim(
        raw_status=raw,
        status=_status(raw),
        summary=values.get("SUMMARY", ""),
        changed_files=_paths(values.get("CHANGED_FILES", "")),
        verification=values.get("VERIFICATION", ""),
        open_decisions=_items(values.get("OPEN_DECISIONS", "")),
        skill_behavior_notes=_items(values.get("SKILL_BEHAVIOR_NOTES", "")),
    )


def _unfence(value: str) -> str:
    """Drop a closing code fence the block was wrapped in."""
    lines = [line for line in value.splitlines() if line.strip() not in ("```", "~~~")]
    return "\n".join(lines).strip()


def _status(raw: str) -> WorkerStatus | None:
    word = re.sub(r"[^A-Z_]", "", raw.upper().split()[0]) if raw.split() else ""
    try:
        return WorkerStatus(word)
    except ValueError:
        return None


def _items(value: str) -> tuple[str, ...]:
    parts = [p.strip(" \t-*`") for p in re.split(r"\n|;", value)]
    return tuple(p for p in parts if p.lower() not in _NONE_WORDS)


def _paths(value: str) -> tuple[str, ...]:
    parts = [p.strip(" \t-*`'\"") for p in re.split(r"[,\n]", value)]
    found = [p.removeprefix("./") for p in parts if p.lower() not in _NONE_WORDS]
    return tuple(dict.fromkeys(p for p in found if p and " " not in p))


# --- judging --------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What the runner knows at the end of a run, the claim is weighed against.

    `RunResult.evidence()` builds it; the test counts are the DoD's on the base (round 0)
    and on the best round."""

    status: str
    reason: str
    source_unchanged: bool
    changed_paths: tuple[str, ...]
    dropped_paths: tuple[str, ...] = ()
    tests_passed_base: int | None = None
    tests_passed_best: int | None = None


_BAD_ENDINGS = {"safety_violation", "source_changed", "patch_invalid", "internal_error"}


def evidence_status(evidence: Evidence) -> WorkerStatus:
    """The status the evidence supports (never the worker's word).

    PARTIAL needs proof of progress: the patch holds changes and, with them, more tests
    pass than on the base (test counts the DoD's output reported).
    """
    if evidence.status in ("passed", "already_satisfied") and evidence.source_unchanged:
        return WorkerStatus.SUCCESS
    if evidence.reason == "blocked_needs_decision":
        return WorkerStatus.BLOCKED_NEEDS_DECISION
    if (
        evidence.status == "failed"
        and evidence.reason not in _BAD_ENDINGS
        and evidence.changed_paths
        and evidence.tests_passed_best is not None
        and evidence.tests_passed_best > (evidence.tests_passed_base or 0)
    ):
        return WorkerStatus.PARTIAL
    return WorkerStatus.FAILED


def assess(response: str, evidence: Evidence) -> dict[str, Any]:
    """The worker's claim against the evidence: both statuses and every disagreement."""
    claim = parse_claim(response)
    status = evidence_status(evidence)
    mismatches: list[str] = []
    findings: list[str] = []
    if claim is None:
        findings.append("the worker's final message has no RESULT_STATUS block")
    else:
        if claim.status is None:
            mismatches.append(
                f"RESULT_STATUS {claim.raw_status!r} is not one of "
                + ", ".join(s.value for s in WorkerStatus)
            )
        elif claim.status is not status:
            mismatches.append(
                f"the worker claims {claim.status.value}, the evidence says {status.value}"
            )
        actual, dropped = set(evidence.changed_paths), set(evidence.dropped_paths)
        claimed = set(claim.changed_files)
        if claimed - actual:
            mismatches.append(
                "claimed as changed but not in the patch: " + ", ".join(sorted(claimed - actual))
            )
        if actual - claimed:
            findings.append("changed but not claimed: " + ", ".join(sorted(actual - claimed)))
        if claimed & dropped:
            findings.append(
                "claimed changes outside the owned paths (dropped): "
                + ", ".join(sorted(claimed & dropped))
            )
    return {
        "claimed_status": claim.status.value if claim and claim.status else None,
        "evidence_status": status.value,
        "mismatch": bool(mismatches),
        "mismatches": mismatches,
        "findings": findings,
        "claim": claim.to_dict() if claim else None,
    }


__all__ = [
    "Evidence",
    "ResultClaim",
    "WorkerStatus",
    "assess",
    "build_prompt",
    "evidence_status",
    "parse_claim",
]

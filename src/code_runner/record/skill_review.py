"""`{task_id}.skill-review.md`: what a run says about the skills it used, advisory only.

The recommendation is one of three words, derived from evidence and the worker's notes:

- `NO_SKILL_CHANGE`, the default: nothing suggests a skill should change;
- `CANDIDATE_LEARNING`: the worker wrote SKILL_BEHAVIOR_NOTES, which a person may turn
  into a skill change;
- `REVIEW_REQUIRED`: a skill file changed or was written (in the patch, in a write the
  audit dropped, or in the copy installed for the CLI). A recommendation never authorizes
  a skill edit; the file lists the decisions a person can take.

The review is computed from result.json, run.json (the skills and their hashes) and the
events, so `code-runner finalize` can rebuild it from a run's evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from code_runner.events import EventKind
from code_runner.record.result import RunResult


class SkillVerdict(StrEnum):
    NO_SKILL_CHANGE = "NO_SKILL_CHANGE"
    CANDIDATE_LEARNING = "CANDIDATE_LEARNING"
    REVIEW_REQUIRED = "REVIEW_REQUIRED"


DECISIONS = {
    SkillVerdict.NO_SKILL_CHANGE: (
        "Keep the skills as they are (nothing to do).",
        "Read the worker's result anyway if the run failed: a failure a skill caused "
        "leaves no note when the worker did not notice it.",
    ),
    SkillVerdict.CANDIDATE_LEARNING: (
        "Keep the skills as they are: a note is a suggestion, not a defect.",
        "Patch the skill's repo-owned source with the smallest change the notes prove "
        "(prefer deleting or shortening a rule, or a script, over more prose), then "
        "verify it with a focused run.",
        "Collect the note and decide after more runs show the same pattern.",
    ),
    SkillVerdict.REVIEW_REQUIRED: (
        "Reject the run (`code-runner reject RUN_DIR`) if the worker was not asked to "
        "change a skill.",
        "Review the skill change in the patch line by line before `code-runner apply`; "
        "apply it only if the task owned that skill.",
        "Re-run with the skill outside the owned paths so it stays read-only.",
    ),
}


@dataclass(frozen=True)
class SkillReview:
    verdict: SkillVerdict
    skills: tuple[Mapping[str, Any], ...]
    notes: tuple[str, ...]
    changes: tuple[str, ...]  # each: where a skill file changed or was written

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "skills": [{"name": s.get("name"), "sha256": s.get("sha256")} for s in self.skills],
            "notes": list(self.notes),
            "changes": list(self.changes),
        }


def _under(path: str, folders: Iterable[str]) -> bool:
    return any(path == folder or path.startswith(folder + "/") for folder in folders)


def review(
    result: RunResult, skills: Sequence[Mapping[str, Any]], events: Iterable[Mapping[str, Any]]
) -> SkillReview:
    """The recommendation for the skills of one run (see the module doc)."""
    folders = [
        str(s.get("path", "")).rstrip("/")
        for s in skills
        if s.get("origin") == "repo" and s.get("path")
    ]
    changes = [
        f"`{c.path}` in the patch ({c.kind})"
        for c in result.changed_files
        if _under(c.path, folders)
    ]
    changes += [
        f"`{d.path}` written outside the owned paths, dropped by the audit (round {d.round})"
        for d in result.dropped_changes
        if _under(d.path, folders)
    ]
    for event in events:
        if event.get("kind") == EventKind.SKILL_CHANGED.value:
            for name in event.get("files") or []:
                changes.append(
                    f"`{name}` in the copy installed for the CLI (round {event.get('round')})"
                )
    contract = result.result_contract
    claim = contract.claim if contract else None
    notes = tuple(claim.skill_behavior_notes) if claim else ()
    if changes:
        verdict = SkillVerdict.REVIEW_REQUIRED
    elif notes:
        verdict = SkillVerdict.CANDIDATE_LEARNING
    else:
        verdict = SkillVerdict.NO_SKILL_CHANGE
    return SkillReview(verdict, tuple(skills), notes, tuple(dict.fromkeys(changes)))


def _bullets(items: Iterable[str], empty: str) -> list[str]:
    lines = [f"- {item}" for item in items]
    return lines or [f"- {empty}"]


def skill_review_markdown(result: RunResult, found: SkillReview) -> str:
    lines = [
        f"# Skill review of {result.task_id} ({result.run_id})",
        "",
        f"Recommendation: **{found.verdict.value}** (advisory: it never authorizes a skill edit)",
        "",
        "## Skills used",
        "",
    ]
    lines += _bullets(
        (
            f"`{s.get('name')}` from `{s.get('path')}` ({s.get('origin')}), "
            f"sha256 `{str(s.get('sha256', ''))[:16]}`"
            for s in found.skills
        ),
        "none named by the task",
    )
    lines += ["", "## Skill files changed or written", ""]
    lines += _bullets(found.changes, "none")
    lines += ["", "## The worker's SKILL_BEHAVIOR_NOTES", ""]
    lines += _bullets(found.notes, "none")
    lines += ["", "## Decisions you can take", ""]
    lines += _bullets(DECISIONS[found.verdict], "none")
    return "\n".join(lines) + "\n"


__all__ = ["DECISIONS", "SkillReview", "SkillVerdict", "review", "skill_review_markdown"]

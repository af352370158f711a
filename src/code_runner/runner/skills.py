"""The spec's named skills in a task run: read once at the start, reviewed at the end.

Loading checks each skill again (the spec was checked when it was loaded; the files may have
changed since); the review turns the run's skill events and the worker's notes into the
recommendation that result.json and skill-review.md carry.
"""

from __future__ import annotations

from pathlib import Path

from code_runner import files
from code_runner.errors import SpecError
from code_runner.record import RunResult, skill_review
from code_runner.task import TaskSpec
from code_runner.task.skills import Skill, SkillProblem, load_skills


def read_skills(spec: TaskSpec) -> tuple[Skill, ...]:
    """The named skills as this run uses them; a SpecError names what is wrong."""
    try:
        return load_skills(spec.skills, spec.cwd)
    except SkillProblem as exc:
        raise SpecError("skills", [f"skills: {exc}"]) from None


def with_review(result: RunResult, skills: tuple[Skill, ...], events_path: Path) -> RunResult:
    """`result` with the skills' recommendation (NO_SKILL_CHANGE, CANDIDATE_LEARNING,
    REVIEW_REQUIRED) from the run's events."""
    try:
        events = files.read_jsonl(events_path)
    except OSError:
        events = []
    found = skill_review.review(
        result, [skill.to_dict() for skill in skills], [e for e in events if isinstance(e, dict)]
    )
    return result.updated(skill_review=found.to_dict())

"""Skill folders for tests: a SKILL.md with front matter, and optional extra files."""

from __future__ import annotations

from pathlib import Path

SKILL_NAME = "calc-review"
SKILL_DESCRIPTION = "Zebra-striped arithmetic review checklist for calculators."


def skill_md(name: str = SKILL_NAME, description: str = SKILL_DESCRIPTION) -> str:
    return (
        f"---\nname: {name}\ndescription: {description}\n---\n\n"
        "# Calc review\nCheck every operator against its name.\n"
    )


def write_skill(
    folder: Path,
    *,
    name: str = SKILL_NAME,
    description: str = SKILL_DESCRIPTION,
    extra: dict[str, str] | None = None,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(skill_md(name, description))
    for rel, text in (extra or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder

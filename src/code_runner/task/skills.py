"""Named skills: folders with a `SKILL.md` that an agent CLI loads, read and checked once.

A spec's `skills: [PATH, ...]` names skill folders. A relative path is a folder of the
source repo (read from its work tree); an absolute or `~` path is the user's own. Each is
read whole, without following a symlink, within a size bound, and its `SKILL.md` must
open with a front matter that gives a `name` (lowercase letters, digits and hyphens, as
both CLIs require) and a `description`. What was read is a `Skill`: the bytes of every
file and their hashes, so what the CLI gets is exactly what was checked and recorded.

`materialize` writes the skills into a CLI's own skills directory, read-only (files 0444,
folders 0555); `changed_files` says which copies differ from what was read (a worker that
wrote into them).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from code_runner import files

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256 * 1024  # all files of one skill together
MAX_SKILL_FILES = 64
MAX_SKILLS = 16
MAX_DESCRIPTION_CHARS = 1024
NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
_FRONT_RE = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


class SkillProblem(ValueError):
    """A skill folder that cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class SkillFile:
    path: str  # relative to the skill folder, with '/'
    data: bytes
    mode: int  # 0o444, or 0o555 for an executable script

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Skill:
    """One skill as read: where from, its name and description, its files and their hash."""

    entry: str  # as the spec wrote it
    origin: str  # "repo" (a folder of the source repo) or "user"
    folder: Path
    name: str
    description: str
    files: tuple[SkillFile, ...]

    @property
    def sha256(self) -> str:
        """One hash of the whole skill: every file's path and content hash, in order."""
        digest = hashlib.sha256()
        for item in self.files:
            digest.update(f"{item.path}\0{item.sha256}\n".encode())
        return digest.hexdigest()

    @property
    def repo_paths(self) -> tuple[str, ...]:
        """The skill's files as repo-relative paths (a repo skill), else ()."""
        if self.origin != "repo":
            return ()
        base = self.entry.rstrip("/")
        return tuple(f"{base}/{item.path}" for item in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "path": self.entry,
            "origin": self.origin,
            "folder": str(self.folder),
            "sha256": self.sha256,
            "files": [
                {"path": f.path, "sha256": f.sha256, "bytes": len(f.data)} for f in self.files
            ],
        }


def is_user_path(entry: str) -> bool:
    return entry.startswith(("/", "~"))


def skill_folder(entry: str, source: Path) -> Path:
    if is_user_path(entry):
        return Path(os.path.expanduser(entry))
    return source / entry.rstrip("/")


def front_matter(text: str) -> Mapping[str, object]:
    """The YAML mapping between the opening `---` lines of a SKILL.md."""
    match = _FRONT_RE.match(text.lstrip("\ufeff"))
    if match is None:
        raise SkillProblem(
            f"its {SKILL_FILE} has no front matter; start it with `---`, `name: ...`, "
            "`description: ...`, `---`"
        )
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise SkillProblem(
            f"its {SKILL_FILE} front matter is not YAML ({str(exc).splitlines()[0]})"
        ) from None
    if not isinstance(data, Mapping):
        raise SkillProblem(f"its {SKILL_FILE} front matter is not a mapping of keys to values")
    return data


def _identity(meta: Mapping[str, object]) -> tuple[str, str]:
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SkillProblem(
            f"its {SKILL_FILE} front matter needs `name:` of lowercase letters, digits and "
            f"hyphens (at most 64), got {name!r}"
        )
    if not isinstance(description, str) or not description.strip():
        raise SkillProblem(f"its {SKILL_FILE} front matter needs a `description:` (one line)")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillProblem(
            f"its description has {len(description)} characters; keep it within "
            f"{MAX_DESCRIPTION_CHARS}"
        )
    return name, description


def _read_tree(folder: Path) -> list[SkillFile]:
    """Every file under `folder`, refusing symlinks, special files and a tree over the bound."""
    found: list[SkillFile] = []
    total = 0
    for top, dirnames, filenames in files.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(top) / name
            rel = path.relative_to(folder).as_posix()
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                raise SkillProblem(f"{rel} is not a regular file (a symlink?); copy it in")
            total += info.st_size
            if total > MAX_SKILL_BYTES or len(found) >= MAX_SKILL_FILES:
                raise SkillProblem(
                    f"the skill is over {MAX_SKILL_BYTES // 1024} KiB or {MAX_SKILL_FILES} "
                    "files; keep a skill small (move data out of it)"
                )
            mode = 0o555 if info.st_mode & 0o111 else 0o444
            found.append(SkillFile(rel, path.read_bytes(), mode))
    return found


def read_skill(entry: str, source: Path) -> Skill:
    """The skill at `entry` (see the module doc), read whole; `SkillProblem` says what is wrong."""
    folder = skill_folder(entry, source)
    if folder.is_symlink() or not folder.is_dir():
        raise SkillProblem(f"{folder} is not a folder (nor may it be a symlink)")
    manifest = folder / SKILL_FILE
    if manifest.is_symlink() or not manifest.is_file():
        raise SkillProblem(f"{folder} has no {SKILL_FILE}; a skill is a folder with one")
    try:
        found = _read_tree(folder)
    except OSError as exc:
        raise SkillProblem(f"{folder} cannot be read ({exc.strerror or exc})") from None
    text = next(f.data for f in found if f.path == SKILL_FILE).decode("utf-8", errors="replace")
    name, description = _identity(front_matter(text))
    origin = "user" if is_user_path(entry) else "repo"
    return Skill(entry, origin, folder, name, description, tuple(found))


def skill_problems(entries: Sequence[str], source: Path) -> list[str]:
    """One line per unusable skill (for the spec check), and repeated names."""
    problems: list[str] = []
    names: dict[str, str] = {}
    for entry in entries:
        try:
            skill = read_skill(entry, source)
        except SkillProblem as exc:
            problems.append(f"skills: {entry}: {exc}")
            continue
        if skill.name in names:
            problems.append(
                f"skills: {entry} and {names[skill.name]} are both named {skill.name!r}; "
                "name each skill once"
            )
        names[skill.name] = entry
    return problems


def load_skills(entries: Iterable[str], source: Path) -> tuple[Skill, ...]:
    """The skills a run uses, read once; the first problem raises `SkillProblem`."""
    return tuple(read_skill(entry, source) for entry in entries)


def materialize(skills: Sequence[Skill], skills_dir: Path) -> None:
    """Write `skills` into `skills_dir/NAME/`, read-only, replacing what was there."""
    for skill in skills:
        target = skills_dir / skill.name
        if target.exists() or target.is_symlink():
            files.force_rmtree(target)
        for item in skill.files:
            path = target / item.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(item.data)
            path.chmod(item.mode)
        for top, _dirs, _files in files.walk(target):
            os.chmod(top, 0o555)  # noqa: S103 - read and list only, for the CLI
    skills_dir.mkdir(parents=True, exist_ok=True)


def changed_files(skills: Sequence[Skill], skills_dir: Path) -> list[str]:
    """`NAME/PATH` of every materialized file that differs from what was read, or is gone,
    and of every file added to a skill's folder."""
    changed: list[str] = []
    for skill in skills:
        target = skills_dir / skill.name
        expected = {item.path: item.sha256 for item in skill.files}
        present: dict[str, str] = {}
        if target.is_dir() and not target.is_symlink():
            for top, _dirs, names in files.walk(target):
                for name in names:
                    path = Path(top) / name
                    rel = path.relative_to(target).as_posix()
                    try:
                        with path.open("rb") as f:  # in pieces: the agent may grow it
                            present[rel] = hashlib.file_digest(f, "sha256").hexdigest()
                    except OSError:
                        present[rel] = ""
        for rel in sorted(set(expected) | set(present)):
            if expected.get(rel) != present.get(rel):
                changed.append(f"{skill.name}/{rel}")
    return changed


__all__ = [
    "MAX_SKILLS",
    "MAX_SKILL_BYTES",
    "SKILL_FILE",
    "Skill",
    "SkillFile",
    "SkillProblem",
    "changed_files",
    "front_matter",
    "load_skills",
    "materialize",
    "read_skill",
    "skill_folder",
    "skill_problems",
]

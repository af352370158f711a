"""Named skills: read whole and checked (SKILL.md, front matter, size, no symlinks), refused
with the fix in the spec's problem list, installed read-only, and a changed copy found."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from code_runner import runner
from code_runner.errors import PreflightError, SpecError
from code_runner.task import contract, validate_spec_data
from code_runner.task.skills import (
    MAX_SKILL_BYTES,
    SkillProblem,
    changed_files,
    materialize,
    read_skill,
)
from tests.helpers.git import make_repo
from tests.helpers.skills import SKILL_DESCRIPTION, SKILL_NAME, write_skill
from tests.helpers.tasks import run_cli


def _spec(repo: Path, out: Path, skills: list[str]) -> dict[str, Any]:
    return {
        "task_id": "fix-calc",
        "title": "Fix the calculator",
        "prompt": "Fix calc.py.",
        "backend": "scripted:demo.json",
        "cwd": str(repo),
        "output_dir": str(out),
        "allowlist": ["calc.py"],
        "definition_of_done": {"command": "true", "assertion": "exit_code == 0"},
        "skills": skills,
    }


def _problems(data: dict[str, Any], base_dir: Path) -> tuple[str, ...]:
    with pytest.raises(SpecError) as info:
        validate_spec_data(data, base_dir=base_dir, source="spec.json")
    return info.value.problems


def test_a_skill_is_read_whole_with_its_name_description_and_hashes(tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "mine", extra={"scripts/check.sh": "echo ok\n"})
    skill = read_skill(str(folder), tmp_path)
    assert (skill.name, skill.description, skill.origin) == (
        SKILL_NAME,
        SKILL_DESCRIPTION,
        "user",
    )
    assert [f.path for f in skill.files] == ["SKILL.md", "scripts/check.sh"]
    assert len(skill.sha256) == 64
    listed = skill.to_dict()
    assert listed["sha256"] == skill.sha256 and len(listed["files"]) == 2
    # the hash follows the content
    (folder / "scripts/check.sh").write_text("echo changed\n")
    assert read_skill(str(folder), tmp_path).sha256 != skill.sha256


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("# no front matter\n", "no front matter"),
        ("---\nname: Calc Review\ndescription: x\n---\n", "lowercase letters"),
        ("---\nname: calc-review\n---\n", "description"),
        ("---\nname: [unclosed\n---\n", "not YAML"),
    ],
)
def test_a_bad_skill_md_is_refused_with_what_to_fix(
    tmp_path: Path, content: str, needle: str
) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "SKILL.md").write_text(content)
    with pytest.raises(SkillProblem, match=needle):
        read_skill(str(folder), tmp_path)


def test_a_skill_over_the_bound_or_with_a_symlink_is_refused(tmp_path: Path) -> None:
    big = write_skill(tmp_path / "big", extra={"data.txt": "x" * (MAX_SKILL_BYTES + 1)})
    with pytest.raises(SkillProblem, match="keep a skill small"):
        read_skill(str(big), tmp_path)
    linked = write_skill(tmp_path / "linked")
    os.symlink("/etc/passwd", linked / "passwd")
    with pytest.raises(SkillProblem, match="not a regular file"):
        read_skill(str(linked), tmp_path)


def test_the_spec_lists_every_skill_problem_with_the_rest(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    write_skill(repo / ".skills" / "review")
    write_skill(tmp_path / "user" / "twin")  # the same name as the repo's skill
    (repo / ".skills" / "empty").mkdir()
    data = _spec(
        repo,
        tmp_path / "out",
        [".skills/review", str(tmp_path / "user" / "twin"), ".skills/empty", "../escape"],
    )
    found = _problems(data, tmp_path)
    assert any("skills" in p and ".." in p for p in found), found
    assert any(".skills/empty" in p and "has no SKILL.md" in p for p in found), found
    assert any("both named 'calc-review'" in p for p in found), found


def test_a_valid_skills_field_is_kept_as_written(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    write_skill(repo / ".skills" / "review")
    write_skill(tmp_path / "user" / "tdd", name="tdd")
    spec = validate_spec_data(
        _spec(repo, tmp_path / "out", [".skills/review/", str(tmp_path / "user" / "tdd")]),
        base_dir=tmp_path,
        source="spec.json",
    )
    assert spec.skills == (".skills/review", str(tmp_path / "user" / "tdd"))


def test_installed_skills_are_read_only_and_a_changed_copy_is_found(tmp_path: Path) -> None:
    skill = read_skill(str(write_skill(tmp_path / "mine", extra={"ref.md": "r\n"})), tmp_path)
    target = tmp_path / "home" / "skills"
    materialize([skill], target)
    installed = target / SKILL_NAME / "SKILL.md"
    assert installed.read_bytes() == (tmp_path / "mine" / "SKILL.md").read_bytes()
    assert installed.stat().st_mode & 0o777 == 0o444
    assert (target / SKILL_NAME).stat().st_mode & 0o777 == 0o555
    assert changed_files([skill], target) == []
    # a writer that gets past the mode (root does) is found, file by file
    os.chmod(installed, 0o644)
    installed.write_text("---\nname: calc-review\ndescription: evil\n---\n")
    os.chmod(target / SKILL_NAME, 0o755)
    (target / SKILL_NAME / "added.md").write_text("new\n")
    assert changed_files([skill], target) == [f"{SKILL_NAME}/SKILL.md", f"{SKILL_NAME}/added.md"]
    # installing again restores what was read
    materialize([skill], target)
    assert changed_files([skill], target) == []


def test_the_prompt_names_the_skills_and_the_notes_are_parsed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    spec = validate_spec_data(_spec(repo, tmp_path / "out", []), base_dir=tmp_path, source="s")
    prompt = contract.build_prompt(
        spec, round_index=1, max_rounds=1, skills=[(SKILL_NAME, SKILL_DESCRIPTION)]
    )
    assert f"`{SKILL_NAME}`: {SKILL_DESCRIPTION}" in prompt
    assert "SKILL_BEHAVIOR_NOTES:" in prompt and "read-only" in prompt
    assert "SKILL_BEHAVIOR_NOTES" not in contract.build_prompt(spec, round_index=1, max_rounds=1)
    claim = contract.parse_claim(
        "RESULT_STATUS: SUCCESS\nSUMMARY: done\nCHANGED_FILES: calc.py\n"
        "VERIFICATION: ran it\nOPEN_DECISIONS: none\n"
        "SKILL_BEHAVIOR_NOTES: the checklist missed mul; add it\n"
    )
    assert claim is not None and claim.open_decisions == ()
    assert claim.skill_behavior_notes == ("the checklist missed mul", "add it")


def test_a_backend_that_cannot_load_skills_is_refused_before_the_run(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    write_skill(repo / ".skills" / "review")
    (tmp_path / "demo.json").write_text('{"rounds": []}')
    spec = validate_spec_data(
        _spec(repo, tmp_path / "out", [".skills/review"]), base_dir=tmp_path, source="s"
    )
    with pytest.raises(PreflightError, match="cannot load them") as info:
        runner.preflight(spec, base_dir=tmp_path)
    assert "codex-cli or claude-cli" in (info.value.fix or "")


def test_codex_with_full_access_is_refused_skills_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    write_skill(repo / ".skills" / "review")
    monkeypatch.setenv("CODE_RUNNER_CODEX_BIN", "/bin/true")
    data = _spec(repo, tmp_path / "out", [".skills/review"])
    data["backend"] = "codex-cli:sandbox=danger-full-access api_key_env="
    spec = validate_spec_data(data, base_dir=tmp_path, source="s")
    with pytest.raises(PreflightError, match="danger-full-access") as info:
        runner.preflight(spec, base_dir=tmp_path)
    assert "remove `skills`" in (info.value.fix or "")


def test_dry_run_lists_the_skills_a_run_would_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": "x = 1\n"})
    write_skill(repo / ".skills" / "review")
    monkeypatch.setenv("CODE_RUNNER_CODEX_BIN", "/bin/true")
    data = _spec(repo, tmp_path / "out", [".skills/review"])
    data["backend"] = "codex-cli:api_key_env="
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(data))
    expected = read_skill(".skills/review", repo)
    shown = run_cli("dry-run", str(spec_path))
    assert shown.returncode == 0, shown.stderr
    assert (
        f"skill: {SKILL_NAME} from .skills/review (repo), sha256 {expected.sha256[:16]}: "
        "installed read-only for the worker"
    ) in shown.stdout
    as_json = run_cli("dry-run", str(spec_path), "--json")
    listed = json.loads(as_json.stdout)["skills"]
    assert [(s["name"], s["description"], s["sha256"]) for s in listed] == [
        (SKILL_NAME, SKILL_DESCRIPTION, expected.sha256)
    ]
    assert not (tmp_path / "out").exists()

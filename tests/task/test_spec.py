"""The task contract: every refusal names the field and the fix, all problems at once."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from code_runner.errors import SpecError
from code_runner.task import (
    DefinitionOfDone,
    DirtyWorktreePolicy,
    TaskSpec,
    load_spec,
    spec_json_schema,
    spec_to_request,
    validate_spec_data,
)
from code_runner.task.paths import Allowlist
from tests.helpers.git import git, make_repo


def valid_data(repo: Path, out: Path) -> dict[str, Any]:
    return {
        "task_id": "fix-auth.1",
        "title": "Fix authentication bug",
        "prompt": "Fix the TypeError in src/app.py.",
        "backend": "scripted:demo.json",
        "cwd": str(repo),
        "output_dir": str(out),
        "allowlist": ["src/app.py", "tests/"],
        "definition_of_done": {"command": "python -m pytest -q", "assertion": "passed"},
    }


@pytest.fixture(scope="module")
def shared_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One source repo for the module: validation only reads it, and repos cost ~40 ms."""
    return make_repo(tmp_path_factory.mktemp("src") / "repo", {"src/app.py": "x = 1\n"})


@pytest.fixture
def git_repo(shared_repo: Path) -> Path:
    return shared_repo


@pytest.fixture
def data(git_repo: Path, tmp_path: Path) -> dict[str, Any]:
    return valid_data(git_repo, tmp_path / "out")


def problems(
    data: dict[str, Any], base_dir: Path | None = None, *, check_repo: bool = True
) -> tuple[str, ...]:
    with pytest.raises(SpecError) as info:
        validate_spec_data(
            data, base_dir=base_dir or Path("/"), source="spec.json", check_repo=check_repo
        )
    assert info.value.exit_code == 2
    return info.value.problems


def only_problem(data: dict[str, Any], **kwargs: Any) -> str:
    found = problems(data, **kwargs)
    assert len(found) == 1, found
    return found[0]


# --- valid specs ---------------------------------------------------------------------


def test_valid_spec_has_defaults_and_absolute_paths(data: dict[str, Any], git_repo: Path) -> None:
    spec = validate_spec_data(data, base_dir=Path("/"), source="s")
    assert spec.cwd == git_repo and spec.cwd.is_absolute()
    assert spec.max_rounds == 5
    assert spec.read_context == ()
    assert spec.dirty_worktree_policy is DirtyWorktreePolicy.ISOLATED_WORKTREE
    assert (spec.apply_to_source, spec.commit_on_success, spec.rollback_on_failure) == (
        False,
        False,
        True,
    )
    assert spec.timeout_s == 3600 and spec.definition_of_done.timeout_s == 600
    assert spec.base is None
    assert spec.allowlist == ("src/app.py", "tests")


def test_spec_is_frozen(data: dict[str, Any]) -> None:
    spec = validate_spec_data(data, base_dir=Path("/"), source="s")
    with pytest.raises(ValidationError):
        spec.max_rounds = 9  # type: ignore[misc]


def test_allowlist_duplicates_are_deduped_and_policy_is_segment_aware(
    data: dict[str, Any],
) -> None:
    data["allowlist"] = ["src", "src/", "src", "README.md"]
    data["read_context"] = ["docs/a.md", "docs/a.md"]
    spec = validate_spec_data(data, base_dir=Path("/"), source="s")
    assert spec.allowlist == ("src", "README.md")
    assert spec.read_context == ("docs/a.md",)
    policy = spec.allowlist_policy
    assert isinstance(policy, Allowlist)
    assert policy.allows("src/x.py") and not policy.allows("src_evil/x.py")


def test_full_spec_with_every_field(data: dict[str, Any], git_repo: Path) -> None:
    head = git(git_repo, "rev-parse", "HEAD").strip()
    data.update(
        max_rounds=20,
        read_context=["README.md"],
        dirty_worktree_policy="isolated_worktree",
        apply_to_source=True,
        commit_on_success=True,
        rollback_on_failure=False,
        timeout_s=7 * 86400,
        base=head[:10],
    )
    data["definition_of_done"]["timeout_s"] = 86400
    spec = validate_spec_data(data, base_dir=Path("/"), source="s")
    assert spec.commit_on_success and spec.base == head[:10]


@pytest.mark.parametrize(
    "backend", ["codex", "scripted:demo.json", "openai:gpt-4o-mini", "cmd:codex exec -x"]
)
def test_backend_forms_accepted(data: dict[str, Any], backend: str) -> None:
    data["backend"] = backend
    assert validate_spec_data(data, base_dir=Path("/"), source="s").backend == backend


def test_backend_name_is_not_checked_against_a_registry(data: dict[str, Any]) -> None:
    data["backend"] = "no-such-backend"
    assert validate_spec_data(data, base_dir=Path("/"), source="s")


# --- files ---------------------------------------------------------------------------


def write_spec(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps(data))
    elif path.suffix in {".yaml", ".yml"}:
        path.write_text(yaml.safe_dump(data))
    else:
        lines = []
        for key, value in data.items():
            if not isinstance(value, dict):
                lines.append(f"{key} = {json.dumps(value)}")
        for key, value in data.items():
            if isinstance(value, dict):
                lines.append(f"[{key}]")
                lines += [f"{k} = {json.dumps(v)}" for k, v in value.items()]
        path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("name", ["spec.json", "spec.yaml", "spec.yml", "spec.toml"])
def test_load_every_format_with_paths_relative_to_the_spec_dir(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    git_repo = make_repo(tmp_path / "repo", {"src/app.py": "x = 1\n"})
    data = valid_data(Path("../repo"), Path("../records"))
    path = write_spec(tmp_path / "specs" / name, data)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(path)
    assert spec.cwd == git_repo
    assert spec.output_dir == tmp_path / "records"
    assert spec.allowlist == ("src/app.py", "tests")


def test_tilde_is_expanded(git_repo: Path, tmp_path: Path) -> None:
    data = valid_data(git_repo, Path("~/records"))
    spec = load_spec(write_spec(tmp_path / "s.json", data))
    assert spec.output_dir == Path(os.environ["HOME"]) / "records"


def test_unknown_extension_tries_json_then_yaml(git_repo: Path, tmp_path: Path) -> None:
    data = valid_data(git_repo, tmp_path / "out")
    as_json = tmp_path / "task.spec"
    as_json.write_text(json.dumps(data))
    assert load_spec(as_json).task_id == "fix-auth.1"
    as_yaml = tmp_path / "task.txt"
    as_yaml.write_text(yaml.safe_dump(data))
    assert load_spec(as_yaml).task_id == "fix-auth.1"
    neither = tmp_path / "task.cfg"
    neither.write_text("{ nope: [ }")
    with pytest.raises(SpecError) as info:
        load_spec(neither)
    (line,) = info.value.problems
    assert "not valid JSON" in line and "nor YAML" in line and ".json, .yaml or .toml" in line


def file_problem(path: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.source == str(path)
    (line,) = info.value.problems
    return line


def test_missing_file(tmp_path: Path) -> None:
    assert "does not exist; check the path" in file_problem(tmp_path / "nope.json")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    assert "is a directory" in file_problem(tmp_path)


def test_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    line = file_problem(tmp_path / "afile" / "s.json")
    assert "cannot be read (Not a directory)" in line and "check the path" in line


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(b'{"title": "caf\xe9"}')
    line = file_problem(path)
    assert "not UTF-8" in line and "offset 14" in line and "save it as UTF-8" in line


def test_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{\n  "task_id": "x",\n  "title": \n}\n')
    line = file_problem(path)
    assert line.startswith("JSON syntax error at line 4")


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("task_id: x\ntitle: [unclosed\nprompt: y\n")
    assert "YAML syntax error at line" in file_problem(path)


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('task_id = "x"\ntitle = \n')
    line = file_problem(path)
    assert line.startswith("TOML syntax error") and "line 2" in line


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("s.json", "[1, 2]", "top level must be a mapping"),
        ("s.yaml", "- a\n- b\n", "top level must be a mapping"),
        ("s.yaml", "just text\n", "top level must be a mapping"),
        ("s.yaml", "", "the file is empty"),
        ("s.json", '"x"', "top level must be a mapping"),
    ],
)
def test_top_level_must_be_a_mapping(tmp_path: Path, name: str, text: str, needle: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert needle in file_problem(path)


def test_too_large_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(" " * (1024 * 1024 + 1))
    assert "at most" in file_problem(path)


def test_duplicate_keys_are_reported_with_the_rest(git_repo: Path, tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(valid_data(git_repo, tmp_path / "out")) + "max_rounds: 3\nmax_rounds: 0\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    found = info.value.problems
    assert any("duplicate key 'max_rounds'" in p and "keep only one" in p for p in found)
    assert any(p.startswith("max_rounds:") for p in found)
    as_json = tmp_path / "s.json"
    as_json.write_text('{"task_id": "a", "task_id": "b"}')
    with pytest.raises(SpecError) as info:
        load_spec(as_json, check_repo=False)
    assert any("duplicate key 'task_id'" in p for p in info.value.problems)


def test_valid_file_with_duplicate_key_is_still_refused(git_repo: Path, tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(valid_data(git_repo, tmp_path / "out")) + "max_rounds: 3\n" * 2)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.problems) == 1


# --- overrides -----------------------------------------------------------------------


def test_overrides_apply_before_validation(git_repo: Path, tmp_path: Path) -> None:
    path = write_spec(tmp_path / "s.json", valid_data(git_repo, tmp_path / "out"))
    spec = load_spec(
        path,
        overrides={
            "max_rounds": 3,
            "backend": "openai:gpt-4o-mini",
            "title": None,
            "definition_of_done.timeout_s": 5,
        },
    )
    assert spec.max_rounds == 3 and spec.backend == "openai:gpt-4o-mini"
    assert spec.title == "Fix authentication bug", "None means 'flag not given'"
    assert spec.definition_of_done.timeout_s == 5
    assert spec.definition_of_done.command == "python -m pytest -q"
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides={"max_rounds": 99})
    assert info.value.problems[0].startswith("max_rounds:")


# --- problems, one at a time ---------------------------------------------------------


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("pythn", "did you mean 'env.python'?"), ("zzzz", "(valid fields: python, path_prepend")],
)
def test_unknown_field_inside_env_names_the_env_fields(
    data: dict[str, Any], typo: str, suggestion: str
) -> None:
    data["env"] = {typo: "x"}
    line = only_problem(data)
    assert line.startswith(f"unknown field 'env.{typo}'; ") and suggestion in line, line


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("alowlist", "allowlist"), ("max_round", "max_rounds"), ("taskid", "task_id")],
)
def test_unknown_field_suggests_the_closest(
    data: dict[str, Any], typo: str, suggestion: str
) -> None:
    data[typo] = data.get(suggestion, 1)
    line = only_problem(data)
    assert line == f"unknown field '{typo}'; did you mean '{suggestion}'?"


def test_unknown_field_without_a_close_name_lists_the_valid_ones(data: dict[str, Any]) -> None:
    data["zzzz"] = 1
    line = only_problem(data)
    assert line.startswith("unknown field 'zzzz'; remove it (valid fields: task_id, title")


def test_unknown_field_inside_definition_of_done(data: dict[str, Any]) -> None:
    data["definition_of_done"]["timeout"] = 5
    line = only_problem(data)
    assert line == (
        "unknown field 'definition_of_done.timeout'; did you mean 'definition_of_done.timeout_s'?"
    )


@pytest.mark.parametrize(
    "field",
    [
        "task_id",
        "title",
        "prompt",
        "backend",
        "cwd",
        "output_dir",
        "allowlist",
        "definition_of_done",
    ],
)
def test_missing_required_field_is_named(data: dict[str, Any], field: str) -> None:
    del data[field]
    line = only_problem(data, check_repo=False)
    assert line.startswith(f"{field}: is required but missing; add it (")


@pytest.mark.parametrize("field", ["command", "assertion"])
def test_missing_dod_field_is_named(data: dict[str, Any], field: str) -> None:
    del data["definition_of_done"][field]
    line = only_problem(data)
    assert line.startswith(f"definition_of_done.{field}: is required but missing; add it (")


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("prompt", 3, "prompt: expected a string, got a whole number 3; put it in quotes"),
        ("max_rounds", "3", "max_rounds: expected a whole number, got a string '3'"),
        ("max_rounds", True, "max_rounds: expected a whole number, got true"),
        ("max_rounds", 2.5, "max_rounds: expected a whole number"),
        ("apply_to_source", "yes", "apply_to_source: expected true or false, got a string"),
        ("allowlist", "src/app.py", "allowlist: expected a list, got a string 'src/app.py'"),
        ("definition_of_done", "pytest", "definition_of_done: expected a mapping, got a string"),
        ("cwd", 5, "cwd: expected a path (a string), got a whole number 5"),
        ("timeout_s", "10", "timeout_s: expected a number, got a string '10'"),
        ("base", 123, "base: expected a string, got a whole number 123; put it in quotes"),
        ("dirty_worktree_policy", "reuse", "dirty_worktree_policy: expected one of: "
                                           "'isolated_worktree', got a string 'reuse'"),
    ],
)  # fmt: skip
def test_wrong_types_name_field_and_expectation(
    data: dict[str, Any], field: str, value: object, needle: str
) -> None:
    data[field] = value
    assert needle in only_problem(data, check_repo=False)


def test_allowlist_item_of_wrong_type(data: dict[str, Any]) -> None:
    data["allowlist"] = ["src", 7]
    assert (
        only_problem(data)
        == "allowlist[1]: expected a string, got a whole number 7; put it in quotes"
    )


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("task_id", "a/b", "task_id: is not in the allowed form"),
        ("task_id", ".hidden", "starting with a letter or digit"),
        ("task_id", "x" * 129, "task_id: is not in the allowed form"),
        ("title", "", "title: is empty"),
        ("title", "   ", "title: is blank; write some text"),
        ("title", "t" * 201, "title: string should have at most 200 characters"),
        ("prompt", "\n", "prompt: is blank"),
        ("backend", "", "backend: '' is not a backend; write NAME or NAME:ARG"),
        ("backend", "openai:", "is not a backend"),
        ("backend", ":x", "is not a backend"),
        ("max_rounds", 0, "max_rounds: input should be greater than or equal to 1"),
        ("max_rounds", 21, "use a whole number from 1 to 20"),
        ("timeout_s", 0, "timeout_s: input should be greater than 0"),
        ("timeout_s", 7 * 86400 + 1, "at most 604800 (7 days)"),
        ("timeout_s", float("nan"), "timeout_s: input should be a finite number"),
        ("base", "-x", "base: '-x' is not a commit-ish"),
        ("base", "a b", "not a commit-ish"),
        ("cwd", "", "cwd: is empty; give a directory path"),
        ("output_dir", "a\0b", "output_dir: contains a NUL byte"),
        (
            "prompt",
            "bad \ud800 char",
            "prompt: contains a character that cannot be written as UTF-8",
        ),
        ("cwd", "bad\ud800", "cwd: contains a character that cannot be written as UTF-8"),
    ],
)
def test_bad_values_name_field_and_fix(
    data: dict[str, Any], field: str, value: object, needle: str
) -> None:
    data[field] = value
    assert needle in only_problem(data, check_repo=False)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (0, "definition_of_done.timeout_s: input should be greater than 0"),
        (86401, "at most 86400 (1 day)"),
    ],
)
def test_dod_timeout_bounds(data: dict[str, Any], value: float, needle: str) -> None:
    data["definition_of_done"]["timeout_s"] = value
    assert needle in only_problem(data)


@pytest.mark.parametrize(
    ("command", "needle"),
    [("", "is empty; give the shell command"), ("a\0b", "contains a NUL byte")],
)
def test_dod_command_problems(data: dict[str, Any], command: str, needle: str) -> None:
    data["definition_of_done"]["command"] = command
    line = only_problem(data)
    assert line.startswith("definition_of_done.command:") and needle in line


@pytest.mark.parametrize(
    ("assertion", "needle"),
    [
        ("", "is empty"),
        ("exit_code = 0", "did you mean `exit_code == 0`?"),
        ("exit_code >= 0", "write `exit_code == N` or `exit_code != N`"),
        ("stdout_regex:(", "not a valid Python regular expression"),
        ("stderr_regex:*x", "not a valid Python regular expression"),
    ],
)
def test_assertion_that_does_not_parse(data: dict[str, Any], assertion: str, needle: str) -> None:
    data["definition_of_done"]["assertion"] = assertion
    line = only_problem(data)
    assert line.startswith("definition_of_done.assertion: ") and needle in line


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("/etc/passwd", "is absolute; use a path relative to the repository root"),
        ("../outside", "contains a `..` segment"),
        ("src/./app.py", "contains a `.` segment"),
        (".git/config", "names git's own directory"),
        (".GIT/config", "names git's own directory"),
        (".git./hooks", "names git's own directory"),
        ("GIT~1/hooks", "names git's own directory"),
        (".g\u200cit/hooks", "control, bidi or zero-width"),
        ("src/\u202eevil.py", "control, bidi or zero-width"),
        ("src/a\nb.py", "control, bidi or zero-width"),
        ("x/" + "a" * 300, "longer than 255 bytes"),
        ("~/x", "starts with `~`"),
        ("", "is empty"),
    ],
)
@pytest.mark.parametrize("field", ["allowlist", "read_context"])
def test_path_entries_follow_git_path_rules(
    data: dict[str, Any], field: str, entry: str, needle: str
) -> None:
    data[field] = ["src/app.py", entry]
    line = only_problem(data)
    assert line.startswith(f"{field}[1]: ") and needle in line
    assert "\n" not in line


def test_empty_allowlist(data: dict[str, Any]) -> None:
    data["allowlist"] = []
    line = only_problem(data)
    assert line.startswith("allowlist: is empty; list at least one repo-relative file")


def test_commit_on_success_needs_apply_to_source(data: dict[str, Any]) -> None:
    data["commit_on_success"] = True
    line = only_problem(data)
    assert line.startswith("commit_on_success: needs apply_to_source: true")
    assert "set apply_to_source to true or commit_on_success to false" in line
    data["apply_to_source"] = False
    assert only_problem(data) == line


def test_commit_on_success_is_reported_alongside_field_errors(data: dict[str, Any]) -> None:
    data["commit_on_success"] = True
    data["max_rounds"] = 0
    found = problems(data)
    assert len(found) == 2
    assert any(p.startswith("commit_on_success:") for p in found)


# --- source checks -------------------------------------------------------------------


def test_cwd_not_a_git_repo(data: dict[str, Any], tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    data["cwd"] = str(plain)
    line = only_problem(data)
    assert line.startswith(f"cwd: {plain} is not a git repository")
    assert "point `cwd` at a git repository" in line
    assert validate_spec_data(data, base_dir=Path("/"), source="s", check_repo=False)


def test_cwd_missing_directory(data: dict[str, Any], tmp_path: Path) -> None:
    data["cwd"] = str(tmp_path / "gone")
    line = only_problem(data)
    assert line.startswith(f"cwd: {tmp_path / 'gone'} is not a directory")
    assert "set `cwd`" in line


def test_cwd_repo_without_commits(data: dict[str, Any], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    data["cwd"] = str(empty)
    line = only_problem(data)
    assert line.startswith("cwd: the source repo") and "has no commits yet" in line


def test_base_must_exist_in_the_source(data: dict[str, Any]) -> None:
    data["base"] = "no-such-branch"
    line = only_problem(data)
    assert line.startswith("base: 'no-such-branch' is not a commit in the source repo")
    data["base"] = "main"
    assert validate_spec_data(data, base_dir=Path("/"), source="s").base == "main"


@pytest.mark.parametrize("inside", ["", "out", "src/deeper/out", ".git/out"])
def test_output_dir_inside_the_source_is_refused(
    data: dict[str, Any], git_repo: Path, inside: str
) -> None:
    data["output_dir"] = str(git_repo / inside) if inside else str(git_repo)
    line = only_problem(data)
    assert line.startswith("output_dir: ") and "is inside the source repo" in line
    assert line.endswith("choose a directory outside it")


def test_output_dir_through_a_symlink_into_the_source(
    data: dict[str, Any], git_repo: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(git_repo / "src")
    data["output_dir"] = str(link)
    line = only_problem(data)
    assert "is inside the source repo" in line and "resolves to" in line
    data["output_dir"] = str(link / "new" / "dir")
    assert "is inside the source repo" in only_problem(data)


def test_output_dir_inside_repo_when_cwd_is_a_subdirectory(
    data: dict[str, Any], git_repo: Path
) -> None:
    data["cwd"] = str(git_repo / "src")
    data["output_dir"] = str(git_repo / "records")
    assert "is inside the source repo" in only_problem(data)


def test_output_dir_inside_cwd_is_refused_without_git(data: dict[str, Any], tmp_path: Path) -> None:
    data["cwd"] = str(tmp_path / "not-yet")
    data["output_dir"] = str(tmp_path / "not-yet" / "out")
    assert "is inside the source repo" in only_problem(data, check_repo=False)


def test_output_dir_that_is_a_file(data: dict[str, Any], tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    data["output_dir"] = str(afile)
    assert "exists and is not a directory" in only_problem(data)


def test_output_dir_next_to_the_source_is_fine(data: dict[str, Any], tmp_path: Path) -> None:
    data["output_dir"] = str(tmp_path / "repo-records")
    assert validate_spec_data(data, base_dir=Path("/"), source="s")


# --- all at once ---------------------------------------------------------------------


def test_four_errors_give_four_problems(data: dict[str, Any], git_repo: Path) -> None:
    data["alowlist"] = data.pop("allowlist")
    data["max_rounds"] = 0
    data["definition_of_done"]["assertion"] = "stdout_regex:("
    data["output_dir"] = str(git_repo / "out")
    found = problems(data)
    assert len(found) == 5, found  # the typo is both unknown and a missing allowlist
    starts = sorted(p.split(":")[0] for p in found)
    assert starts == sorted(
        [
            "allowlist",
            "definition_of_done.assertion",
            "max_rounds",
            "output_dir",
            "unknown field 'alowlist'; did you mean 'allowlist'?",
        ]
    )


def test_exactly_four_problems(data: dict[str, Any], git_repo: Path) -> None:
    data["task_id"] = "bad id"
    data["allowlist"] = ["/abs"]
    data["definition_of_done"]["assertion"] = "exit_code => 0"
    data["output_dir"] = str(git_repo)
    found = problems(data)
    assert len(found) == 4, found
    assert [p.split(":")[0] for p in found] == [
        "task_id",
        "allowlist[0]",
        "definition_of_done.assertion",
        "output_dir",
    ]


def test_spec_error_message_is_plain(data: dict[str, Any]) -> None:
    data["max_rounds"] = "many"
    data["extra"] = 1
    with pytest.raises(SpecError) as info:
        validate_spec_data(data, base_dir=Path("/"), source="spec.yaml")
    text = info.value.render()
    assert text.startswith("spec.yaml: 2 problems:")
    for leak in ("pydantic", "validation error", "https://", "Traceback", "For further"):
        assert leak not in text


def test_top_level_not_a_mapping_in_data() -> None:
    with pytest.raises(SpecError) as info:
        validate_spec_data([1, 2], base_dir=Path("/"), source="s")  # type: ignore[arg-type]
    assert "top level must be a mapping" in info.value.problems[0]


def test_non_string_keys(data: dict[str, Any]) -> None:
    data[3] = "x"  # type: ignore[index]
    assert only_problem(data) == "field names must be strings; got a whole number 3"


# --- schema and request --------------------------------------------------------------


def test_json_schema_describes_the_contract() -> None:
    schema = spec_json_schema()
    json.dumps(schema)
    assert schema["title"] == "code-runner task spec"
    assert isinstance(schema["description"], str) and "allowlist" in schema["description"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert isinstance(props, dict)
    assert set(props) == set(TaskSpec.model_fields)
    for name, prop in props.items():
        assert prop.get("description"), f"{name} has no description"
    assert props["allowlist"]["minItems"] == 1
    assert props["max_rounds"]["minimum"] == 1 and props["max_rounds"]["maximum"] == 20
    assert props["task_id"]["pattern"].startswith("^[A-Za-z0-9]")
    assert set(schema["required"]) == {  # type: ignore[call-overload]
        "task_id", "title", "prompt", "backend", "cwd", "output_dir", "allowlist",
        "definition_of_done",
    }  # fmt: skip


def test_request_is_json_safe_and_round_trips(data: dict[str, Any]) -> None:
    spec = validate_spec_data(data, base_dir=Path("/"), source="s")
    request = spec_to_request(spec)
    assert json.loads(json.dumps(request)) == request
    assert (
        request["cwd"] == str(spec.cwd) and request["dirty_worktree_policy"] == "isolated_worktree"
    )
    assert validate_spec_data(request, base_dir=Path("/elsewhere"), source="r") == spec


def test_definition_of_done_parsed_assertion() -> None:
    dod = DefinitionOfDone(command="true", assertion="exit_code == 0")
    assert dod.parsed_assertion.value == 0
    with pytest.raises(ValidationError):
        DefinitionOfDone(command="true", assertion="exit_code = 0")


def test_relative_paths_without_base_dir_use_the_process_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "a"})
    monkeypatch.chdir(tmp_path)
    spec = TaskSpec.model_validate(valid_data(Path("r"), Path("out")))
    assert spec.cwd == repo and spec.output_dir == tmp_path / "out"


@pytest.mark.parametrize("typed", ["exit code == 0", "exit_code=0", "stdout-regex:^ok$"])
def test_a_mistyped_assertion_is_refused_with_did_you_mean(
    data: dict[str, Any], typed: str
) -> None:
    data["definition_of_done"]["assertion"] = typed
    found = problems(data)
    assert len(found) == 1 and found[0].startswith("definition_of_done.assertion"), found
    assert "did you mean" in found[0]

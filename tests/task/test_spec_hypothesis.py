"""Generated specs never give a traceback: the answer is a TaskSpec or a SpecError, always."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from code_runner.errors import SpecError
from code_runner.task import TaskSpec, load_spec, validate_spec_data
from tests.helpers.git import make_repo

FIELDS = [
    "task_id", "title", "prompt", "backend", "cwd", "output_dir", "allowlist",
    "definition_of_done", "max_rounds", "read_context", "dirty_worktree_policy",
    "apply_to_source", "commit_on_success", "rollback_on_failure", "timeout_s", "base",
]  # fmt: skip
DOD_FIELDS = ["command", "assertion", "timeout_s"]

# Text that reaches the interesting corners: path rules, git names, bidi, NUL, surrogates.
tricky_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "", " ", "~", "~nobody/x", "..", ".", "/", "/etc", ".git", ".GIT ", "git~1", "src/",
            "src//x", "a\0b", "\u202e", "\ud800", "exit_code == 0", "exit_code = 1",
            "stdout_regex:(", "json_has_keys:", "contains:", "passed", "-rf", "main", "HEAD",
            "isolated_worktree", "scripted:demo.json", "x" * 300,
        ]
    ),
)  # fmt: skip
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    tricky_text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS + DOD_FIELDS), st.text(max_size=8)),
                        inner, max_size=4),
    ),
    max_leaves=8,
)  # fmt: skip
keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=12), st.integers(), st.none())
mappings = st.dictionaries(keys, json_values, max_size=10)


def check(data: Any, base_dir: Path, *, check_repo: bool) -> TaskSpec | None:
    """The property: a TaskSpec or a SpecError with plain one-line problems, nothing else."""
    try:
        spec = validate_spec_data(data, base_dir=base_dir, source="gen", check_repo=check_repo)
    except SpecError as exc:
        assert exc.problems, "a SpecError must say what is wrong"
        for problem in exc.problems:
            assert isinstance(problem, str) and problem.strip()
            assert "\n" not in problem and "\r" not in problem
            assert "pydantic" not in problem and "https://" not in problem
        assert exc.render()
        return None
    assert isinstance(spec, TaskSpec)
    assert spec.cwd.is_absolute() and spec.output_dir.is_absolute()
    assert spec.allowlist, "a valid spec always has an allowlist"
    return spec


@settings(max_examples=120, deadline=None, database=None)
@given(data=st.one_of(mappings, json_values))
def test_arbitrary_data_is_a_spec_or_a_spec_error(data: Any) -> None:
    check(data, Path("/nonexistent/base"), check_repo=False)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("hyp") / "repo", {"src/app.py": "x = 1\n"})


def valid(source: Path) -> dict[str, Any]:
    return {
        "task_id": "t1",
        "title": "Title",
        "prompt": "Do it.",
        "backend": "scripted:demo.json",
        "cwd": str(source),
        "output_dir": str(source.parent / "out"),
        "allowlist": ["src/app.py"],
        "definition_of_done": {"command": "true", "assertion": "exit_code == 0"},
    }


@st.composite
def mutations(draw: st.DrawFn) -> list[tuple[str, str | None, str, Any]]:
    """A list of (op, nested_in, field, value): set or delete a top-level or DoD field."""
    steps = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(["set", "set", "delete"]))
        nested = draw(st.sampled_from([None, None, "definition_of_done"]))
        names = DOD_FIELDS if nested else FIELDS
        field = draw(st.one_of(st.sampled_from(names), st.text(min_size=1, max_size=10)))
        steps.append((op, nested, field, draw(json_values)))
    return steps


def mutate(base: dict[str, Any], steps: list[tuple[str, str | None, str, Any]]) -> dict[str, Any]:
    data = copy.deepcopy(base)
    for op, nested, field, value in steps:
        target = data
        if nested is not None:
            inner = data.get(nested)
            if not isinstance(inner, dict):
                continue
            target = inner
        if op == "delete":
            target.pop(field, None)
        else:
            target[field] = value
    return data


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=mutations())
def test_mutated_valid_spec_is_a_spec_or_a_spec_error(
    source: Path, steps: list[tuple[str, str | None, str, Any]]
) -> None:
    data = mutate(valid(source), steps)
    check(data, source.parent, check_repo=True)


def test_the_unmutated_spec_is_valid(source: Path) -> None:
    """Guards the property above: if the base were invalid, every mutation would 'pass'."""
    assert check(valid(source), source.parent, check_repo=True) is not None


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.builds(lambda v: json.dumps(v, default=str), json_values),
        st.builds(lambda v: yaml.safe_dump(v, allow_unicode=True), json_values),
    ),
    suffix=st.sampled_from([".json", ".yaml", ".toml", ".spec"]),
)
def test_arbitrary_files_are_a_spec_or_a_spec_error(tmp_path: Path, text: str, suffix: str) -> None:
    path = tmp_path / f"gen{suffix}"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        load_spec(path, check_repo=False)
    except SpecError as exc:
        assert exc.problems and all("\n" not in p for p in exc.problems)

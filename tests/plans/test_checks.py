"""`code-runner plan validate` through the real CLI: one clear message per bad input,
exit 2, no traceback, nothing created; the projected file state against a real repo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.git import make_repo
from tests.helpers.plan_data import BASE_FILES, cli, file, item, plan_data

pytestmark = pytest.mark.integration


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", BASE_FILES)


def validate(tmp_path: Path, repo: Path, data: Any, *extra: str, name: str = "plan.yaml") -> Any:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return cli("plan", "validate", str(path), "--source", str(repo), *extra)


def one_problem(done: Any) -> str:
    assert done.returncode == 2, done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert "1 problem:" in done.stderr, done.stderr
    return str(done.stderr)


def test_a_valid_plan_lists_each_argv_and_creates_nothing(
    tmp_path: Path, repo: Path, isolated_dirs: Path
) -> None:
    before = sorted(p.name for p in isolated_dirs.rglob("*"))
    done = validate(tmp_path, repo, plan_data(), "--allow-cmd", '["python","-m","pytest","-q"]')
    assert done.returncode == 0, done.stderr
    assert '["python", "-m", "pytest", "-q"] approved' in done.stdout
    assert "recorded as unverified" in done.stdout
    assert sorted(p.name for p in isolated_dirs.rglob("*")) == before
    as_json = validate(tmp_path, repo, plan_data(), "--json")
    report = json.loads(as_json.stdout)
    assert report["valid"] and report["items"] == ["P1", "P2", "P3"]
    assert {c["approved"] for c in report["commands"]} == {False}


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([item(1, [file("src/app.py")]), item(2, [file("README.md")], ["P3"]),
          item(3, [file("README.md")])], "P3 runs later"),
        ([item(1, [file("src/app.py")], ["P1"])], "depends on itself"),
        ([item(1, [file("src/app.py")]), item(1, [file("README.md")])], "P1 is used twice"),
        ([item(2, [file("src/app.py")]), item(1, [file("README.md")])], "in run order"),
        ([item(1, [file("README.md", "add")])], "README.md already exists; use kind edit"),
        ([item(1, [file("src/missing.py")])], "does not exist at the base commit"),
        ([item(1, [file("src/app.py", "delete")]), item(2, [file("src/app.py")])],
         "an earlier item deleted or renamed it away"),
        ([item(1, [file("docs/new.md", "rename", "docs/usage.md")]),
          item(2, [file("docs/usage.md")])], "an earlier item deleted or renamed it away"),
        ([item(1, [file("README.md", "rename", "docs/usage.md")])], "README.md already exists"),
        ([item(1, [file("src/new.py", "add")]), item(2, [file("src/new.py")])],
         "add P1 to depends_on"),
        ([item(1, [file("src", "add")])], "src is a directory"),
        ([item(1, [file("src/app.py/x", "add")])], "lies beneath src/app.py"),
        ([item(1, [file("SRC/APP.py")])], "spelled 'src/app.py'"),
        ([item(1, [file(".git/config")])], "names git's own directory"),
        ([item(1, [file("src/.GIT/x")])], "names git's own directory"),
        ([item(1, [file("src/app.py", "edit", "README.md")])], "only for kind rename"),
        ([item(1, [file("src/app.py"), file("src/app.py")])], "already declared in this item"),
        ([item(1, [file("src/app.py")], cmd="pytest; rm -rf /")], "';' outside quotes"),
    ],
)  # fmt: skip
def test_each_bad_plan_gets_one_clear_message(
    tmp_path: Path, repo: Path, items: list[dict[str, Any]], expected: str
) -> None:
    assert expected in one_problem(validate(tmp_path, repo, plan_data(*items)))


def test_unsafe_yaml_and_field_errors_are_one_line_each(tmp_path: Path, repo: Path) -> None:
    text = yaml.safe_dump(plan_data()).replace("summary: A small plan.", "summary: &s A plan.")
    assert "anchors are not allowed" in one_problem(validate(tmp_path, repo, text))
    data = plan_data()
    data["items"][0]["files"][0]["kind"] = "move"
    data["items"][1]["tittle"] = "x"
    done = validate(tmp_path, repo, data)
    assert done.returncode == 2 and "2 problems" in done.stderr
    assert "items[0] (P1).files[0].kind: expected one of: 'edit', 'add'" in done.stderr
    assert "unknown field 'items[1] (P2).tittle'" in done.stderr


def test_an_unapproved_argv_says_how_to_approve_it(tmp_path: Path, repo: Path) -> None:
    done = validate(tmp_path, repo, plan_data())
    assert done.returncode == 0
    assert "NOT approved" in done.stdout
    assert """--allow-cmd '["python", "-m", "pytest", "-q"]'""" in done.stdout


def test_the_source_repos_config_cannot_approve_a_command(tmp_path: Path) -> None:
    files = {
        **BASE_FILES,
        "code-runner.toml": '[plans]\nallowed_commands = [["python","-m","pytest","-q"]]\n',
    }
    repo = make_repo(tmp_path / "hostile", files)
    done = validate(tmp_path, repo, plan_data(), "--json")
    assert {c["approved"] for c in json.loads(done.stdout)["commands"]} == {False}


def test_schema_is_json_schema_with_every_field_required() -> None:
    done = cli("plan", "schema")
    schema = json.loads(done.stdout)
    assert schema["required"] == ["schema_version", "issue", "revision", "summary", "items",
                                  "questions"]  # fmt: skip
    assert schema["additionalProperties"] is False

"""Case aliases (spec 9.4): paths are compared by one key that folds case and Unicode form,
whatever the checkout's `core.ignorecase` says, so a plan means the same file on the
case-insensitive checkouts its commits may later land on. `plan validate` refuses a
declaration that aliases another path; a run whose agent adds an alias of an existing
file is a violation with no commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.git import git, make_repo
from tests.helpers.plan_data import BASE_FILES, cli, file, item, plan_data
from tests.helpers.plan_runs import (
    FIXED,
    calc_source,
    plan_item,
    put,
    run_plan,
    write_plan,
    write_script,
)
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.integration

ALIASES = [
    ([item(1, [file("readme.md")])], "P1).files[0]: 'readme.md' is spelled 'README.md'"),
    ([item(1, [file("Readme.md", "add")])], "Readme.md already exists (as README.md)"),
    ([item(1, [file("Foo.py", "add"), file("foo.py", "add")])],
     "'foo.py' is already declared in this item (files[0])"),
    ([item(1, [file("README.md"), file("readme.md")])], "already declared in this item"),
    ([item(1, [file("Foo.py", "add")]), item(2, [file("foo.py", "add")], ["P1"])],
     "P2).files[0]: foo.py already exists (as Foo.py)"),
    ([item(1, [file("docs/Guide.md", "rename", "docs/usage.md")]),
      item(2, [file("DOCS/guide.md")], ["P1"])], "'DOCS/guide.md' is spelled 'docs/Guide.md'"),
    ([item(1, [file("Cafe\u0301.md", "add"), file("caf\u00e9.md", "add")])],
     "already declared in this item"),
]  # fmt: skip


@pytest.mark.parametrize("ignorecase", ["true", "false"])
@pytest.mark.parametrize(("items", "expected"), ALIASES)
def test_a_case_alias_is_refused_at_validate_on_any_checkout(
    tmp_path: Path, ignorecase: str, items: list[dict[str, Any]], expected: str
) -> None:
    repo = make_repo(tmp_path / "repo", BASE_FILES)
    git(repo, "config", "core.ignorecase", ignorecase)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_data(*items), sort_keys=False))
    done = cli("plan", "validate", str(path), "--source", str(repo))
    assert done.returncode == 2, done.stdout
    assert "Traceback" not in done.stderr
    assert expected in done.stderr, done.stderr


def test_the_same_spelling_is_one_path_and_valid(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BASE_FILES)
    git(repo, "config", "core.ignorecase", "true")
    data = plan_data(item(1, [file("Foo.py", "add")]), item(2, [file("Foo.py")], ["P1"]))
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    done = cli("plan", "validate", str(path), "--source", str(repo))
    assert done.returncode == 0, done.stderr


def test_an_agent_adding_a_case_alias_is_a_violation_with_no_commit(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    before = fingerprint(source)
    plan = write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")]))
    write_script(tmp_path, "P1", [put("calc.py", FIXED), put("CALC.py", "x = 1\n")])
    _, status = run_plan(plan, source, code=1)
    assert status["status"] == "needs_human", status
    p1 = status["items"][0]
    assert p1["commit"] is None and p1["state"] == "failed"
    assert "CALC.py" in p1["findings"][0]["detail"]
    assert "case folding" in p1["findings"][0]["detail"]
    assert status["head"] == status["base"]
    assert fingerprint(source) == before

"""`plan amend --edits`: plan-edit operations checked for shape, applied in order to the
revision they name, then every check of a whole plan; through the real CLI and store, the
edits are a user action (replayed, refused against another revision) and may settle a
scope pause."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from code_runner import dirs
from code_runner.plans.edits import apply_edits, read_edits
from code_runner.plans.model import Plan
from code_runner.plans.outcome import Commit, Outcome
from code_runner.plans.states import RunEnd
from code_runner.plans.store import PlanStore
from code_runner.repo import git as gitmod
from tests.helpers.git import make_repo
from tests.helpers.plan_data import BASE_FILES, cli, file, item, plan_data

NULLS = dict.fromkeys(
    ("field", "value", "file", "check", "check_index", "depends_on", "new_item"), None
)


def edit(op: str, item_id: str, **payload: Any) -> dict[str, Any]:
    return {"op": op, "item": item_id, "summary": f"{op} on {item_id}", "reason": "It helps.",
            **NULLS, **payload}  # fmt: skip


def edits_file(tmp_path: Path, *edits: dict[str, Any], base: int = 1) -> Path:
    path = tmp_path / "edits.json"
    body = {"schema_version": 1, "base_revision": base, "reply": "", "edits": list(edits)}
    path.write_text(json.dumps(body))
    return path


def test_every_op_applies_in_order_to_a_copy(tmp_path: Path) -> None:
    plan = Plan.model_validate(plan_data())
    new_item = item(4, [file("README.md")], ["P1"])
    edits, problems = read_edits(
        edits_file(
            tmp_path,
            edit("set_field", "P1", field="title", value="Item one, renamed"),
            edit("add_file", "P1", file=file("docs/new.md", "add")),
            edit("update_file", "P1", file={**file("src/app.py"), "change": "Say why."}),
            edit("remove_file", "P2", value="src/new.py"),
            edit("add_file", "P2", file=file("README.md")),
            edit("add_check", "P2", check={"type": "check", "text": "Reads well."}),
            edit("remove_check", "P2", check_index=0),
            edit("set_depends", "P3", depends_on=[]),
            edit("add_item", "P4", new_item=new_item),
            edit("remove_item", "P3"),
        )
    )
    assert edits is not None, problems
    data, problems = apply_edits(plan, edits)
    assert data is not None, problems
    p1, p2, p4 = data["items"]
    assert p1["title"] == "Item one, renamed"
    assert [f["path"] for f in p1["files"]] == ["src/app.py", "src/new.py", "docs/new.md"]
    assert p1["files"][0]["change"] == "Say why."
    assert [f["path"] for f in p2["files"]] == ["README.md"]
    assert p2["acceptance"] == [{"type": "check", "text": "It works."},
                                {"type": "check", "text": "Reads well."}]  # fmt: skip
    assert p4 == new_item
    assert plan.items[0].title == "Item 1"  # the revision itself is untouched


def test_every_shape_and_apply_problem_is_named_at_once(tmp_path: Path) -> None:
    edits, problems = read_edits(
        edits_file(
            tmp_path,
            edit("set_field", "P1", field="title"),
            edit("remove_item", "P2", value="x"),
            edit("add_item", "P5", new_item=item(4, [file("README.md")])),
        )
    )
    assert edits is None
    assert problems == [
        "edits[0] (set_field): value is required",
        "edits[1] (remove_item): value must be null for remove_item",
        "edits[2] (add_item): item must be the new item's id (P4)",
    ]
    edits, _ = read_edits(
        edits_file(
            tmp_path,
            edit("remove_item", "P9"),
            edit("update_file", "P1", file=file("README.md")),
            edit("remove_check", "P1", check_index=7),
        )
    )
    assert edits is not None
    data, problems = apply_edits(Plan.model_validate(plan_data()), edits)
    assert data is None and len(problems) == 3
    assert "no such item" in problems[0] and "add_file" in problems[1] and "past" in problems[2]
    missing, problems = read_edits(tmp_path / "nope.json")
    assert missing is None and problems


@pytest.mark.integration
def test_amend_edits_through_the_cli_settles_a_scope_pause(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", BASE_FILES)
    base = gitmod.Repo(repo / ".git", repo).out("rev-parse", "HEAD")
    with PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        row, _ = store.import_plan(Plan.model_validate(plan_data()), source_dir=repo,
                                   source_git_dir=repo / ".git", base=base)  # fmt: skip
        plan_id = str(row["plan_id"])
        attempt = store.admit(plan_id, "P1", expected_state_version=row["state_version"],
                              budget_s=3600)  # fmt: skip
        store.mark_running(attempt["id"])
        commit = Commit(sha="c" * 40, tree="d" * 40, ref="refs/code-runner/attempts/x")
        store.settle(attempt["id"], Outcome(RunEnd.OK, commit=commit, out_of_scope=("notes.txt",)))
        assert store.plan(plan_id)["status"] == "needs_amendment"

    bad = edits_file(tmp_path, edit("add_file", "P1", file=file("README.md", "add")))
    done = cli("plan", "amend", plan_id, "--edits", str(bad))
    assert done.returncode == 2 and "README.md already exists" in done.stderr
    assert "Traceback" not in done.stderr

    good = edits_file(tmp_path, edit("add_file", "P1", file=file("notes.txt", "add")))
    done = cli("plan", "amend", plan_id, "--edits", str(good), "--json")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    assert first["revision"] == 2 and first["edits"] == ["add_file P1: add_file on P1"]
    again = json.loads(cli("plan", "amend", plan_id, "--edits", str(good), "--json").stdout)
    assert again["replayed"] and again["revision"] == 2  # no third revision
    older = cli("plan", "amend", plan_id, "--edits", str(good), "--action-id",
                "5b8f0c7e-2d1a-4c3b-9e8f-0a1b2c3d4e5f")  # fmt: skip
    assert older.returncode == 2 and "at revision 2, not 1" in older.stderr  # written for r1

    go = cli("plan", "approve", plan_id, "--continue", "--json")
    assert go.returncode == 0, go.stderr
    assert json.loads(go.stdout)["status"] == "ready"
    db = sqlite3.connect(dirs.state_dir() / "plans" / "plans.sqlite")
    origins = db.execute("SELECT origin FROM revisions WHERE plan_id = ? ORDER BY revision",
                         (plan_id,)).fetchall()  # fmt: skip
    db.close()
    assert origins == [("import",), ("edit",)]

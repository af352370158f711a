"""`plan amend --edits`: plan-edit operations (codeboost's edit format, version 1) turned
into the next revision.

An edits file names the revision it was written against (`base_revision`) and up to ten
operations, each with every field (the ones its `op` does not use are `null`): add or remove
an item, set an item's title or intent, add, replace or remove a file declaration (a
declaration's path never changes: that needs a whole new plan), add or remove an acceptance
check, or replace `depends_on`. The operations are applied in order to a copy of that
revision; the result must then pass every check a whole plan passes (the caller runs them),
and the amend itself is a compare-and-swap on `base_revision`, so edits written against an
older revision are refused rather than rebased.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from code_runner.plans.document import read_plan_document
from code_runner.plans.model import (
    Acceptance,
    Count,
    DeclaredFile,
    Item,
    ItemId,
    Plan,
    Text400,
    _Strict,
    model_at,
)
from code_runner.problems import Text, describe_all

MAX_EDITS = 10


class EditOp(StrEnum):
    ADD_ITEM = "add_item"
    REMOVE_ITEM = "remove_item"
    SET_FIELD = "set_field"
    ADD_FILE = "add_file"
    UPDATE_FILE = "update_file"
    REMOVE_FILE = "remove_file"
    ADD_CHECK = "add_check"
    REMOVE_CHECK = "remove_check"
    SET_DEPENDS = "set_depends"


# What each op needs (every other payload field must be null).
USES: dict[EditOp, frozenset[str]] = {
    EditOp.ADD_ITEM: frozenset({"new_item"}),
    EditOp.REMOVE_ITEM: frozenset(),
    EditOp.SET_FIELD: frozenset({"field", "value"}),
    EditOp.ADD_FILE: frozenset({"file"}),
    EditOp.UPDATE_FILE: frozenset({"file"}),
    EditOp.REMOVE_FILE: frozenset({"value"}),
    EditOp.ADD_CHECK: frozenset({"check"}),
    EditOp.REMOVE_CHECK: frozenset({"check_index"}),
    EditOp.SET_DEPENDS: frozenset({"depends_on"}),
}
PAYLOAD = ("field", "value", "file", "check", "check_index", "depends_on", "new_item")


class Edit(_Strict):
    """One operation on the plan."""

    op: EditOp = Field(description="What to do; see USES for the fields each op needs.")
    item: ItemId = Field(description="The item it changes (for add_item: the new item's id).")
    summary: Annotated[Text, Field(min_length=1, max_length=160)]
    reason: Text400
    field: Literal["title", "intent"] | None = Field(description="set_field: which one.")
    value: Annotated[Text, Field(max_length=1200)] | None = Field(
        description="set_field: the new text; remove_file: the declared path."
    )
    file: DeclaredFile | None = Field(description="add_file, update_file: the declaration.")
    check: Acceptance | None = Field(description="add_check: the check.")
    check_index: Annotated[int, Field(strict=True, ge=0)] | None = Field(
        description="remove_check: its 0-based position."
    )
    depends_on: Annotated[list[ItemId], Field(max_length=29)] | None = Field(
        description="set_depends: the new list."
    )
    new_item: Item | None = Field(description="add_item: the whole item, appended.")


class PlanEdits(_Strict):
    """Edits to one revision of a plan."""

    schema_version: Literal[1] = Field(description="Always 1.")
    base_revision: Count = Field(description="The revision the edits were written against.")
    reply: Annotated[Text, Field(max_length=4000)] = Field(description="Why, for the record.")
    edits: list[Edit] = Field(min_length=1, max_length=MAX_EDITS)


def edits_json_schema() -> dict[str, Any]:
    schema = PlanEdits.model_json_schema()
    schema["title"] = "code-runner plan edits, version 1"
    return schema


def read_edits(path: Path) -> tuple[PlanEdits | None, list[str]]:
    """(edits, []) or (None, every problem), read as strictly as a plan file."""
    data, problems = read_plan_document(path)
    if data is None:
        return None, problems
    try:
        edits = PlanEdits.model_validate(data)
    except ValidationError as exc:
        return None, describe_all(exc, model_at=_model_at)
    wrong = [problem for index, edit in enumerate(edits.edits) for problem in _shape(index, edit)]
    return (None, wrong) if wrong else (edits, [])


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel]:
    names = tuple(part for part in loc if isinstance(part, str))
    if names[:2] == ("edits", "new_item"):
        return model_at(("items", *names[2:]))
    table: dict[tuple[str, ...], type[BaseModel]] = {
        ("edits",): Edit,
        ("edits", "file"): DeclaredFile,
        ("edits", "check"): Acceptance,
    }
    return table.get(names, PlanEdits)


def _shape(index: int, edit: Edit) -> list[str]:
    where = f"edits[{index}] ({edit.op})"
    needed = USES[edit.op]
    problems = [f"{where}: {name} is required" for name in needed if getattr(edit, name) is None]
    problems += [
        f"{where}: {name} must be null for {edit.op}"
        for name in PAYLOAD
        if name not in needed and getattr(edit, name) is not None
    ]
    if edit.op is EditOp.ADD_ITEM and edit.new_item is not None and edit.new_item.id != edit.item:
        problems.append(f"{where}: item must be the new item's id ({edit.new_item.id})")
    return problems


def apply_edits(plan: Plan, edits: PlanEdits) -> tuple[dict[str, Any] | None, list[str]]:
    """The plan's data with every edit applied in order, or every edit that cannot apply."""
    data = plan.canonical()
    problems: list[str] = []
    for index, edit in enumerate(edits.edits):
        problem = _apply(data, edit)
        if problem:
            problems.append(f"edits[{index}] ({edit.op} {edit.item}): {problem}")
    return (None, problems) if problems else (data, [])


def _apply(data: dict[str, Any], edit: Edit) -> str | None:  # noqa: C901 - one branch per op
    items: list[dict[str, Any]] = data["items"]
    found = next((i for i in items if i["id"] == edit.item), None)
    if edit.op is EditOp.ADD_ITEM:
        if found is not None:
            return "the plan already has this item"
        assert edit.new_item is not None
        items.append(edit.new_item.model_dump(mode="json"))
        return None
    if found is None:
        return "the plan has no such item"
    if edit.op is EditOp.REMOVE_ITEM:
        items.remove(found)
    elif edit.op is EditOp.SET_FIELD:
        found[str(edit.field)] = edit.value
    elif edit.op in (EditOp.ADD_FILE, EditOp.UPDATE_FILE):
        return _put_file(found, edit)
    elif edit.op is EditOp.REMOVE_FILE:
        kept = [f for f in found["files"] if f["path"] != edit.value]
        if len(kept) == len(found["files"]):
            return f"{edit.value} is not declared"
        found["files"] = kept
    elif edit.op is EditOp.ADD_CHECK:
        assert edit.check is not None
        found["acceptance"].append(edit.check.model_dump(mode="json"))
    elif edit.op is EditOp.REMOVE_CHECK:
        assert edit.check_index is not None
        if edit.check_index >= len(found["acceptance"]):
            return f"check_index {edit.check_index} is past its {len(found['acceptance'])} checks"
        del found["acceptance"][edit.check_index]
    else:
        found["depends_on"] = list(edit.depends_on or [])
    return None


def _put_file(item: dict[str, Any], edit: Edit) -> str | None:
    assert edit.file is not None
    new = edit.file.model_dump(mode="json")
    at = next((n for n, f in enumerate(item["files"]) if f["path"] == new["path"]), None)
    if edit.op is EditOp.ADD_FILE:
        if at is not None:
            return f"{new['path']} is already declared"
        item["files"].append(new)
    elif at is None:
        return f"{new['path']} is not declared (a new path is add_file)"
    else:
        item["files"][at] = new
    return None

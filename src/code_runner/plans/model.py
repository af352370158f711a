"""The plan format, version 1: field types and limits, and the JSON Schema derived from them.

Every object lists all its fields and forbids others; a field with nothing to say is `null`
or `[]`, never absent. `issue` may be `null` (a plan need not come from an issue). The
meaning checks that need more than one field (ids in order, `depends_on`, the projected
file state) live in `code_runner.plans.checks`.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

import code_runner.task.paths as paths
from code_runner.problems import Text, short

MAX_ITEMS = 30
ITEM_ID_PATTERN = r"^P[1-9][0-9]{0,2}$"


def _non_blank(value: str) -> str:
    if value.strip() == "":
        raise ValueError("is blank; write some text")
    return value


def _plan_path(value: str) -> str:
    problem = paths.path_problem(value)
    if problem:
        raise ValueError(f"{short(value)} {problem}")
    if value.endswith("/"):
        raise ValueError(f"{short(value)} ends with `/`; declare each file, not a directory")
    return value


Text120 = Annotated[Text, Field(min_length=1, max_length=120), AfterValidator(_non_blank)]
Text400 = Annotated[Text, Field(min_length=1, max_length=400), AfterValidator(_non_blank)]
Text600 = Annotated[Text, Field(min_length=1, max_length=600), AfterValidator(_non_blank)]
Text1200 = Annotated[Text, Field(min_length=1, max_length=1200), AfterValidator(_non_blank)]


PlanPath = Annotated[Text, Field(min_length=1, max_length=300), AfterValidator(_plan_path)]
ItemId = Annotated[str, Field(strict=True, pattern=ITEM_ID_PATTERN)]
Count = Annotated[int, Field(strict=True, ge=1)]


class FileKind(StrEnum):
    EDIT = "edit"
    ADD = "add"
    DELETE = "delete"
    RENAME = "rename"


class CheckType(StrEnum):
    CMD = "cmd"
    CHECK = "check"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeclaredFile(_Strict):
    """One file an item adds, changes, renames or deletes."""

    path: PlanPath = Field(description="Repo-relative path; for a rename, the new path.")
    kind: FileKind = Field(description="edit, add, delete or rename.")
    renamed_from: PlanPath | None = Field(
        description="The old path when kind is rename, otherwise null."
    )
    change: Text1200 = Field(description="What changes, naming functions and behaviour.")


class Acceptance(_Strict):
    """How to tell the item is done: a command (run without a shell) or a statement."""

    type: CheckType = Field(description="cmd (a command that must exit 0) or check.")
    text: Text400 = Field(description="The command line, or the statement to judge.")


class Item(_Strict):
    id: ItemId = Field(description="P1, P2, ... in increasing order.")
    title: Text120 = Field(description="Like a good commit subject.")
    intent: Text600 = Field(description="Why the item exists.")
    files: list[DeclaredFile] = Field(
        min_length=1, max_length=40, description="Every file the item touches."
    )
    acceptance: list[Acceptance] = Field(
        min_length=1, max_length=10, description="Include at least one cmd when you can."
    )
    depends_on: list[ItemId] = Field(max_length=29, description="Earlier item ids only.")


class Plan(_Strict):
    """A plan: items run in order, each verified on its own patch and committed by the runner."""

    schema_version: Literal[1] = Field(description="Always 1.")
    issue: Count | None = Field(description="The issue number the plan is for, or null.")
    revision: Count = Field(description="Replaced by the store with the next free number.")
    summary: Text600 = Field(description="One or two sentences.")
    items: list[Item] = Field(min_length=1, max_length=MAX_ITEMS, description="In run order.")
    questions: list[Text400] = Field(max_length=10, description="[] when none.")

    def canonical(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def content_sha256(self) -> str:
        """What makes two files the same plan: everything but the revision number."""
        data = self.canonical()
        data.pop("revision")
        return canonical_sha256(data)

    def item(self, item_id: str) -> Item:
        return next(item for item in self.items if item.id == item_id)


def canonical_sha256(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def item_sha256(item: Item) -> str:
    return canonical_sha256(item.model_dump(mode="json"))


def model_at(loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The model whose fields live at `loc` (for "did you mean" in problem lines)."""
    names = [part for part in loc if isinstance(part, str)]
    table: dict[tuple[str, ...], type[BaseModel]] = {
        (): Plan,
        ("items",): Item,
        ("items", "files"): DeclaredFile,
        ("items", "acceptance"): Acceptance,
    }
    return table.get(tuple(names), Plan)


def plan_json_schema() -> dict[str, Any]:
    schema = Plan.model_json_schema()
    schema["title"] = "code-runner plan, version 1"
    return schema

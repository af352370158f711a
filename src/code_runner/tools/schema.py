"""Tools derived from typed Python functions: name, docstring and parameters -> JSON Schema.

The function is the single source of truth: its name is the tool name, its docstring the
description, its annotated parameters (with `pydantic.Field` constraints) the argument
schema. Arguments are validated strictly against the same model the schema came from, so
what the model is told and what the runner enforces cannot drift apart.
"""

from __future__ import annotations

import copy
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from code_runner.problems import describe_all, single_model
from code_runner.tools.base import ToolResult, ToolSpec

ToolFunction = Callable[..., ToolResult]


@dataclass(frozen=True)
class ToolDef:
    """One tool: its spec for a model, the model that validates arguments, and the code."""

    spec: ToolSpec
    arguments: type[BaseModel]
    function: ToolFunction

    @property
    def name(self) -> str:
        return self.spec.name


class ArgumentsError(Exception):
    """Arguments that do not fit the schema; the message names each bad argument."""


def tool_from_function(function: ToolFunction, *, name: str | None = None) -> ToolDef:
    """Build a tool from `function` (a plain function or a bound method).

    Deriving the schema costs tens of milliseconds, so it is done once per function and
    shared by every toolbox; only the binding to an instance is per toolbox.
    """
    underlying = getattr(function, "__func__", function)
    spec, model = _derive(underlying, name or function.__name__, hasattr(function, "__self__"))
    own = ToolSpec(spec.name, spec.description, copy.deepcopy(dict(spec.parameters)))
    return ToolDef(spec=own, arguments=model, function=function)


@functools.cache
def _derive(
    function: ToolFunction, tool_name: str, bound: bool
) -> tuple[ToolSpec, type[BaseModel]]:
    hints = typing.get_type_hints(function, include_extras=True)
    fields: dict[str, Any] = {}
    params = list(inspect.signature(function).parameters.values())
    for param in params[1:] if bound else params:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"tool {tool_name}: *args/**kwargs cannot be described to a model")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    model: type[BaseModel] = create_model(
        f"{tool_name}_arguments",
        __config__=ConfigDict(extra="forbid", strict=True),
        **fields,
    )
    description = inspect.getdoc(function) or tool_name
    parameters = tidy_schema(model.model_json_schema())
    return ToolSpec(name=tool_name, description=description, parameters=parameters), model


def tidy_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's titles and spell `X | None = None` as an optional X."""
    properties: dict[str, Any] = {}
    for key, prop in schema.get("properties", {}).items():
        clean = {k: v for k, v in prop.items() if k != "title"}
        variants = clean.get("anyOf")
        if isinstance(variants, list) and clean.get("default", 0) is None:
            real = [v for v in variants if v != {"type": "null"}]
            if len(real) == 1:
                clean.pop("anyOf")
                clean.pop("default")
                clean = {**real[0], **clean}
        properties[key] = clean
    tidy: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(schema.get("required", [])),
        "additionalProperties": False,
    }
    return tidy


def validate_arguments(tool: ToolDef, args: object) -> dict[str, Any]:
    """Validated keyword arguments for `tool.function`, or ArgumentsError naming the problems."""
    if not isinstance(args, Mapping):
        raise ArgumentsError(
            f"arguments must be a JSON object, not {type(args).__name__}; "
            f"expected fields: {', '.join(tool.spec.parameters['properties']) or 'none'}"
        )
    try:
        parsed = tool.arguments.model_validate(dict(args))
    except ValidationError as exc:
        problems = describe_all(exc, model_at=single_model(tool.arguments))
        raise ArgumentsError("; ".join(problems)) from None
    return {name: getattr(parsed, name) for name in type(parsed).model_fields}

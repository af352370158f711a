"""The spec's optional `env` section: what the DoD and the agent's commands run with.

`python` names the interpreter (a path, relative to the source, or `auto` to find a `.venv`,
`venv/`, `VIRTUAL_ENV` or `CONDA_PREFIX`); `path_prepend` puts directories first on `PATH`;
`vars` sets variables, where a value `$NAME` (or `${NAME}`) takes the user's `NAME` at run
time. The record keeps the section as written, never a resolved value, and a variable whose
name says it holds a secret (a key, token, password) is refused: it would reach the agent.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from code_runner.problems import Text

_REFERENCE = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
_RESERVED = frozenset({"HOME", "TMPDIR", "PATH", "VIRTUAL_ENV", "PYTHONPATH"})


def referenced(value: str) -> str | None:
    """The user's variable a value names (`$NAME`, `${NAME}`), if it names one."""
    found = _REFERENCE.match(value)
    return (found.group(1) or found.group(2)) if found else None


class DodEnv(BaseModel):
    """The `env` section of a task spec."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    python: Annotated[Text, Field(min_length=1, max_length=4096)] = Field(
        default="auto",
        description="The interpreter the DoD's `python` is: a path (relative to the source) "
        "or 'auto' (a .venv or venv/ in the source, else VIRTUAL_ENV or CONDA_PREFIX).",
    )
    path_prepend: list[Annotated[Text, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=list,
        max_length=32,
        description="Directories put first on PATH (relative ones are under the source).",
    )
    vars: dict[str, Annotated[Text, Field(max_length=4096)]] = Field(
        default_factory=dict,
        max_length=64,
        description="Variables to set; a value '$NAME' takes the user's NAME at run time. "
        "Names that look like secrets (key, token, password) are refused.",
    )

    @field_validator("vars")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _NAME.match(name):
                raise ValueError(f"{name!r} is not a variable name")
            if name in _RESERVED:
                raise ValueError(f"{name} is set by code-runner; use python or path_prepend")
            for what in (name, referenced(text) or ""):
                if _SECRET.search(what):
                    raise ValueError(
                        f"{what} looks like a secret: it would reach the agent's commands and "
                        "the record; pass secrets another way"
                    )
        return value

    def resolved_vars(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables with each `$NAME` taken from `environ` (unset: left out)."""
        env = os.environ if environ is None else environ
        found: dict[str, str] = {}
        for name, text in self.vars.items():
            ref = referenced(text)
            if ref is None:
                found[name] = text
            elif ref in env:
                found[name] = env[ref]
        return found

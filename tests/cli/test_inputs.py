"""Hostile or broken inputs at the CLI: a clear message and exit code, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from code_runner.cli.boundary import run_cli
from code_runner.cli.main import cli

pytestmark = pytest.mark.integration

FIELDS = [
    "task_id",
    "title",
    "prompt",
    "backend",
    "cwd",
    "output_dir",
    "allowlist",
    "definition_of_done",
    "max_rounds",
    "read_context",
    "apply_to_source",
    "commit_on_success",
    "rollback_on_failure",
    "timeout_s",
    "alowlist",
    "",
]

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def invoke(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = run_cli(cli, list(argv))
    return code, err.getvalue() + out.getvalue()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(FIELDS), values, max_size=8))
def test_generated_specs_never_give_a_traceback(data: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "task.json"
        path.write_text(json.dumps(data))
        code, text = invoke("dry-run", str(path))
    assert code in (2, 3), text
    assert "Traceback" not in text
    assert text.startswith("error: ")


def test_unreadable_inputs(tmp_path: Path) -> None:
    cases = {
        "missing.json": None,
        "bad.json": "{not json",
        "list.json": "[1, 2]",
        "bad.yaml": "a: [unclosed",
        "bad.toml": "a = ",
        "binary.json": b"\xff\xfe\x00",
    }
    for name, content in cases.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content)
        for command in ("run", "dry-run"):
            code, text = invoke(command, str(path))
            assert code == 2, (name, text)
            assert "Traceback" not in text and name in text


def test_unknown_command_and_option_exit_2() -> None:
    assert invoke("nope")[0] == 2
    assert invoke("run", "--nope", "x.json")[0] == 2
    code, text = invoke("run", "x.json", "--max-rounds", "many")
    assert code == 2 and "max-rounds" in text

"""File names that are not UTF-8 (any bytes but `/` and NUL) in a run's record: the record
writer and `load_result` agree on every one. A name is held as `os.fsdecode` gives it; the
record shows a byte that is not UTF-8 as `\\xff`, and the file stays valid UTF-8 JSON that
`result` and `apply` read. The property runs through the real `RunRecord.write_result`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from code_runner import files
from code_runner.record import RunRecord, RunResult, load_result
from tests.helpers.attacks import attack, call
from tests.helpers.tasks import FIXED_BOTH, calc_repo, run_cli

pytestmark = pytest.mark.integration

NAMES = st.binary(min_size=1, max_size=40).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")
)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The result of one real run, to carry the names."""
    root = tmp_path_factory.mktemp("template")
    run = attack(root, [call("write_file", path="calc.py", content=FIXED_BOTH)], sandbox="off")
    return RunResult.model_validate(run.result)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(NAMES, min_size=1, max_size=5))
def test_any_byte_name_reads_back_as_the_record_shows_it(
    tmp_path_factory: pytest.TempPathFactory, template: RunResult, names: list[bytes]
) -> None:
    out = tmp_path_factory.mktemp("out")
    held = [os.fsdecode(name) for name in names]
    result = template.updated(
        source_status_before=[f"?? {name}" for name in held],
        source_differences=[f"{name} was added" for name in held],
        changed_files=[{"path": name, "kind": "added"} for name in held],
        dropped_changes=[{"path": name, "kind": "added", "reason": "r"} for name in held],
    )
    record = RunRecord.open(out, result.task_id, result.run_id, max_rounds=1)
    record.write_result(result)
    raw = (out / f"{result.task_id}.result.json").read_bytes()
    raw.decode("utf-8")  # strict: the file is valid UTF-8
    loaded = load_result(out / f"{result.task_id}.result.json")
    shown = [files.shown_name(name) for name in held]
    assert list(loaded.source_status_before) == [f"?? {name}" for name in shown]
    assert list(loaded.source_differences) == [f"{name} was added" for name in shown]
    assert [c.path for c in loaded.changed_files] == shown
    assert [d.path for d in loaded.dropped_changes] == shown
    for name, text in zip(names, shown, strict=True):
        # UTF-8 names exactly; any other byte as Python shows it, `\xff`
        assert text == name.decode("utf-8", "backslashreplace")


def test_a_run_beside_an_untracked_non_utf8_name_is_read_by_result_and_apply(
    tmp_path: Path,
) -> None:
    source = calc_repo(tmp_path)
    (Path(os.fsdecode(bytes(source))) / os.fsdecode(b"\xff\xfe-odd.txt")).write_bytes(b"x")
    calls = [call("write_file", path="calc.py", content=FIXED_BOTH)]
    run = attack(tmp_path, calls, sandbox="off", source=source)
    assert run.result["status"] == "passed"
    loaded = load_result(tmp_path / "out" / "fix-calc.result.json")
    assert loaded.source_status_before == ("?? \\xff\\xfe-odd.txt",)
    shown = run_cli("result", str(tmp_path / "out"))
    assert shown.returncode == 0, shown.stderr
    check = run_cli("apply", str(tmp_path / "out"), "--check")
    assert check.returncode == 0, check.stderr
    assert "would pass" in check.stdout

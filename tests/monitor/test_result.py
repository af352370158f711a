"""`result.json` read back: older records in today's words, newer ones refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from code_runner.errors import RecordError
from code_runner.monitor.result import SCHEMA_VERSION, load_result, v1_to_v2
from tests.helpers.monitor import FAST, PY, run_exec

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_checks")]


@pytest.mark.parametrize(("old", "new"), [("timed_out", "timeout"), ("killed", "stopped_by_user")])
def test_a_schema_1_record_reads_in_the_seed_words(tmp_path: Path, old: str, new: str) -> None:
    ran = run_exec(tmp_path, [*FAST, "--", PY, "-c", "print(1)"])
    assert ran.code == 0, ran.err
    data = json.loads((ran.run_dir / "result.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 2
    (ran.run_dir / "result.json").write_text(
        json.dumps({**data, "schema_version": 1, "state": old})
    )
    assert load_result(ran.run_dir).state.value == new
    assert v1_to_v2({"state": "completed"}) == {"state": "completed", "schema_version": 2}


def test_a_newer_record_is_refused_with_the_fix(tmp_path: Path) -> None:
    ran = run_exec(tmp_path, [*FAST, "--", PY, "-c", "print(1)"])
    data = json.loads((ran.run_dir / "result.json").read_text())
    (ran.run_dir / "result.json").write_text(json.dumps({**data, "schema_version": 3}))
    with pytest.raises(RecordError, match="written by a newer code-runner") as caught:
        load_result(ran.run_dir)
    assert caught.value.fix == "upgrade code-runner to read it"

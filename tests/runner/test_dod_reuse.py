"""No wasted DoD runs: the DoD runs once per distinct tree; a round that changed nothing
reuses the verdict of the same tree. Real `code-runner run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.tasks import FIXED_BOTH, PY, calc_repo, load_result, run_cli, write, write_task

pytestmark = pytest.mark.integration


def _dod_events(out: Path) -> list[dict[str, object]]:
    events = [json.loads(line) for line in (out / "fix-calc.events.jsonl").read_text().splitlines()]
    return [e for e in events if e["kind"] == "dod_finished"]


def test_rounds_that_change_nothing_reuse_the_verdict(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    runs = tmp_path / "dod-runs"
    spec = write_task(
        tmp_path,
        source,
        [[], [], [write("calc.py", FIXED_BOTH)]],
        command=f"echo run >> {runs} && {PY} -m pytest -q -p no:cacheprovider test_calc.py",
        sandbox="off",
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert load_result(tmp_path / "out")["rounds"] == 3
    assert runs.read_text().count("run") == 2  # base, and the round that changed calc.py
    events = _dod_events(tmp_path / "out")
    assert [("reused_for_tree" in e) for e in events] == [False, True, True, False]


def test_a_dod_that_hangs_at_base_runs_once_per_tree(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    runs = tmp_path / "dod-runs"
    spec = write_task(
        tmp_path,
        source,
        [[], []],
        command=f"echo run >> {runs} && sleep 30",
        sandbox="off",
    )
    data = json.loads(spec.read_text())
    data["definition_of_done"]["timeout_s"] = 1
    spec.write_text(json.dumps(data))
    done = run_cli("run", str(spec))
    assert done.returncode == 1, done.stdout + done.stderr
    assert runs.read_text().count("run") == 1
    assert [e["passed"] for e in _dod_events(tmp_path / "out")] == [False, False, False]

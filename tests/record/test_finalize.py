"""`code-runner finalize RUN_DIR`: result.md, eval.md and skill-review.md rebuilt from the
evidence of a finished run, or of a killed one after `gc`; nothing else in the record moves."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.agent_clis import wait_for
from tests.helpers.tasks import FIXED_BOTH, PY, calc_repo, cmd, run_cli, write, write_task

pytestmark = pytest.mark.integration

REPORTS = ("fix-calc.result.md", "fix-calc.eval.md", "fix-calc.skill-review.md")


def _files(out: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def test_finalize_rewrites_the_three_reports_and_nothing_else(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]])
    assert run_cli("run", str(spec)).returncode == 0
    out = tmp_path / "out"
    before = _files(out)
    for name in REPORTS:
        (out / name).write_text("stale\n")
    (out / "fix-calc.eval.md").unlink()
    done = run_cli("finalize", str(out))
    assert done.returncode == 0, done.stderr
    after = _files(out)
    assert set(after) == set(before)
    for name, (data, mtime) in before.items():
        if name in REPORTS:
            assert after[name][0] == data, name  # the same rendering of the same evidence
        else:
            assert after[name] == (data, mtime), f"{name} changed"
    assert "**NO_SKILL_CHANGE**" in (out / "fix-calc.skill-review.md").read_text()
    assert run_cli("result", str(out)).returncode == 0  # the seal still holds


def test_a_killed_run_is_finalized_after_gc_and_not_before(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[cmd("sleep 60")]], sandbox="off")
    events = tmp_path / "out/fix-calc.events.jsonl"
    runner = subprocess.Popen(
        [PY, "-m", "code_runner", "run", str(spec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: events.exists() and '"kind": "tool_call"' in events.read_text())
        refused = run_cli("finalize", str(tmp_path / "out"))
        assert refused.returncode != 0 and "has not ended" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        runner.kill()
        runner.wait()
    assert run_cli("gc").returncode == 0
    done = run_cli("finalize", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    result_md = (tmp_path / "out/fix-calc.result.md").read_text()
    assert "abandoned" in result_md and "died" in result_md
    assert (tmp_path / "out/fix-calc.skill-review.md").exists()

"""Reproducibility capture: every record holds the code, the interpreter, seeds, the machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers.git import git, make_repo
from tests.helpers.monitor import FAST, PY, run_exec

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_checks")]

TRAIN = "import sys\nprint('epoch 0 loss 0.5')\nprint('seed', sys.argv[-1])\n"


def test_the_record_and_the_passport_carry_git_python_seeds_and_host(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"train.py": TRAIN})
    (repo / "train.py").write_text(TRAIN + "print('edited')\n")  # a dirty work tree
    run_dir = tmp_path / "run"
    ran = run_exec(repo, [*FAST, "--", PY, "train.py", "--seed", "7"], run_dir=run_dir)
    assert ran.code == 0, ran.err
    data = json.loads((run_dir / "provenance.json").read_text())
    assert data["git"]["commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert "+print('edited')" in (run_dir / "git.diff").read_text()
    assert data["python"]["python"] == sys.version.split()[0]
    assert data["seeds"] == {"seed": "7"}
    assert data["cpu"]["count"] >= 1 and data["memory_total_bytes"] > 0 and data["host"]
    result = ran.result()
    assert result.run_id == "run" and result.provenance["seeds"] == {"seed": "7"}
    assert result.stdout_tail[-1] == "edited"
    report = (run_dir / "experiment_result.md").read_text()
    passport = report.split("## Material Passport", 1)[1]
    assert "| run id | `run` |" in passport and "--seed 7" in passport
    assert "dirty, diff in `git.diff`" in passport
    assert "## Last lines of stdout" in report


def test_outside_git_and_not_python_the_passport_says_so(tmp_path: Path) -> None:
    ran = run_exec(tmp_path, [*FAST, "--", "echo", "hi"])
    passport = (ran.run_dir / "experiment_result.md").read_text().split("## Material Passport")[1]
    assert "not a git repository" in passport and "not a Python command" in passport

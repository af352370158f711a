"""A DoD that cannot start at base is a preflight error (exit 3), not a round; a DoD that
fails for a reason the agent can fix still runs rounds. Real `code-runner run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.git import make_repo
from tests.helpers.tasks import FIXED_BOTH, PY, calc_repo, load_result, run_cli, write, write_task

pytestmark = pytest.mark.integration


def _agent_rounds(out: Path) -> list[int]:
    lines = (out / "fix-calc.rounds.jsonl").read_text().splitlines()
    return [json.loads(line)["round"] for line in lines if json.loads(line)["round"] > 0]


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_a_missing_command_ends_the_run_before_any_round(tmp_path: Path, sandbox: str) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(
        tmp_path,
        source,
        [[write("calc.py", FIXED_BOTH)]],
        command=".venv/bin/python -m pytest -q test_calc.py",
        sandbox=sandbox,
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 3, done.stdout + done.stderr
    result = load_result(tmp_path / "out")
    assert result["status"] == "error"
    assert result["reason"] == "dod_cannot_start"
    assert "exit 127" in result["error"] and ".venv" in result["error"]
    assert "VIRTUAL_ENV" in result["error"]  # how to provide it
    assert _agent_rounds(tmp_path / "out") == []


def test_the_projects_own_package_missing_ends_the_run(tmp_path: Path) -> None:
    source = make_repo(
        tmp_path / "source",
        {
            "src/tinypkg/__init__.py": "def value():\n    return 1\n",
            "test_value.py": "from tinypkg import value\n\n\ndef test_v():\n"
            "    assert value() == 2\n",
        },
    )
    spec = write_task(
        tmp_path,
        source,
        [[write("src/tinypkg/__init__.py", "def value():\n    return 2\n")]],
        allowlist=["src/tinypkg/__init__.py"],
        command=f"{PY} -m pytest -q -p no:cacheprovider test_value.py",
        sandbox="off",
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 3, done.stdout + done.stderr
    result = load_result(tmp_path / "out")
    assert result["reason"] == "dod_cannot_start"
    assert "'tinypkg'" in result["error"]
    assert _agent_rounds(tmp_path / "out") == []


def test_a_failing_assertion_still_runs_rounds(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]], sandbox="off")
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _agent_rounds(tmp_path / "out") == [1]


def test_a_module_the_agent_must_write_is_not_a_start_problem(tmp_path: Path) -> None:
    source = make_repo(
        tmp_path / "source",
        {"test_value.py": "from newmod import value\n\n\ndef test_v():\n    assert value() == 2\n"},
    )
    spec = write_task(
        tmp_path,
        source,
        [[write("newmod.py", "def value():\n    return 2\n")]],
        allowlist=["newmod.py"],
        command=f"{PY} -m pytest -q -p no:cacheprovider test_value.py",
        sandbox="off",
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr

"""`plan run --budget` (the whole plan's wall clock) and `--tmux` (each item's agent CLI in a
tmux pane), through the real CLI with real processes."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from code_runner import dirs
from tests.helpers.plan_runs import (
    FIXED,
    calc_source,
    plan_cli,
    plan_item,
    put,
    run_args,
    shell,
    status_of,
    write_plan,
    write_script,
)

pytestmark = pytest.mark.integration


def test_the_budget_runs_out_mid_item_and_the_plan_needs_a_person(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    plan = write_plan(
        tmp_path,
        plan_item(1, "Fix add", [("calc.py", "edit")]),
        plan_item(2, "Fix it again", [("calc.py", "edit")]),
    )
    write_script(tmp_path, "P1", [shell("sleep 60")])
    started = time.monotonic()
    done = plan_cli(*run_args(plan, source, "--budget", "4", "--json"), cwd=tmp_path)
    assert time.monotonic() - started < 45
    assert done.returncode == 1, done.stderr
    status = status_of(done.stdout)
    assert status["status"] == "needs_human"
    assert "time budget" in status["reason"]
    attempt = status["items"][0]["attempts"][0]
    assert attempt["state"] == "cancelled" and "time limit" in attempt["reason"]
    assert status["items"][1]["state"] == "pending"
    assert not any(dirs.workspaces_dir().iterdir())


def test_tmux_runs_each_items_agent_cli_in_a_pane(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    plan = write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")]))
    agent = tmp_path / "agent.py"
    agent.write_text(f"from pathlib import Path\nPath('calc.py').write_text({FIXED!r})\n")
    args = run_args(plan, source, "--tmux", "--json")
    args[args.index("--backend") + 1] = f"command:{sys.executable} {agent}"
    done = plan_cli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    status = status_of(done.stdout)
    assert status["items"][0]["state"] == "committed"
    record = Path(status["items"][0]["attempts"][0]["record_dir"])
    assert list(record.glob("*tmux*")), sorted(p.name for p in record.iterdir())
    assert "watch it live: code-runner attach" in done.stderr

    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    scripted = plan_cli(*run_args(plan, source, "--tmux"), cwd=tmp_path)
    assert scripted.returncode == 2 and "--tmux runs an agent CLI" in scripted.stderr


def _scope_events(status: dict[str, object]) -> list[dict[str, object]]:
    items = status["items"]
    assert isinstance(items, list)
    record = Path(items[0]["attempts"][0]["record_dir"])
    events = [
        json.loads(line)
        for p in record.glob("*.events.jsonl")
        for line in p.read_text().splitlines()
    ]
    return [e for e in events if e["kind"] in ("scope_expansion", "cli_finished")]


def test_a_write_outside_the_items_files_is_a_scope_expansion_at_once(tmp_path: Path) -> None:
    """The live watch uses the item's declared files (calc.py), not the whole tree; with
    `--on-scope stop` the item's round ends there, before the agent's next write."""
    source = calc_source(tmp_path)
    plan = write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")]))
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import time\nfrom pathlib import Path\nPath('notes.txt').write_text('x')\n"
        f"time.sleep(120)\nPath('calc.py').write_text({FIXED!r})\n"
    )
    args = run_args(plan, source, "--on-scope", "stop", "--json")
    args[args.index("--backend") + 1] = f"command:{sys.executable} {agent}"
    started = time.monotonic()
    done = plan_cli(*args, cwd=tmp_path)
    assert time.monotonic() - started < 90, done.stderr  # not the agent's 120 s
    scope, finished = _scope_events(status_of(done.stdout))  # the first round's
    assert scope["kind"] == "scope_expansion" and scope["paths"] == ["notes.txt"]
    assert scope["action"] == "stop" and float(str(scope["elapsed_s"])) < 5
    assert finished["ending"] == "scope_expansion"
    status = status_of(done.stdout)  # the item failed, saying why; nothing was committed
    assert status["items"][0]["state"] == "failed" and "on_scope: stop" in status["reason"]
    assert done.returncode == 1

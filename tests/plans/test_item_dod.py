"""An item's DoD is its approved argv list, run without a shell: through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from code_runner.plans.commands import tokenize
from code_runner.plans.item import item_spec
from code_runner.plans.model import Plan
from tests.helpers.plan_runs import (
    DOD,
    FIXED,
    PY,
    calc_source,
    plan_cli,
    plan_item,
    put,
    run_args,
    status_of,
    write_plan,
    write_script,
)

pytestmark = pytest.mark.integration

WORDS = ["a;b", "$(touch pwned)", "*", "`id`", "x > y"]
CHECK = (
    "import os, sys; "
    f"ok = sys.argv[1:] == {WORDS!r} and "
    "open(f'/proc/{os.getppid()}/comm').read().strip() not in ('bash', 'sh', 'dash'); "
    "print('literal' if ok else sys.argv[1:]); sys.exit(0 if ok else 1)"
)
CMD = f'{PY} -c "{CHECK}" ' + " ".join(f"'{w}'" for w in WORDS)


def test_the_item_spec_carries_the_argv_list_not_a_shell_command(tmp_path: Path) -> None:
    data = json.loads(
        write_plan(tmp_path, plan_item(1, "Fix add", [("calc.py", "edit")])).read_text()
    )
    data["items"][0]["acceptance"].append({"type": "cmd", "text": CMD})
    plan = Plan.model_validate(data)
    spec = item_spec(plan, plan.items[0], cwd=tmp_path, output_dir=tmp_path / "o",
                     backend="scripted:x.json", max_rounds=1, timeout_s=60)  # fmt: skip
    assert spec.definition_of_done.argv == (tuple(DOD.split()), tuple(tokenize(CMD)))
    assert tokenize(CMD)[3:] == WORDS


def test_metacharacters_in_an_approved_argv_are_passed_literally(tmp_path: Path) -> None:
    source = calc_source(tmp_path)
    item = plan_item(1, "Fix add", [("calc.py", "edit")])
    item["acceptance"].append({"type": "cmd", "text": CMD})
    plan = write_plan(tmp_path, item)
    write_script(tmp_path, "P1", [put("calc.py", FIXED)])
    args = run_args(plan, source, "--allow-cmd", json.dumps(tokenize(CMD)), "--json")
    done = plan_cli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    status = status_of(done.stdout)
    assert status["items"][0]["state"] == "committed"
    record = Path(status["items"][0]["attempts"][0]["record_dir"])
    log = (record / "P1.verifier.log").read_text()
    assert "literal" in log
    assert not list(tmp_path.rglob("pwned"))

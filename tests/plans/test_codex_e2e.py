"""e2e: a three-item plan run by the real Codex CLI against the scripted server, exported as
a branch whose `git log` shows three runner commits with the plan's trailers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from code_runner.plans.commands import tokenize
from code_runner.testing import responses_api as resp
from code_runner.testing.scripted_server import ScriptedServer
from tests.helpers.agent_clis import BUGGY, CHECK, FIXED, PY, backend
from tests.helpers.git import git, make_repo
from tests.helpers.tasks import fingerprint

pytestmark = pytest.mark.e2e

ADD_FIXED = BUGGY.replace("a - b", "a + b")
ALL_FIXED = FIXED
NOTES = "add and mul are fixed.\n"
ADD_CHECK = f"{PY} -c 'from calc import add; assert add(2, 3) == 5'"
ALL_CHECK = f"{PY} check_calc.py"


def _item(n: int, title: str, path: str, kind: str, cmd: str | None) -> dict[str, Any]:
    acceptance = [{"type": "check", "text": "It reads well."}]
    if cmd:
        acceptance.insert(0, {"type": "cmd", "text": cmd})
    return {
        "id": f"P{n}", "title": title, "intent": "It is needed.",
        "files": [{"path": path, "kind": kind, "renamed_from": None, "change": title}],
        "acceptance": acceptance, "depends_on": [f"P{n - 1}"] if n > 1 else [],
    }  # fmt: skip


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "code_runner", "plan", *args],
        capture_output=True, text=True, cwd=cwd, env=os.environ.copy(), timeout=600,
    )  # fmt: skip


def test_codex_runs_a_three_item_plan_exported_as_a_branch(tmp_path: Path, codex: str) -> None:
    source = make_repo(
        tmp_path / "source",
        {"calc.py": BUGGY, "check_calc.py": CHECK, ".gitignore": "__pycache__/\n"},
    )
    before = fingerprint(source)
    base = git(source, "rev-parse", "HEAD").strip()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({
        "schema_version": 1, "issue": None, "revision": 1, "summary": "Fix the calculator.",
        "items": [
            _item(1, "Fix add", "calc.py", "edit", ADD_CHECK),
            _item(2, "Fix mul", "calc.py", "edit", ALL_CHECK),
            _item(3, "Write notes", "NOTES.md", "add", None),
        ],
        "questions": [],
    }))  # fmt: skip
    steps = [
        resp.write_file("calc.py", ADD_FIXED), resp.say("Fixed add."),
        resp.write_file("calc.py", ALL_FIXED), resp.say("Fixed mul."),
        resp.write_file("NOTES.md", NOTES), resp.say("Wrote the notes."),
    ]  # fmt: skip
    with ScriptedServer(resp.ResponsesApi(), steps) as server:
        done = _cli(
            "run", str(plan), "--source", str(source), "--max-rounds", "1",
            "--backend", backend("codex-cli", server.base_url), "--item-timeout", "300",
            "--allow-cmd", json.dumps(tokenize(ADD_CHECK)),
            "--allow-cmd", json.dumps(tokenize(ALL_CHECK)), "--json",
            cwd=tmp_path,
        )  # fmt: skip
        requests = server.stream_requests()
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(done.stdout)
    assert [i["state"] for i in status["items"]] == ["committed"] * 3
    assert len(requests) == 6  # two per item: the edit, then the answer to its output
    assert fingerprint(source) == before  # the plan only read the source

    exported = _cli("export", status["plan_id"], "--branch", "plan/codex", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    log = git(source, "log", "--format=%H%x00%B%x01", f"{base}..plan/codex").split("\x01")
    commits = {i["id"]: i["commit"] for i in status["items"]}
    entries = [e.strip() for e in log if e.strip()]
    assert len(entries) == 3
    for entry, item, dod in zip(
        entries, ("P3", "P2", "P1"), ("none", "passed", "passed"), strict=True
    ):
        sha, body = entry.split("\x00")
        assert sha == commits[item]  # the runner's commits, as the ledger has them
        assert body.splitlines()[0].startswith(f"{item}: ")
        trailers = [line for line in body.splitlines() if ": " in line][1:]
        assert trailers[:2] == [f"Plan-Item: {item}", "Plan-Revision: r1"]
        assert f"Code-Runner-Plan: {status['plan_id']}" in body
        assert f"Code-Runner-DoD: {dod}" in body and "Code-Runner-Run: " in body
    assert git(source, "show", "plan/codex:calc.py") == ALL_FIXED
    assert git(source, "show", "plan/codex:NOTES.md") == NOTES
    assert git(source, "rev-parse", "HEAD").strip() == base

"""A two-file calculator repo, plans for it, per-item scripts, and the real `plan` CLI.

The calculator's check is a plain script (`python test_calc.py`), not pytest: an item's DoD
runs at its baseline and after its agent, so its start-up time is paid on every item of
every plan test. `calc_plan` builds the usual plans (P1 fixes add, P2 adds sub, P3 adds
mul), `run_plan` runs one through the real CLI, and the rest reads what a run left: its
status, its runner repo, its store's exports, its events, and the processes it started.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from code_runner import dirs
from tests.helpers.git import make_repo

PY = sys.executable
DOD = f"{PY} test_calc.py"
ARGV = json.dumps(DOD.split())
BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\nassert add(2, 3) == 5\n"
SUB = "def sub(a, b):\n    return a - b\n"
MUL = "def mul(a, b):\n    return a * b\n"

# The usual items: (title, declared files, what the scripted agent writes).
USUAL: dict[int, tuple[str, list[tuple[str, str]], tuple[str, str]]] = {
    1: ("Fix add", [("calc.py", "edit")], ("calc.py", FIXED)),
    2: ("Add sub", [("sub.py", "add")], ("sub.py", SUB)),
    3: ("Add mul", [("mul.py", "add")], ("mul.py", MUL)),
}


def calc_source(root: Path) -> Path:
    files = {"calc.py": BROKEN, "test_calc.py": TESTS, ".gitignore": "__pycache__/\n"}
    return make_repo(root / "source", files)


def plan_item(n: int, title: str, paths: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "id": f"P{n}",
        "title": title,
        "intent": "It is needed.",
        "files": [
            {"path": p, "kind": k, "renamed_from": None, "change": "change it"} for p, k in paths
        ],
        "acceptance": [{"type": "cmd", "text": DOD}, {"type": "check", "text": "It reads well."}],
        "depends_on": [],
    }


def write_plan(root: Path, *items: dict[str, Any], name: str = "plan") -> Path:
    data = {
        "schema_version": 1,
        "issue": None,
        "revision": 1,
        "summary": "Fix the calculator, then extend it.",
        "items": list(items),
        "questions": [],
    }
    path = root / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def write_script(root: Path, item: str, *rounds: list[dict[str, Any]]) -> None:
    body = {"rounds": [{"calls": calls, "response": "done"} for calls in rounds]}
    (root / f"s.{item}.json").write_text(json.dumps(body))


def calc_plan(root: Path, items: int = 2, **titles: str) -> tuple[Path, Path]:
    """(source, plan file) of the first `items` usual items, each with its script; a
    keyword `P2="Add sub @alice"` retitles an item."""
    source = calc_source(root)
    chosen = []
    for n in range(1, items + 1):
        title, paths, (path, content) = USUAL[n]
        chosen.append(plan_item(n, titles.get(f"P{n}", title), paths))
        write_script(root, f"P{n}", [put(path, content)])
    return source, write_plan(root, *chosen)


def put(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def shell(command: str) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": command}}


def run_args(plan: Path, source: Path, *extra: str) -> list[str]:
    return [
        PY, "-m", "code_runner", "plan", "run", str(plan), "--source", str(source),
        "--backend", "scripted:s.{item}.json", "--allow-cmd", ARGV, "--max-rounds", "1",
        "--item-timeout", "120", *extra,
    ]  # fmt: skip


def plan_cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = list(argv) if argv and argv[0] == PY else [PY, "-m", "code_runner", "plan", *argv]
    return subprocess.run(
        full, capture_output=True, text=True, cwd=cwd, env=os.environ.copy(), timeout=300
    )


def run_plan(
    plan: Path, source: Path, *extra: str, code: int | None = 0
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`plan run PLAN --json` from the plan's directory: (the process, its final status);
    `code`: the exit code it must have (None: any)."""
    done = plan_cli(*run_args(plan, source, *extra, "--json"), cwd=plan.parent)
    assert code is None or done.returncode == code, (done.returncode, done.stderr, done.stdout)
    return done, status_of(done.stdout)


def status_of(stdout: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(stdout)
    return data


def plan_status(plan_id: str) -> dict[str, Any]:
    return status_of(plan_cli("status", plan_id, "--json").stdout)


def only_plan_id() -> str:
    listed = json.loads(plan_cli("list", "--json").stdout)["plans"]
    return str(listed[0]["plan_id"])


def gc_json() -> dict[str, Any]:
    done = subprocess.run([PY, "-m", "code_runner", "gc", "--json"], capture_output=True,
                          text=True, env=os.environ.copy(), timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def runner_git(plan_id: str, *args: str) -> str:
    """git in the plan's runner repo (its commits live there until exported)."""
    runner = dirs.state_dir() / "plans" / "repos" / f"{plan_id}.git"
    done = subprocess.run(
        ["git", f"--git-dir={runner}", *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def exports_of(plan_id: str) -> list[tuple[str, str, str | None]]:
    """(kind, state, through) of each export row in the store, in order."""
    db = sqlite3.connect(dirs.state_dir() / "plans" / "plans.sqlite")
    try:
        rows = db.execute(
            "SELECT kind, state, through_item FROM exports WHERE plan_id = ? ORDER BY id",
            (plan_id,),
        )
        return [tuple(row) for row in rows]
    finally:
        db.close()


def events(out: Path) -> list[dict[str, Any]]:
    if not (out / "plan.events.jsonl").exists():
        return []
    return [json.loads(line) for line in (out / "plan.events.jsonl").read_text().splitlines()]


def wait_for_event(out: Path, kind: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The last `kind` event in the plan record `out`, once there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [e for e in events(out) if e["kind"] == kind]
        if found:
            return found[-1]
        time.sleep(0.1)
    raise AssertionError(f"no {kind} event in {out}")


def procs() -> str:
    """Every process's command line, one a line."""
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def wait_for_process(text: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and text not in procs():
        time.sleep(0.2)
    assert text in procs(), f"no process runs {text!r}"

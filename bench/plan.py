"""What does running a task as a plan item cost over running it as a single task?

The same item (one scripted edit of calc.py, then its unittest DoD) runs as a single
`code-runner run SPEC`, as a one-item `code-runner plan run` (the plan's whole fixed cost
on one item: the store, the runner repo, the commit) and as each of the N items of a plan
(each item makes the same kind of edit, so every item is verified and committed). All are
real CLI processes, interleaved in the same run; a plan's per-item cost is its time / N.
Then the plan store alone: transactions per second (admit, mark running, settle: each one
`BEGIN IMMEDIATE` with `synchronous=FULL`) and status reads per second.

    python bench/plan.py [--repeat 5] [--items 3]

Target: a plan item costs at most 1.2x a single run (median of the per-pair ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import GIT_ENV  # bench/, beside this file

TEST = (
    "import unittest\nfrom calc import add\n\n\n"
    "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)
DOD = [sys.executable, "-m", "unittest", "-q", "test_calc"]
TARGET = 1.2
FILE = {"path": "calc.py", "kind": "edit", "renamed_from": None, "change": "fix add"}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text(TEST)
    (repo / ".gitignore").write_text("__pycache__/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def script(root: Path, n: int) -> Path:
    """One round writing calc.py fixed, with a line that makes item n's edit its own."""
    content = f"def add(a, b):\n    return a + b\n\n\nEDIT = {n}\n"
    path = root / f"s.P{n}.json"
    body = {"calls": [{"tool": "write_file", "args": {"path": "calc.py", "content": content}}]}
    path.write_text(json.dumps({"rounds": [body]}))
    return path


def cli(*args: str, state: Path) -> float:
    env = {**os.environ, "CODE_RUNNER_STATE_DIR": str(state)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "code_runner", *args], env=env, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed: {done.stdout[-800:]}{done.stderr[-800:]}")
    return elapsed


def time_single(root: Path, repo: Path, n: int) -> float:
    spec = {
        "task_id": "P1",
        "title": "Fix add",
        "prompt": "fix add",
        "backend": f"scripted:{script(root, 1)}",
        "cwd": str(repo),
        "output_dir": str(root / f"single-{n}"),
        "allowlist": ["calc.py"],
        "definition_of_done": {"argv": [DOD], "assertion": "exit_code == 0"},
        "max_rounds": 1,
    }
    path = root / f"single-{n}.json"
    path.write_text(json.dumps(spec))
    return cli("run", str(path), "--json", state=root / f"state-single-{n}")


def time_plan(root: Path, repo: Path, n: int, items: int) -> float:
    plan = {
        "schema_version": 1,
        "issue": None,
        "revision": 1,
        "summary": "The same edit, item after item.",
        "items": [
            {
                "id": f"P{k}",
                "title": f"Edit {k}",
                "intent": "Measure.",
                "files": [
                    {"path": "calc.py", "kind": "edit", "renamed_from": None, "change": "fix add"}
                ],
                "acceptance": [{"type": "cmd", "text": " ".join(DOD)}],
                "depends_on": [],
            }
            for k in range(1, items + 1)
        ],
        "questions": [],
    }
    for k in range(1, items + 1):
        script(root, k)
    path = root / f"plan-{n}-{items}.json"
    path.write_text(json.dumps(plan))
    backend = f"scripted:{root}/s.{{item}}.json"
    return cli(
        "plan", "run", str(path), "--source", str(repo), "--backend", backend,
        "--allow-cmd", json.dumps(DOD), "--max-rounds", "1", "--json",
        state=root / f"state-plan-{n}-{items}",
    ) / items  # fmt: skip


def store_rates(root: Path, repo: Path, plans: int = 5) -> tuple[float, float]:
    """(transactions/s, status reads/s) of the plan store on its own."""
    from code_runner.plans.model import Plan
    from code_runner.plans.outcome import Outcome
    from code_runner.plans.report import plan_status
    from code_runner.plans.states import RunEnd
    from code_runner.plans.store import PlanStore

    base = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, env=GIT_ENV, capture_output=True, text=True
    ).stdout.strip()
    data: dict[str, Any] = json.loads((root / "plan-0-1.json").read_text())
    data["items"] = [dict(data["items"][0], id=f"P{k}", title=f"T{k}") for k in range(1, 31)]
    writes, reads = 0, 0
    write_s = read_s = 0.0
    with PlanStore.open(root / "bench-store" / "plans.sqlite") as store:
        assert isinstance(store, PlanStore)
        for p in range(plans):
            plan = Plan.model_validate(dict(data, summary=f"Plan {p}."))
            row, _ = store.import_plan(
                plan, source_dir=repo, source_git_dir=repo / ".git", base=base, name=f"b{p}"
            )
            plan_id = row["plan_id"]
            started = time.perf_counter()
            for item in plan.items:
                version = store.plan(plan_id)["state_version"]
                attempt = store.admit(
                    plan_id, item.id, expected_state_version=version, budget_s=1e9
                )
                store.mark_running(attempt["id"])
                store.settle(attempt["id"], Outcome(end=RunEnd.OK, unchanged=True))
                writes += 3
            write_s += time.perf_counter() - started
            started = time.perf_counter()
            for _ in range(20):
                plan_status(store, plan_id)
                reads += 1
            read_s += time.perf_counter() - started
    return writes / write_s, reads / read_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--items", type=int, default=3)
    default_tmp = "/dev/shm" if os.path.isdir("/dev/shm") else None
    parser.add_argument("--tmp", default=default_tmp, help="where to build the repo and state")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="code-runner-bench-", dir=args.tmp) as tmp:
        root = Path(tmp)
        repo = make_repo(root)
        print(f"item: one scripted edit of calc.py, DoD {' '.join(DOD[1:])} (argv, no shell)")
        print(f"work dir: {root}; {args.items} items per plan; {args.repeat} pairs")
        time_single(root, repo, -1)  # warm caches (page cache, imports)
        singles: list[float] = []
        per_item: dict[int, list[float]] = {1: [], args.items: []}
        for n in range(args.repeat):
            singles.append(time_single(root, repo, n))
            for count, times in per_item.items():
                times.append(time_plan(root, repo, n, count))
        print(f"{'plan of':>8} {'single run s':>13} {'plan item s':>12} {'ratio':>6} {'target':>6}")
        ratio = 0.0
        for count, times in per_item.items():
            ratios = sorted(p / s for p, s in zip(times, singles, strict=True))
            ratio = max(ratio, statistics.median(ratios))
            print(
                f"{count:>8} {statistics.median(singles):>13.3f} {statistics.median(times):>12.3f}"
                f" {statistics.median(ratios):>6.2f} {TARGET:>6.1f}   (per-pair ratios"
                f" {', '.join(f'{x:.2f}' for x in ratios)})"
            )
        writes, reads = store_rates(root, repo)
        print(f"plan store: {writes:.0f} transactions/s (synchronous=FULL), "
              f"{reads:.0f} status reads/s (30-item plan)")  # fmt: skip
        verdict = "within" if ratio <= TARGET else "ABOVE"
        print(f"median ratio {ratio:.2f} (the larger of the two; {verdict} target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

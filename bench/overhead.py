"""How much does the runner cost over doing the same git work by hand?

For a small repo and a generated 20k-file repo, time a whole task with the scripted
backend (one round that fixes the bug) against the floor measured in the same run: the same
shared clone and checkout, the same DoD twice (base, then patched), the same edit, a binary
diff against base, and removal of the checkout. Prints medians and the ratio.

The real-project case (`--real`, see `real_project.py`) is click 8.1.7 from its sdist, tests
included, with a `.venv` and the project installed editable (`pip install -e .`), a bug put
in `click.utils`, and a pytest DoD named as people write it (`.venv/bin/python -m pytest
tests/test_utils.py`). Its floor is the same work by hand: clone, DoD on base, `git apply`
the fix, DoD again (the source's `.venv` with the clone's `src` first on `PYTHONPATH`).

    python bench/overhead.py [--repeat 5] [--files 20000] [--real | --real-only]

Targets: at most 1.5x the floor on the small repo, 1.3x on the 20k-file repo and on the
real project.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from code_runner import runner
from code_runner.task import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_project  # bench/, beside this file
from bench_env import GIT_ENV  # bench/, beside this file

TEST = (
    "import unittest\nfrom calc import add\n\n\n"
    "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)
DOD = f"{sys.executable} -m unittest -q test_calc"


def git(cwd: Path, *args: str) -> None:
    # no auto-gc: a background gc of the source would change it during a run
    argv = ["git", "-c", "gc.auto=0", *args]
    subprocess.run(argv, cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


def make_repo(root: Path, files: int) -> Path:
    repo = root / f"repo-{files}"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text(TEST)
    (repo / ".gitignore").write_text("__pycache__/\n")
    for i in range(files):
        d = repo / f"pkg{i % 100:03d}" / f"sub{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_text(f"VALUE_{i} = {i}\n" * 5)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def make_task(root: Path, repo: Path, n: int) -> Path:
    script = root / "script.json"
    fix = {
        "tool": "write_file",
        "args": {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"},
    }
    script.write_text(json.dumps({"rounds": [{"calls": [fix]}]}))
    task = {
        "task_id": f"bench{n}",
        "title": "bench",
        "prompt": "fix add",
        "backend": f"scripted:{script}",
        "cwd": str(repo),
        "output_dir": str(root / "out"),
        "allowlist": ["calc.py"],
        "definition_of_done": {"command": DOD, "assertion": "exit_code == 0"},
        "max_rounds": 1,
    }
    path = root / f"task{n}.json"
    path.write_text(json.dumps(task))
    return path


def time_runner(root: Path, repo: Path, n: int) -> float:
    task_path = make_task(root, repo, n)
    started = time.perf_counter()
    task = load_spec(task_path)
    outcome = runner.run_task(runner.preflight(task, base_dir=root))
    elapsed = time.perf_counter() - started
    assert outcome.passed, outcome
    return elapsed


def time_floor(root: Path, repo: Path) -> float:
    ws = root / "floor"
    started = time.perf_counter()
    gitdir = ws / "git"
    wt = ws / "wt"
    git(
        root,
        "clone",
        "-q",
        "--shared",
        "--no-checkout",
        f"--separate-git-dir={gitdir}",
        str(repo),
        str(wt),
    )
    git(wt, "checkout", "-q", "--detach", "HEAD")
    subprocess.run(["bash", "-c", DOD], cwd=wt, check=False, capture_output=True)
    (wt / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(wt, "add", "-A")
    subprocess.run(["bash", "-c", DOD], cwd=wt, check=True, capture_output=True)
    subprocess.run(
        ["git", "diff", "--cached", "--binary", "HEAD"],
        cwd=wt,
        env=GIT_ENV,
        check=True,
        capture_output=True,
    )
    shutil.rmtree(ws)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", type=int, default=20_000)
    default_tmp = "/dev/shm" if os.path.isdir("/dev/shm") else None
    parser.add_argument("--tmp", default=default_tmp, help="where to build the repos")
    parser.add_argument("--real", action="store_true", help="add the real-project case")
    parser.add_argument("--real-only", action="store_true", help="only the real project")
    parser.add_argument("--sandbox", default="auto", help="the real project's sandbox mode")
    parser.add_argument("--cache", default=str(real_project.CACHE), help="where the sdist is kept")
    args = parser.parse_args()
    if args.real or args.real_only:
        with tempfile.TemporaryDirectory(prefix="code-runner-bench-", dir=args.tmp) as tmp:
            os.environ["CODE_RUNNER_STATE_DIR"] = str(Path(tmp) / "state")
            real_project.bench(Path(tmp), Path(args.cache), args.repeat, args.sandbox)
        if args.real_only:
            return 0
    with tempfile.TemporaryDirectory(prefix="code-runner-bench-", dir=args.tmp) as tmp:
        root = Path(tmp)
        os.environ["CODE_RUNNER_STATE_DIR"] = str(root / "state")
        print(f"DoD: {DOD}  (each run: DoD on base, one scripted edit, DoD on the patch)")
        print(f"work dir: {root}  (--tmp to change; tmpfs keeps disk noise out)")
        print(
            f"{'files':>7} {'runner s':>9} {'floor s':>9} {'ratio':>6} {'target':>6}"
            f" {'overhead ms':>11}"
        )
        for files, target in ((10, 1.5), (args.files, 1.3)):
            repo = make_repo(root / f"r{files}", files)
            runs, floors = [], []
            time_runner(root, repo, -1)  # warm caches (page cache, imports)
            time_floor(root, repo)
            for n in range(args.repeat):
                runs.append(time_runner(root, repo, n))
                floors.append(time_floor(root, repo))
            r, f = statistics.median(runs), statistics.median(floors)
            ratios = sorted(a / b for a, b in zip(runs, floors, strict=True))
            print(
                f"{files:>7} {r:>9.3f} {f:>9.3f} {r / f:>6.2f} {target:>6.1f}"
                f" {1000 * (r - f):>11.0f}"
                f"   (per-pair ratios {', '.join(f'{x:.2f}' for x in ratios)})"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

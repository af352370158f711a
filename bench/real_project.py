"""The real-project case of `bench/overhead.py`: click 8.1.7 as people set it up.

The project is click's sdist (its tests included), committed with a bug put in
`click.utils.make_default_short_help`, a `.venv` (`python -m venv --system-site-packages`,
for pytest) and click installed editable into it (`pip install -e .`: an `__editable__`
path entry pointing at the source's `src`). The task: one scripted round that writes the
fix; the DoD: `.venv/bin/python -m pytest -q -p no:cacheprovider tests/test_utils.py`.
The runner's interpreter has click installed too (code-runner depends on it), and the
`.venv` sees it through system site packages: the DoD must still import the workspace's.

The floor is the same work by hand, in the same run: a shared clone and checkout, the DoD
on base, `git apply` of the fix, the DoD again, a binary diff, removal of the clone. By hand
the clone has no `.venv`, so the floor runs the source's `.venv/bin/python` with the clone's
`src` first on `PYTHONPATH` (what makes it judge the clone's code). A second floor runs the
DoD once (no base run): what a person who only checks the patch would do.

The sdist is fetched once with pip (`pip download --no-binary click click==8.1.7`) and kept in
`--cache`; the editable install needs the registry for its build backend (pip's cache then
serves it).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from code_runner import runner
from code_runner.task import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import GIT_ENV  # bench/, beside this file

CLICK = "click==8.1.7"
CACHE = Path.home() / ".cache" / "code-runner-bench"
MODULE = "src/click/utils.py"
FIXED_LINE = '        if word[-1] == ".":  # sentence end, truncate without "..."\n'
BUGGY_LINE = '        if word[-1] == ",":  # sentence end, truncate without "..."\n'
TEST = "tests/test_utils.py"
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", TEST]
DOD = " ".join([".venv/bin/python", *PYTEST])


def _run(argv: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def git(cwd: Path, *args: str) -> None:
    _run(["git", "-c", "gc.auto=0", *args], cwd, env=GIT_ENV)


def sdist(cache: Path) -> Path:
    """click's sdist, downloaded once into `cache`."""
    path = cache / "click-8.1.7.tar.gz"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        # `:all:` would also build the build backend's own build tools from source
        _run([*argv, "--no-binary", "click", CLICK, "-d", str(cache)], cache)
    return path


def make_project(root: Path, cache: Path) -> tuple[Path, Path, str]:
    """The committed project with its `.venv`; the fix as a patch file; the fixed module."""
    with tarfile.open(sdist(cache)) as archive:
        archive.extractall(root, filter="data")
    repo = root / "click-8.1.7"
    (repo / ".gitignore").write_text(".venv/\n__pycache__/\n*.egg-info/\nbuild/\n")
    module = repo / MODULE
    fixed = module.read_text()
    assert FIXED_LINE in fixed, "click's source is not the one this bench knows"
    module.write_text(fixed.replace(FIXED_LINE, BUGGY_LINE, 1))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "click 8.1.7, with a bug")
    python = sys.executable
    _run([python, "-m", "venv", "--system-site-packages", ".venv"], repo)
    _run([".venv/bin/python", "-m", "pip", "install", "-q", "--no-deps", "-e", "."], repo)
    module.write_text(fixed)
    patch = root / "fix.patch"
    patch.write_bytes(_run(["git", "diff", "--binary"], repo, env=GIT_ENV).stdout)
    git(repo, "checkout", "--", MODULE)
    git(repo, "update-index", "-q", "--refresh")
    return repo, patch, fixed


def make_task(root: Path, repo: Path, fixed: str, n: int, sandbox: str) -> Path:
    script = root / "real-script.json"
    fix = {"tool": "write_file", "args": {"path": MODULE, "content": fixed}}
    script.write_text(json.dumps({"rounds": [{"calls": [fix]}]}))
    task = {
        "task_id": f"real{n}",
        "title": "fix make_default_short_help",
        "prompt": "make tests/test_utils.py pass",
        "backend": f"scripted:{script}",
        "cwd": str(repo),
        "output_dir": str(root / "real-out"),
        "allowlist": [MODULE],
        "definition_of_done": {"command": DOD, "assertion": "exit_code == 0"},
        "max_rounds": 1,
        "sandbox": sandbox,
    }
    path = root / f"real-task{n}.json"
    path.write_text(json.dumps(task))
    return path


def time_runner(root: Path, repo: Path, fixed: str, n: int, sandbox: str) -> float:
    task_path = make_task(root, repo, fixed, n, sandbox)
    started = time.perf_counter()
    outcome = runner.run_task(runner.preflight(load_spec(task_path), base_dir=root))
    elapsed = time.perf_counter() - started
    assert outcome.passed and outcome.rounds == 1, outcome  # round 0 failed: the bug was seen
    return elapsed


def time_floor(root: Path, repo: Path, patch: Path, *, base_dod: bool) -> float:
    ws = root / "floor"
    wt = ws / "wt"
    started = time.perf_counter()
    clone = ["clone", "-q", "--shared", "--no-checkout", f"--separate-git-dir={ws / 'git'}"]
    git(root, *clone, str(repo), str(wt))
    git(wt, "checkout", "-q", "--detach", "HEAD")
    env = {**os.environ, "PYTHONPATH": str(wt / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    dod = [str(repo / ".venv" / "bin" / "python"), *PYTEST]
    if base_dod:
        subprocess.run(dod, cwd=wt, env=env, check=False, capture_output=True)
    git(wt, "apply", "--index", str(patch))
    _run(dod, wt, env=env)
    _run(["git", "diff", "--cached", "--binary", "HEAD"], wt, env=GIT_ENV)
    shutil.rmtree(ws)
    return time.perf_counter() - started


def bench(root: Path, cache: Path, repeat: int, sandbox: str) -> None:
    """Build the project, then time the runner and both floors `repeat` times, interleaved."""
    started = time.perf_counter()
    repo, patch, fixed = make_project(root, cache)
    print(f"real project: click 8.1.7, built in {time.perf_counter() - started:.1f} s at {repo}")
    print(f"DoD: {DOD}  (sandbox: {sandbox})")
    time_runner(root, repo, fixed, -1, sandbox)  # warm caches (page cache, imports)
    time_floor(root, repo, patch, base_dod=True)
    runs, floors, singles = [], [], []
    for n in range(repeat):
        runs.append(time_runner(root, repo, fixed, n, sandbox))
        floors.append(time_floor(root, repo, patch, base_dod=True))
        singles.append(time_floor(root, repo, patch, base_dod=False))
    r, f, one = (statistics.median(x) for x in (runs, floors, singles))
    ratios = sorted(a / b for a, b in zip(runs, floors, strict=True))
    head = f"{'runner s':>9} {'floor s':>9} {'ratio':>6} {'target':>6} {'overhead ms':>11}"
    print(f"{'case':>24} {head}")
    print(
        f"{'same work (2 DoD runs)':>24} {r:>9.3f} {f:>9.3f} {r / f:>6.2f} {1.3:>6.1f}"
        f" {1000 * (r - f):>11.0f}   (per-pair ratios {', '.join(f'{x:.2f}' for x in ratios)})"
    )
    print(f"{'patch check (1 DoD run)':>24} {r:>9.3f} {one:>9.3f} {r / one:>6.2f} {'':>6}")
    print(f"median ratio (runner / same work by hand): {r / f:.2f}")
    sys.stdout.flush()

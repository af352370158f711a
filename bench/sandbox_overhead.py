"""What does the OS sandbox cost per command, and does the attack suite hold?

Times a trivial command (`true`, through `bash -c` as agent commands run) N times bare and
N times inside the run profile (the same `proc.run` either way, in the same process, on a
real workspace), interleaved so load affects both alike, and prints both medians and the
ratio. `--attacks` also runs the security suite and prints how many attacks it tried and
how many held.

    python bench/sandbox_overhead.py [--repeat 50] [--attacks]
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

from code_runner import proc, runner, sandbox, workspace
from code_runner.repo import git

REPO = Path(__file__).resolve().parent.parent


def _workspace(root: Path) -> workspace.Workspace:
    source = root / "source"
    source.mkdir()
    env = {**git.hardened_env(), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x"}
    env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    (source / "a.txt").write_text("a\n")
    for argv in (["init", "-q"], ["add", "a.txt"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *argv], cwd=source, env=env, check=True)
    repo = git.open_source(source)
    return workspace.create(repo, repo.out("rev-parse", "HEAD"), run_id="bench-sandbox")


def _time(argv: list[str], ws: workspace.Workspace, env: dict[str, str]) -> float:
    """One command through `proc.run`, as an agent's command runs (files, tree kill)."""
    started = time.perf_counter()
    result = proc.run(argv, cwd=ws.work_tree, env=env, timeout_s=30)
    elapsed = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"the command failed: {result.describe()} {result.stderr[-500:]}")
    return elapsed


def _time_exec(argv: list[str], ws: workspace.Workspace, env: dict[str, str]) -> float:
    """The same argv with a plain fork/exec/wait: the sandbox's own cost, nothing else."""
    started = time.perf_counter()
    subprocess.run(argv, cwd=ws.work_tree, env=env, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(repeat: int) -> dict[str, float]:
    found = sandbox.probe()
    if not found.ok:
        raise SystemExit(f"the sandbox does not work here: {found.reason}")
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as scratch:
        os.environ["CODE_RUNNER_STATE_DIR"] = str(Path(scratch) / "state")
        ws = _workspace(Path(scratch))
        env = runner.command_env(ws)
        argv = proc.shell_argv("true")
        session = sandbox.open_session(
            ws, env=env, network=False, limits=sandbox.DEFAULT_LIMITS, cpu_s=60, name="bench"
        )
        samples: dict[str, list[float]] = {
            "bare": [],
            "boxed": [],
            "bare_exec": [],
            "boxed_exec": [],
        }
        with session:
            wrapped = session.wrap(argv)
            for _ in range(3):  # warm the page cache for both
                _time(argv, ws, env)
                _time(wrapped, ws, env)
            for _ in range(repeat):
                samples["bare"].append(_time(argv, ws, env))
                samples["boxed"].append(_time(session.wrap(argv), ws, env))
                samples["bare_exec"].append(_time_exec(argv, ws, env))
                samples["boxed_exec"].append(_time_exec(session.wrap(argv), ws, env))
        workspace.release(ws)
    ms = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    return {
        "bare_ms": round(ms["bare"], 2),
        "sandboxed_ms": round(ms["boxed"], 2),
        "ratio": round(ms["boxed"] / ms["bare"], 1),
        "added_ms": round(ms["boxed"] - ms["bare"], 2),
        "bare_exec_ms": round(ms["bare_exec"], 2),
        "sandboxed_exec_ms": round(ms["boxed_exec"], 2),
        "exec_ratio": round(ms["boxed_exec"] / ms["bare_exec"], 1),
        "repeat": repeat,
        "cgroups": ", ".join(session.cgroup_controllers) or "none",
    }


def attacks() -> dict[str, int]:
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        env = {**os.environ, "CODE_RUNNER_ATTACK_REPORT": report.name}
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/security"],
            cwd=REPO,
            env=env,
            check=False,
        )
        text = Path(report.name).read_text()
    tally: dict[str, int] = json.loads(text) if text else {"tried": 0, "held": 0}
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--attacks", action="store_true", help="also run tests/security")
    args = parser.parse_args()
    figures = measure(args.repeat)
    print(
        f"`bash -c true` via proc.run, median of {figures['repeat']}: bare {figures['bare_ms']} "
        f"ms, sandboxed {figures['sandboxed_ms']} ms (+{figures['added_ms']} ms, "
        f"{figures['ratio']}x; cgroups: {figures['cgroups']})"
    )
    print(
        f"the same as a plain fork/exec/wait: bare {figures['bare_exec_ms']} ms, sandboxed "
        f"{figures['sandboxed_exec_ms']} ms ({figures['exec_ratio']}x)"
    )
    if args.attacks:
        tally = attacks()
        print(f"attack suite: {tally['tried']} attacks tried, {tally['held']} held")


if __name__ == "__main__":
    main()

"""What does the OS sandbox cost per command, and does the attack suite hold?

Times a trivial command (`true`, through `bash -c` as agent commands run) N times bare and
N times inside the run profile (the same `proc.run` either way, in the same process, on a
real workspace), interleaved so load affects both alike, and prints both medians and the
ratio. `--attacks` also runs the security suite and prints how many attacks it tried and
how many held. `--snapshot-files N` times the source snapshot (`repo.snapshot.take`, taken
twice per run) on a repo of N committed files in 2 dirs levels, with loose objects, 200
untracked and an ignored dir of 1000 files. `--apply` (a root runner) times the apply DoD's
session in a root-owned repo: making and detaching the id-mapped view once per apply, and a
command run as the view's uid against the same command run as root with every capability
dropped (the profile used where no view can be made).

    python bench/sandbox_overhead.py [--repeat 50] [--attacks] [--snapshot-files 20000] [--apply]
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

from code_runner import proc, sandbox, workspace
from code_runner.repo import git, snapshot

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
        env = ws.env()
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
        ws.release()
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


def apply_cost(repeat: int) -> dict[str, float]:
    """The apply DoD's sandbox in a root-owned repo: the view's set-up, and per command."""
    found = sandbox.probe()
    if os.geteuid() != 0 or not found.ok or found.programs is None:
        raise SystemExit("--apply needs a root runner and a working sandbox")
    programs, limits = found.programs, sandbox.DEFAULT_LIMITS
    with tempfile.TemporaryDirectory(prefix="bench-apply-") as scratch:
        os.environ["CODE_RUNNER_STATE_DIR"] = str(Path(scratch) / "state")
        repo = Path(scratch) / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        argv = proc.shell_argv("true")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

        def session(name: str) -> sandbox.Session:
            return sandbox.source_session(
                repo, repo / ".git", programs=programs, env=env, limits=limits, cpu_s=60,
                cgroups=None, name=name,
            )  # fmt: skip

        opened: list[float] = []
        samples: dict[str, list[float]] = {"view": [], "owner": []}
        owner = session("owner").wrap(argv)  # never opened: no view, root without capabilities
        for index in range(repeat):
            started = time.perf_counter()
            with session(f"view{index}") as viewed:
                opened.append(time.perf_counter() - started)
                assert viewed.tree_posture()["host_uid"] != 0, viewed.tree_posture()
                wrapped = viewed.wrap(argv)
                for name, line in (("view", wrapped), ("owner", owner)):
                    started = time.perf_counter()
                    done = proc.run(line, cwd=repo, env=env, timeout_s=30)
                    samples[name].append(time.perf_counter() - started)
                    if done.exit_code != 0:
                        raise SystemExit(f"{name}: {done.describe()} {done.stderr[-500:]}")
    ms = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    return {
        "view_setup_ms": round(statistics.median(opened) * 1000, 2),
        "view_command_ms": round(ms["view"], 2),
        "owner_command_ms": round(ms["owner"], 2),
        "repeat": repeat,
    }


def _big_repo(root: Path, files: int) -> Path:
    source = root / "big"
    source.mkdir()
    for i in range(files):
        path = source / f"d{i % 100}" / f"e{i % 7}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {i}\n")
    (source / ".gitignore").write_text("build/\n")
    env = {**git.hardened_env(), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x"}
    env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    for argv in (["init", "-q"], ["add", "-A"], ["-c", "gc.auto=0", "commit", "-qm", "init"]):
        subprocess.run(["git", *argv], cwd=source, env=env, check=True)  # objects stay loose
    for i in range(200):
        (source / f"untracked{i}.txt").write_text("u\n")
    (source / "build").mkdir()
    for i in range(1000):
        (source / "build" / f"o{i}.bin").write_bytes(b"o")
    return source


def snapshot_cost(files: int, repeat: int = 5) -> dict[str, float]:
    """Median wall time of one source snapshot on a repo of `files` files."""
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as scratch:
        repo = git.open_source(_big_repo(Path(scratch), files))
        snapshot.take(repo)  # warm the page cache
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            snap = snapshot.take(repo)
            times.append(time.perf_counter() - started)
        entries = len(snap.git_tree)
    return {"files": files, "git_entries": entries, "ms": round(statistics.median(times) * 1000)}


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
    parser.add_argument("--snapshot-files", type=int, default=0, help="time the source snapshot")
    parser.add_argument("--apply", action="store_true", help="time the apply DoD's sandbox")
    args = parser.parse_args()
    if args.apply:
        cost = apply_cost(min(args.repeat, 20))
        print(
            f"apply DoD in a root-owned repo, median of {cost['repeat']}: id-mapped view made "
            f"and detached in {cost['view_setup_ms']} ms per apply; `bash -c true` as the "
            f"view's uid {cost['view_command_ms']} ms, as root without capabilities "
            f"{cost['owner_command_ms']} ms"
        )
    if args.snapshot_files:
        cost = snapshot_cost(args.snapshot_files)
        print(
            f"source snapshot of a {cost['files']}-file repo ({cost['git_entries']} .git "
            f"entries): {cost['ms']} ms (median of 5; taken twice per run)"
        )
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

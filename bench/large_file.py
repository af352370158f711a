"""How much memory does the runner take for a run that changes a large file?

Makes a source repo with one committed text file of `--mb` MiB (48 by default), and a task
whose scripted agent rewrites every line of it with one command, so the patch and the review
file are each about twice its size. The run is `code-runner run` in a fresh interpreter,
and then (`--apply`) `code-runner apply --commit` of its patch, in another,
which prints its own peak RSS (`ru_maxrss` of the process, not of git or the agent's
commands) when it ends. The baseline, measured in the same bench run, is the peak RSS of a
fresh interpreter that only imports code_runner and its CLI.

`--plan` adds rows for a plan whose one item adds a file of that size: `code-runner plan
run` (the item's commit is built from its patch), the MCP server's view of the item's record
(`task_result`; its baseline imports the MCP server, whose SDK is most of it), and `code-runner
plan export --apply`.

    python bench/large_file.py [--mb 48] [--sandbox off|auto|required] [--apply] [--plan]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PEAK = (
    "import resource, sys\n"
    "def peak():\n"
    "    print('PEAK_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "import code_runner.cli.main as m\n"
)
BASELINE = _PEAK + "peak()\n"
RUN = (
    _PEAK
    + "import atexit; atexit.register(peak)\n"
    + "sys.argv = ['code-runner', *sys.argv[1:]]\n"
    + "m.main()\n"
)


def _peak_mib(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    done = subprocess.run(
        [sys.executable, "-c", *argv], cwd=cwd, capture_output=True, text=True, check=False,
        env=env,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.startswith("PEAK_KIB ")]
    if not lines:
        raise SystemExit(f"no peak reported (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return int(lines[-1].split()[1]) / 1024, done


def _source(root: Path, mb: int) -> Path:
    source = root / "source"
    source.mkdir()
    line = b"value = 'abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz'\n"
    with (source / "big.txt").open("wb") as f:
        for _ in range(mb * 1024 * 1024 // len(line)):
            f.write(line)
    for argv in (["init", "-q"], ["add", "big.txt"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *argv], cwd=source, env=_git_env(), check=True)
    return source


def _task(root: Path, source: Path, sandbox: str) -> Path:
    script = root / "big.script.json"
    rewrite = "sed -i 's/abc/ABC/' big.txt"
    calls = [{"tool": "run_command", "args": {"command": rewrite, "timeout_s": 300}}]
    script.write_text(json.dumps({"rounds": [{"calls": calls, "response": "done"}]}))
    spec = {
        "task_id": "big",
        "title": "Rewrite a large file",
        "prompt": "Rewrite every line.",
        "backend": f"scripted:{script.name}",
        "cwd": str(source),
        "output_dir": str(root / "out"),
        "allowlist": ["big.txt"],
        "definition_of_done": {"command": "grep -q ABC big.txt", "assertion": "exit_code == 0"},
        "timeout_s": 600,
        "sandbox": sandbox,
    }
    path = root / "big.json"
    path.write_text(json.dumps(spec))
    return path


_LINE = "abcdefghijklmnopqrstuvwxyz012345678"  # and a newline: 36 bytes
_VIEW = (
    "from code_runner.mcp_server import reading\n"
    "import pathlib\n"
    "if sys.argv[1:]:\n"
    "    v = reading.task_result(pathlib.Path(sys.argv[1]), 'P1')\n"
    "    print(len(v['patch']), v['patch_bytes'], file=sys.stderr)\n"
    "peak()\n"
)


def _plan(root: Path, mb: int) -> tuple[Path, Path, list[str]]:
    """(source, plan file, its run argv): one item that adds a `mb` MiB file."""
    source = root / "plan-source"
    source.mkdir()
    (source / "README").write_text("a plan's source\n")
    for argv in (["init", "-q"], ["add", "README"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *argv], cwd=source, env=_git_env(), check=True)
    lines = mb * 1024 * 1024 // 36
    make = f"yes {_LINE} | head -n {lines} > big.txt"
    calls = [{"tool": "run_command", "args": {"command": make, "timeout_s": 300}}]
    (root / "s.P1.json").write_text(json.dumps({"rounds": [{"calls": calls, "response": "ok"}]}))
    check = ["test", "-s", "big.txt"]
    item = {
        "id": "P1",
        "title": "Add a large file",
        "intent": "It is needed.",
        "files": [{"path": "big.txt", "kind": "add", "renamed_from": None, "change": "add"}],
        "acceptance": [{"type": "cmd", "text": " ".join(check)}],
        "depends_on": [],
    }
    plan = root / "big-plan.json"
    body = {"schema_version": 1, "issue": None, "revision": 1, "summary": "Add a large file.",
            "items": [item], "questions": []}  # fmt: skip
    plan.write_text(json.dumps(body))
    argv = ["plan", "run", str(plan), "--source", str(source),
            "--backend", "scripted:s.{item}.json", "--allow-cmd", json.dumps(check),
            "--max-rounds", "1", "--item-timeout", "600",
            "--output-dir", str(root / "plan-out"), "--json"]  # fmt: skip
    return source, plan, argv


def _git_env() -> dict[str, str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x"}
    return env | {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}


def _plan_rows(root: Path, mb: int, baseline: float) -> None:
    _source, _plan_file, argv = _plan(root, mb)
    env = {**os.environ, "CODE_RUNNER_STATE_DIR": str(root / "state")}  # the plan's store
    started = time.monotonic()
    peak, done = _peak_mib([RUN, *argv], root, env)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"plan run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    plan_id = json.loads(done.stdout)["plan_id"]
    print(f"plan run:            committed in {took:.1f} s")
    print(f"plan run peak RSS:   {peak:.1f} MiB ({peak - baseline:.1f} above)")
    record = root / "plan-out" / "items" / "P1" / "1"
    served, _ = _peak_mib([_PEAK + _VIEW], root)
    viewed, done = _peak_mib([_PEAK + _VIEW, str(record)], root)
    print(f"MCP task_result:     {done.stderr.split()[0]} chars of {done.stderr.split()[1]} bytes")
    print(f"MCP view peak RSS:   {viewed:.1f} MiB ({viewed - served:.1f} above the server's"
          f" imports, {served:.1f} MiB)")  # fmt: skip
    started = time.monotonic()
    exported, done = _peak_mib([RUN, "plan", "export", plan_id, "--apply"], root, env)
    took = time.monotonic() - started
    print(f"plan export --apply: exit {done.returncode} in {took:.1f} s")
    print(f"export peak RSS:     {exported:.1f} MiB ({exported - baseline:.1f} above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=48)
    parser.add_argument("--sandbox", default="off", choices=("off", "auto", "required"))
    parser.add_argument("--apply", action="store_true", help="also apply --commit the patch")
    parser.add_argument("--plan", action="store_true", help="also a plan item, MCP, export")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-large-") as tmp:
        root = Path(tmp)
        baseline, _ = _peak_mib([BASELINE], root)
        source = _source(root, args.mb)
        spec = _task(root, source, args.sandbox)
        started = time.monotonic()
        peak, done = _peak_mib([RUN, "run", str(spec)], root)
        took = time.monotonic() - started
        result = json.loads((root / "out" / "big.result.json").read_text())
        patch = root / "out" / "big.patch"
        hunk = root / "out" / "big.hunk.md"
        print(f"file changed:        {args.mb} MiB ({args.sandbox} sandbox)")
        print(f"run:                 {result['status']} ({result['reason']}) in {took:.1f} s")
        print(
            f"patch / review file: {patch.stat().st_size / 2**20:.1f} / "
            f"{hunk.stat().st_size / 2**20:.1f} MiB"
        )
        print(f"baseline peak RSS:   {baseline:.1f} MiB (interpreter + code_runner imported)")
        print(f"run peak RSS:        {peak:.1f} MiB (the runner process; exit {done.returncode})")
        print(f"above the baseline:  {peak - baseline:.1f} MiB")
        if args.apply:
            started = time.monotonic()
            out = str(root / "out")
            applied, done = _peak_mib(
                [RUN, "apply", "--commit", "--unsandboxed", "--author", "b <b@x>", out], root
            )
            took = time.monotonic() - started
            print(f"apply --commit:      exit {done.returncode} in {took:.1f} s")
            if done.returncode:
                print("  " + "\n  ".join(done.stderr.strip().splitlines()[-3:]))
            print(f"apply peak RSS:      {applied:.1f} MiB ({applied - baseline:.1f} above)")
        if args.plan:
            _plan_rows(root, args.mb, baseline)


if __name__ == "__main__":
    main()

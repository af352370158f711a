"""How much memory does the runner take for a run that changes a large file?

Makes a source repo with one committed text file of `--mb` MiB (48 by default), and a task
whose scripted agent rewrites every line of it with one command, so the patch and the review
file are each about twice its size. The run is `code-runner run` in a fresh interpreter,
which prints its own peak RSS (`ru_maxrss` of the process, not of git or the agent's
commands) when it ends. The baseline, measured in the same bench run, is the peak RSS of a
fresh interpreter that only imports code_runner and its CLI.

    python bench/large_file.py [--mb 48] [--sandbox off|auto|required]
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


def _peak_mib(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    done = subprocess.run(
        [sys.executable, "-c", *argv], cwd=cwd, capture_output=True, text=True, check=False
    )
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
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x"}
    env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    for argv in (["init", "-q"], ["add", "big.txt"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *argv], cwd=source, env=env, check=True)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=48)
    parser.add_argument("--sandbox", default="off", choices=("off", "auto", "required"))
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


if __name__ == "__main__":
    main()

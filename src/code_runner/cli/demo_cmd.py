"""`code-runner demo`: the whole path on a sample repo, with no credentials needed.

It makes a small repo with two failing tests, then runs the built-in scripted backend:
round 1 fixes one bug and tries to rewrite the test file (outside the allowlist, so it is
refused), round 2 fixes the other. The run ends with a verified patch and a full record.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

import click

import code_runner.cli.render as render
from code_runner import runner
from code_runner.errors import UsageError
from code_runner.repo import git
from code_runner.task import load_spec

_FILES = ("calc.py", "test_calc.py")


def make_demo(root: Path) -> Path:
    """Create the sample repo, script and spec under `root`; return the spec path."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    package = resources.files("code_runner") / "demo"
    for name in _FILES:
        (repo / name).write_text(package.joinpath(f"{name}.txt").read_text())
    (root / "script.json").write_text(package.joinpath("script.json").read_text())
    (repo / ".gitignore").write_text("__pycache__/\n")
    source = git.init(repo)
    source.run("add", "--all")
    source.run(
        "-c",
        "user.name=code-runner demo",
        "-c",
        "user.email=demo@code-runner.invalid",
        "commit",
        "-q",
        "-m",
        "Calculator with two bugs",
    )
    task = {
        "task_id": "fix-calc",
        "title": "Fix the calculator",
        "prompt": "Make the tests in test_calc.py pass by fixing calc.py. Do not edit the tests.",
        "backend": "scripted:script.json",
        "cwd": "repo",
        "output_dir": "out",
        "allowlist": ["calc.py"],
        "definition_of_done": {
            "command": f"{shutil.which('python3') or sys.executable} -m unittest -v test_calc",
            "assertion": "stderr_regex:^OK$",
            "timeout_s": 60,
        },
        "max_rounds": 3,
    }
    spec_path = root / "task.json"
    spec_path.write_text(json.dumps(task, indent=2) + "\n")
    return spec_path


@click.command("demo")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where to build the demo (default: a new temp dir).",
)
def demo_command(directory: Path | None) -> int:
    """Build a sample repo with failing tests and fix it with the scripted backend."""
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="code-runner-demo-"))
    elif directory.exists() and any(directory.iterdir()):
        raise UsageError(f"{directory} is not empty.", fix="pass a new or empty --dir.")
    spec_path = make_demo(directory)
    out = render.console(stderr=True)
    out.print(f"demo repo: {directory / 'repo'} (two failing tests; allowlist: calc.py)")
    task = load_spec(spec_path)
    pre = runner.preflight(task, base_dir=directory)
    result = runner.run_task(pre, listeners=[render.ProgressPrinter(out)])
    out.print(
        f"\nstatus: {result.status.value} ({result.reason.value}) in {result.rounds} round(s)"
    )
    out.print(f"source unchanged: {result.source_unchanged}")
    out.print(f"patch:  {result.patch_artifact}")
    out.print(f"record: {task.output_dir}")
    out.print(f"spec:   {spec_path}")
    out.print(f"try:    git -C {directory / 'repo'} apply {result.patch_artifact}")
    return 0 if result.passed else 1

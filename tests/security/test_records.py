"""The output dir is not trusted. Each attack is a full `code-runner` invocation against a run
dir someone else can write, for a root runner and for a runner that is not root (uid 65534):

- a forged apply journal in the run dir is never read (the journal lives in the state dir),
  so no setuid file appears where the forger chose;
- a failed run's result and patch rewritten with a matching `patch_sha256` are refused by
  `result`, `apply` and `replay` (exit 5, naming the file), and nothing is committed;
- dangling symlinks planted where record files go are replaced, never followed;
- a second run of the same task id into the same run dir is refused (exit 3) while the first
  writes, and the first run's record stays its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.attacks import held
from tests.helpers.git import git
from tests.helpers.tasks import FIXED_BOTH, calc_repo, fingerprint, run_cli, write, write_task
from tests.security.unprivileged import Nobody, nobody

pytestmark = pytest.mark.integration
__all__ = ["nobody"]  # a fixture

Cli = Callable[..., subprocess.CompletedProcess[str]]
DOD = "grep -q 'a [*] b' calc.py"  # fails on base, passes once fixed (no Python needed)
AUTHOR = "Ann <ann@example.com>"


def _git(source: Path, *args: str) -> str:
    """git in a source that may belong to another user (read only)."""
    return git(source, "-c", "safe.directory=*", *args)


def _root_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args)


def _forge_passed(out: Path) -> None:
    """Rewrite a failed run's result and patch as a pass, with a matching digest."""
    patch = (
        b"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
        b"@@ -1 +1 @@\n-def add(a, b):\n+def add(a, b):  # forged\n"
    )
    (out / "fix-calc.patch").write_bytes(patch)
    result = json.loads((out / "fix-calc.result.json").read_text())
    result.update(
        status="passed",
        reason="dod_passed",
        dod_passed=True,
        patch_sha256=hashlib.sha256(patch).hexdigest(),
    )
    (out / "fix-calc.result.json").write_text(json.dumps(result))


def _forged_result_refused(root: Path, source: Path, cli: Cli) -> None:
    out = root / "out"
    head = _git(source, "rev-parse", "HEAD")
    _forge_passed(out)
    for argv in (
        ["result", str(out)],
        ["apply", str(out), "--commit", "--author", AUTHOR],
        ["replay", str(out)],
    ):
        ran = cli(*argv)
        named = "fix-calc.result.json was changed after the run" in ran.stderr
        held(
            f"record: a forged pass is refused by {argv[0]}",
            ran.returncode == 5 and named and "Traceback" not in ran.stderr,
            ran.stderr,
        )
    held("record: nothing was committed", _git(source, "rev-parse", "HEAD") == head)
    held("record: no commit says DoD passed", "Code-Runner-DoD" not in _git(source, "log"))


def test_a_forged_result_and_patch_are_refused(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[]], command=DOD)  # the agent does nothing: the DoD fails
    assert run_cli("run", str(spec)).returncode == 1
    _forged_result_refused(tmp_path, source, _root_cli)


def test_a_forged_result_is_refused_for_a_non_root_runner(nobody: Nobody) -> None:
    source = calc_repo(nobody.root)
    spec = write_task(nobody.root, source, [[]], command=DOD)
    assert nobody.run(spec).returncode == 1
    _forged_result_refused(nobody.root, source, nobody.cli)


def _plant_journal(out: Path, target_dir: Path) -> None:
    """The journal as it used to sit in the run dir, naming a setuid file elsewhere."""
    journal = {
        "journal_version": 1,
        "run_id": "forged",
        "task_id": "fix-calc",
        "work_tree": str(target_dir),
        "git_dir": str(target_dir / ".git"),
        "head_before": "0" * 40,
        "tree": "0" * 40,
        "token": "f0f0f0f0",
        "entries": [
            {
                "path": "suid",
                "before": {"kind": "file", "mode": "4755", "sha256": "0" * 64},
                "after": {"kind": "missing"},
                "saved": "0",
            }
        ],
        "dirs": [],
        "commit_requested": False,
        "phase": "applying",
        "pid": 1,
        "pid_started": None,
        "notes": [],
    }
    (out / "fix-calc.apply.json").write_text(json.dumps(journal))
    (out / "fix-calc.apply/prior").mkdir(parents=True)
    (out / "fix-calc.apply/prior/0").write_text("#!/bin/sh\nid\n")


def _forged_journal_ignored(root: Path, source: Path, cli: Cli) -> None:
    out = root / "out"
    target_dir = root / "victim"
    target_dir.mkdir()
    _plant_journal(out, target_dir)
    ran = cli("apply", str(out), "--commit", "--author", AUTHOR)
    held("record: apply works from the real record", ran.returncode == 0, ran.stderr)
    cli("gc")
    held("record: no setuid file from a forged journal", list(target_dir.iterdir()) == [])


def test_a_forged_apply_journal_is_never_read(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]], command=DOD)
    assert run_cli("run", str(spec)).returncode == 0
    _forged_journal_ignored(tmp_path, source, _root_cli)


def test_a_forged_apply_journal_is_never_read_by_a_non_root_runner(nobody: Nobody) -> None:
    source = calc_repo(nobody.root)
    spec = write_task(nobody.root, source, [[write("calc.py", FIXED_BOTH)]], command=DOD)
    assert nobody.run(spec).returncode == 0
    _forged_journal_ignored(nobody.root, source, nobody.cli)


SUFFIXES = ("status.json", "events.jsonl", "result.json", "patch", "rounds.jsonl", "reserve")


def _plant_links(root: Path) -> Path:
    out, targets = root / "out", root / "targets"
    out.mkdir()
    targets.mkdir()
    for suffix in SUFFIXES:
        os.symlink(targets / suffix, out / f"fix-calc.{suffix}")
    os.symlink(targets / "agent", out / "fix-calc.agent")
    return targets


def test_planted_symlinks_in_the_run_dir_are_never_followed(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]], command=DOD)
    targets = _plant_links(tmp_path)
    ran = run_cli("run", str(spec))
    held("record: the run passes beside planted links", ran.returncode == 0, ran.stderr)
    held("record: nothing written through a link", list(targets.iterdir()) == [])
    held(
        "record: the record files are files",
        (tmp_path / "out/fix-calc.result.json").is_file()
        and not (tmp_path / "out/fix-calc.result.json").is_symlink(),
    )
    os.symlink(targets / "lock", tmp_path / "out/fix-calc.lock.new")
    (tmp_path / "out/fix-calc.lock").unlink()
    os.rename(tmp_path / "out/fix-calc.lock.new", tmp_path / "out/fix-calc.lock")
    ran = run_cli("run", str(spec))
    held("record: a planted lock link is refused", ran.returncode == 3, ran.stderr)
    held("record: the lock link was not followed", list(targets.iterdir()) == [])


def test_planted_symlinks_are_never_followed_by_a_non_root_runner(nobody: Nobody) -> None:
    source = calc_repo(nobody.root)
    spec = write_task(nobody.root, source, [[write("calc.py", FIXED_BOTH)]], command=DOD)
    targets = _plant_links(nobody.root)
    ran = nobody.run(spec)
    held("record: a non-root run passes beside planted links", ran.returncode == 0, ran.stderr)
    held("record: nothing written through a link (non-root)", list(targets.iterdir()) == [])


def test_a_second_run_of_the_task_id_into_the_run_dir_is_refused(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    slow = "sleep 4; grep -q 'a [*] b' calc.py"
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]], command=slow)
    first = subprocess.Popen(
        [sys.executable, "-m", "code_runner", "run", str(spec)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    status = tmp_path / "out/fix-calc.status.json"
    deadline = time.monotonic() + 60
    while not status.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run_id = json.loads(status.read_text())["run_id"]
    ran = run_cli("run", str(spec))
    held("record: a second run is refused with exit 3", ran.returncode == 3, ran.stderr)
    assert first.wait(timeout=120) == 0
    out = tmp_path / "out"
    ids = {
        json.loads((out / "fix-calc.status.json").read_text())["run_id"],
        json.loads((out / "fix-calc.result.json").read_text())["run_id"],
        *(
            e["run_id"]
            for e in map(json.loads, (out / "fix-calc.events.jsonl").read_text().splitlines())
        ),
    }
    held("record: the first run's record is its own", ids == {run_id}, ids)
    assert fingerprint(source)  # the source is still a readable repo

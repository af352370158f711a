"""Git attacks through full runs: the runner owns git. From `run_command`, every write to
the workspace's git state or to the source fails (the sandbox: read-only git dir and
pointer; without it: the command policy), the `.git` pointer cannot be rewritten or
removed unnoticed, and a source repo's hooks, fsmonitor and filters never run."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.helpers.attacks import MODES, attack, call, cmd, dump, held
from tests.helpers.git import git
from tests.helpers.tasks import FIXED_BOTH, PY, calc_repo, fingerprint

pytestmark = pytest.mark.integration

GIT_WRITES = [
    "git update-ref refs/heads/evil HEAD",
    "git config core.hooksPath /tmp",
    "git config --global user.name evil",
    "git -c user.name=e -c user.email=e@x commit --allow-empty -m evil",
    "git tag evil",
    "echo '# x' >> calc.py && git stash",
    "git worktree add ../evil-wt",
    "git branch evil",
    "git checkout -q -b evil",
    "git reset --hard",
    "git notes add -m evil HEAD",
    "git gc",
    "git -C {source} commit --allow-empty -m evil",
    "git --git-dir={source}/.git update-ref refs/heads/evil HEAD",
    "GIT_DIR={source}/.git git update-ref refs/heads/evil2 HEAD",
    "cd {source} && git update-ref refs/heads/evil3 HEAD",
    "git --git-dir=\"$(sed 's/^gitdir: //' .git)\" update-ref refs/heads/evil4 HEAD",
]


@pytest.mark.parametrize("mode", MODES)
def test_git_writes_from_commands_fail(tmp_path: Path, mode: str) -> None:
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    calls = [cmd(c.format(source=source)) for c in GIT_WRITES]
    calls += [
        cmd("git status --short && git diff --stat"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox=mode, source=source)
    for command, result in zip(GIT_WRITES, run.tool_results, strict=False):
        if run.sandboxed:
            ok = result["details"].get("exit_code", 0) != 0
        else:
            ok = result["error"] == "BLOCKED_COMMAND"
        held(command, ok, result)
    reads = run.tool_results[len(GIT_WRITES)]
    assert reads["details"]["exit_code"] == 0, dump(run)  # git status and diff still work
    held(
        "no safety violation",
        run.result["safety_violations"] == [],
        run.result["safety_violations"],
    )
    held("source byte-identical", fingerprint(source) == before)
    assert run.result["status"] == "passed", dump(run)


POINTER_ATTACKS = [
    "rm -f .git",
    "echo 'gitdir: {host}' > .git",
    "mv .git moved-pointer",
    "ln -s {host} evil-link && mv -fT evil-link .git",
    "chmod 000 .git",
]
# the same aim in a form no command policy can read: only the sandbox or the audit stop it
SILENT_REWRITE = "{py} -c \"open('.git', 'w').write('gitdir: {host}')\""


@pytest.mark.parametrize("mode", MODES)
def test_the_git_pointer_cannot_be_rewritten_or_removed(tmp_path: Path, mode: str) -> None:
    source = calc_repo(tmp_path)
    host = tmp_path / "host-dir"  # a directory of ours the pointer could be aimed at
    host.mkdir(mode=0o755)
    before = fingerprint(source)
    commands = [c.format(host=host) for c in POINTER_ATTACKS]
    calls = [cmd(c) for c in commands]
    calls += [
        cmd(SILENT_REWRITE.format(py=PY, host=host)),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox=mode, source=source)
    results = run.tool_results
    for command, result in zip(commands, results, strict=False):
        if run.sandboxed:
            ok = result["details"].get("exit_code", 0) != 0
        else:
            ok = result["error"] == "BLOCKED_COMMAND"
        held(command, ok, result)
    silent = results[len(commands)]
    violations = run.result["safety_violations"]
    if run.sandboxed:
        held("the silent rewrite fails too", silent["details"]["exit_code"] != 0, silent)
        held("no violation: nothing changed", violations == [], violations)
        assert run.result["status"] == "passed", dump(run)
    else:  # no wall: the audit sees the change, restores the pointer and fails the run
        held("silent rewrite detected", any("pointer" in v for v in violations), violations)
        held("the run fails closed", run.result["reason"] == "safety_violation")
    held("the aimed-at directory is untouched", stat.S_IMODE(host.stat().st_mode) == 0o755)
    held("source byte-identical", fingerprint(source) == before)


@pytest.mark.parametrize("mode", MODES)
def test_gitlinks_and_gitmodules_never_reach_the_patch(tmp_path: Path, mode: str) -> None:
    source = calc_repo(tmp_path)
    nested = (
        "mkdir -p sub/inner && cd sub/inner && git init -q && "
        "git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x"
    )
    calls = [
        cmd(nested),
        cmd("git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),sub/link"),
        cmd("printf '[submodule \"x\"]\\n\\tpath = sub/inner\\n\\turl = ../x\\n' > .gitmodules"),
        cmd("mkdir -p sub && echo ok > sub/ok.txt"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox=mode, source=source, allowlist=("calc.py", "sub"))
    held("no gitlink", "160000" not in run.patch and "Subproject commit" not in run.patch)
    held("no .gitmodules", ".gitmodules" not in run.patch)
    assert "sub/ok.txt" in run.patch and run.result["status"] == "passed", dump(run)


def _hooked_source(root: Path) -> tuple[Path, Path]:
    """A source whose hooks, fsmonitor, filters and textconv all leave a marker if run."""
    source = calc_repo(root)
    (source / ".gitattributes").write_text("* filter=evil diff=evil\n")
    git(source, "add", ".gitattributes")
    git(source, "commit", "-q", "-m", "attributes")
    markers = root / "markers"
    markers.mkdir()
    script = root / "mark.sh"
    script.write_text(f'#!/bin/sh\ntouch "{markers}/$1-$$"\ncat\n')
    script.chmod(0o755)
    for hook in (
        "post-checkout", "pre-commit", "post-commit", "post-merge", "post-rewrite",
        "reference-transaction", "pre-auto-gc", "post-index-change", "pre-push",
    ):  # fmt: skip
        path = source / ".git/hooks" / hook
        path.write_text(f"#!/bin/sh\n{script} {hook}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    for key, value in (
        ("core.fsmonitor", f"{script} fsmonitor"),
        ("filter.evil.smudge", f"{script} smudge"),
        ("filter.evil.clean", f"{script} clean"),
        ("filter.evil.process", f"{script} process"),
        ("diff.evil.textconv", f"{script} textconv"),
        ("core.pager", f"{script} pager"),
    ):
        git(source, "config", key, value)
    return source, markers


@pytest.mark.parametrize("mode", MODES)
def test_source_hooks_fsmonitor_and_filters_never_run(tmp_path: Path, mode: str) -> None:
    source, markers = _hooked_source(tmp_path)
    before = fingerprint(source)
    calls = [
        cmd("git status --short; git diff; git log --oneline -1"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox=mode, source=source)
    assert run.result["status"] == "passed", dump(run)  # setup, rounds, export, cleanup all ran
    held(
        "no hook, fsmonitor, filter or textconv ran", os.listdir(markers) == [], os.listdir(markers)
    )
    held("source byte-identical", fingerprint(source) == before)

"""`plan export --branch` writes into the user's repo, so that repo's own config must not be
able to steer it: a `url.*.insteadOf` that turns the runner repo's path into an `ext::`
command, hooks on every ref update, and an fsmonitor all stay unrun, and the branch still
lands exactly. Each attack is performed for real against the real export code."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_runner.plans.runner_repo import RUNNER_IDENTITY, ensure_runner_repo
from code_runner.repo import git as hardened
from tests.helpers.attacks import held
from tests.helpers.git import git, make_repo

pytestmark = pytest.mark.integration

PATCH = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
)


def test_the_source_config_cannot_run_anything_during_an_export(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "source", {"calc.py": "x = 1\n"})
    repo = hardened.open_source(source)
    base = git(source, "rev-parse", "HEAD").strip()
    runner = ensure_runner_repo("plan-attack", repo, base)
    patch = tmp_path / "p1.patch"
    patch.write_text(PATCH)
    commit = runner.build_commit(
        parent=base,
        patch=patch,
        message="P1: x\n",
        identity=RUNNER_IDENTITY,
        ref="refs/code-runner/attempts/a1",
    )
    marker = tmp_path / "ran"
    payload = tmp_path / "payload.sh"
    payload.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\n')
    payload.chmod(0o755)
    hooks = source / ".git" / "hooks"
    for name in ("reference-transaction", "post-checkout", "pre-auto-gc", "post-index-change"):
        (hooks / name).write_text(f"#!/bin/sh\n{payload} {name}\n")
        (hooks / name).chmod(0o755)
    for key, value in (
        (f"url.ext::{payload} %S.insteadOf", str(runner.git_dir)),
        ("protocol.ext.allow", "always"),
        ("protocol.allow", "always"),
        ("core.fsmonitor", str(payload)),
        ("core.hooksPath", str(hooks)),
        ("gc.auto", "1"),
    ):
        git(source, "config", key, value)
    config = (source / ".git" / "config").read_bytes()

    old = runner.export_branch(
        repo, branch="plan/out", sha=commit.sha, ref=commit.ref, owned={commit.sha}, base=base
    )

    held("export: source config runs no program", not marker.exists(), marker)
    held(
        "export: the branch lands exactly",
        old is None and git(source, "rev-parse", "plan/out").strip() == commit.sha,
    )
    held(
        "export: HEAD, index, work tree and config untouched",
        git(source, "rev-parse", "HEAD").strip() == base
        and git(source, "status", "--porcelain") == ""
        and (source / ".git" / "config").read_bytes() == config,
    )

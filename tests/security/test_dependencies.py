"""The source's `.venv` and `node_modules` (untracked, so not in the workspace) are visible
read-only inside the sandbox, at the workspace's same relative path and at their own path,
so the DoD can use them; no command can write into them, directly or through a symlink."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.attacks import attack, call, cmd, dump, held
from tests.helpers.tasks import FIXED_BOTH, calc_repo, fingerprint

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_works")]


def _source_with_dependencies(root: Path) -> Path:
    source = calc_repo(root)
    tool = source / ".venv/bin/tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho tool-ok\n")
    tool.chmod(0o755)
    (source / "node_modules/left-pad").mkdir(parents=True)
    (source / "node_modules/left-pad/index.js").write_text("module.exports = 1;\n")
    return source


def test_dependencies_are_usable_and_read_only(tmp_path: Path) -> None:
    source = _source_with_dependencies(tmp_path)
    before = fingerprint(source)
    attacks = [
        "echo evil > .venv/evil.txt",
        "echo evil >> .venv/bin/tool",
        "rm -f .venv/bin/tool",
        "mv .venv/bin/tool stolen",
        "touch node_modules/left-pad/evil.js",
        "ln -s .venv v && echo evil > v/evil2.txt",
        f"ln -s {source}/.venv w && echo evil > w/evil3.txt",
        f"echo evil > {source}/.venv/evil4.txt",
        "rmdir .venv; rm -rf .venv 2>/dev/null; test ! -e .venv/bin/tool",
    ]
    calls = [cmd("./.venv/bin/tool > report.txt && test -f node_modules/left-pad/index.js")]
    calls += [cmd(c) for c in attacks]
    calls += [
        call("write_file", path=".venv/bin/tool", content="evil"),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    dod = "./.venv/bin/tool | grep -q tool-ok && grep -q 'a [*] b' calc.py"
    run = attack(tmp_path, calls, sandbox="required", source=source, command=dod)
    held("the dependency is usable", run.added("report.txt") == "tool-ok\n", dump(run))
    for command, result in zip(attacks, run.tool_results[1:], strict=False):
        held(command, result["details"].get("exit_code", 0) != 0, result)
    held("the file tools refuse it too", run.tool_results[-2]["error"] == "PERMISSION")
    held("the source's dependencies are byte-identical", fingerprint(source) == before)
    assert run.result["status"] == "passed", dump(run)  # the DoD found the tool
    assert ".venv" not in run.patch and "node_modules" not in run.patch

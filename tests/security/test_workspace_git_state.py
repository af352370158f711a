"""The workspace's own git state is the runner's: index flags, `.git/info`, alternates and
objects, as well as HEAD, refs and config. Without the sandbox (where the git dir is not
read-only) an agent can reach them; each change is a safety violation, the run fails, and
the source is byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from code_runner import runner
from code_runner import task as spec_mod
from tests.helpers.attacks import attack, call, cmd, held
from tests.helpers.tasks import FIXED_ADD, FIXED_BOTH, PY, calc_repo, fingerprint, write_task

pytestmark = pytest.mark.integration

GIT_DIR = '"$(sed -n "s/^gitdir: //p" .git)"'


def _git(*args: str) -> str:
    return f"{PY} -c \"import subprocess; subprocess.run(['git', *{list(args)!r}])\""


@pytest.mark.parametrize(
    ("name", "command", "words"),
    [
        ("alternates", f"echo /tmp >> {GIT_DIR}/objects/info/alternates", "alternates"),
        (
            "info-exclude",
            f"mkdir -p {GIT_DIR}/info; echo calc.py >> {GIT_DIR}/info/exclude",
            ".git/info",
        ),
        (
            "info-sparse",
            f"mkdir -p {GIT_DIR}/info; echo '/*' > {GIT_DIR}/info/sparse-checkout",
            ".git/info",
        ),
        ("assume-unchanged", _git("update-index", "--assume-unchanged", "calc.py"), "index flags"),
        ("skip-worktree", _git("update-index", "--skip-worktree", "calc.py"), "index flags"),
    ],
)
def test_a_change_to_the_workspace_git_state_is_a_violation(
    tmp_path: Path, name: str, command: str, words: str
) -> None:
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    run = attack(
        tmp_path,
        [call("write_file", path="calc.py", content=FIXED_BOTH), cmd(command)],
        sandbox="off",
        source=source,
    )
    result = run.result
    held(f"{name}: the run fails as a safety violation", result["reason"] == "safety_violation")
    held(f"{name}: the violation names it", words in (result.get("error") or ""), result)
    held(f"{name}: the source is byte-identical", fingerprint(source) == before)


def test_rewriting_a_kept_object_is_a_violation(tmp_path: Path) -> None:
    """Round 1 keeps a partial fix; round 2 rewrites that blob's loose object (which a later
    restore or export would read) instead of editing the file."""
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    script = (
        "import os, subprocess, zlib; "
        "o = subprocess.run(['git', 'hash-object', 'calc.py'], capture_output=True, "
        "text=True).stdout.strip(); "
        "d = open('.git').read().split('gitdir: ')[1].strip(); "
        "f = os.path.join(d, 'objects', o[:2], o[2:]); os.chmod(f, 0o644); "
        "open(f, 'wb').write(zlib.compress(b'blob 3\\x00bad'))"
    )
    rewrite = f'{PY} -c "{script}"'
    path = write_task(
        tmp_path,
        source,
        [
            [call("write_file", path="calc.py", content=FIXED_ADD)],
            [cmd(rewrite)],
        ],
        command="grep -q 'a [*] b' calc.py",
        sandbox="off",
    )
    outcome = runner.run_task(runner.preflight(spec_mod.load_spec(path), base_dir=tmp_path))
    result = outcome.to_json()
    held("the run does not pass", not result["dod_passed"], json.dumps(result)[:2000])
    held(
        "the rewrite is a violation",
        "objects in the workspace's git dir" in (result.get("error") or ""),
        result.get("error"),
    )
    held("the source is byte-identical", fingerprint(source) == before)

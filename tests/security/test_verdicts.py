"""A verdict reproduces: `git clone BASE && git apply PATCH && DoD` in a clean directory gives
the verdict the run recorded, whatever the agent did to make the work tree and the patch
disagree.

Each case is one adversarial round through a full run: a check-in attribute (`ident`,
`eol`/`text`, `working-tree-encoding`) from a `.gitattributes` the agent wrote and that was
then dropped; `--assume-unchanged` / `--skip-worktree` index flags; `.git/info/attributes`;
a `setsid env -i` daemon rewriting a file outside the allowlist after the audit; untracked,
ignored and symlinked leftovers; and honest controls. The DoD is built so that each trick,
if it worked, would pass on the work tree but fail on the clean checkout.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.attacks import attack, call, cmd, held
from tests.helpers.git import make_repo
from tests.helpers.tasks import CALC, FIXED_BOTH, PY, TESTS, write_task
from tests.security.unprivileged import Nobody, nobody

__all__ = ["nobody"]  # a fixture

pytestmark = pytest.mark.integration

FIX = "grep -q 'a [*] b' calc.py"
GIT_DIR = '"$(sed -n "s/^gitdir: //p" .git)"'
CRLF_FIX = (
    f"{PY} -c \"d = open('calc.py', 'rb').read(); "
    "open('calc.py', 'wb').write(d.replace(b'\\n', b'\\r\\n'))\""
)
UTF16_FIX = (
    f"{PY} -c \"d = open('calc.py').read(); open('calc.py', 'wb').write(d.encode('utf-16'))\""
)
DAEMON = (
    "setsid env -i sh -c 'while :; do echo ok > flag.txt; sleep 0.01; done' "
    "</dev/null >/dev/null 2>&1 &"
)


@dataclass(frozen=True)
class Case:
    name: str
    calls: list[dict[str, Any]]
    dod: str
    allowlist: tuple[str, ...] = ("calc.py",)
    modes: tuple[str, ...] = ("required", "off")


def _git(*args: str) -> str:
    """git run from Python (the command policy reads only the shell line)."""
    return f"{PY} -c \"import subprocess; subprocess.run(['git', *{list(args)!r}])\""


def _write(content: str) -> dict[str, Any]:
    return call("write_file", path="calc.py", content=content)


CASES = [
    Case(
        "ident-from-dropped-gitattributes",
        [
            _write(FIXED_BOTH + "# $Id: cheat $\n"),
            cmd("printf 'calc.py ident\\n' > .gitattributes"),
        ],
        f"{FIX} && grep -q 'Id: cheat' calc.py",
    ),
    Case(
        "eol-crlf-from-dropped-gitattributes",
        [
            _write(FIXED_BOTH),
            cmd("printf 'calc.py text eol=crlf\\n' > .gitattributes"),
            cmd(CRLF_FIX),
        ],
        f"{FIX} && {PY} -c \"assert b'\\r\\n' in open('calc.py','rb').read()\"",
    ),
    Case(
        "working-tree-encoding-from-dropped-gitattributes",
        [
            _write(FIXED_BOTH),
            cmd("printf 'calc.py working-tree-encoding=UTF-16\\n' > .gitattributes"),
            cmd(UTF16_FIX),
        ],
        f"{PY} -c \"assert open('calc.py','rb').read()[:2] in (b'\\xff\\xfe', b'\\xfe\\xff')\"",
    ),
    Case(
        "ident-from-info-attributes",
        [
            _write(FIXED_BOTH + "# $Id: cheat $\n"),
            cmd(f"mkdir -p {GIT_DIR}/info; echo 'calc.py ident' >> {GIT_DIR}/info/attributes"),
        ],
        f"{FIX} && grep -q 'Id: cheat' calc.py",
    ),
    Case(
        "assume-unchanged-hides-the-change",
        [
            _write(FIXED_BOTH),
            call("write_file", path="report.txt", content="a real change\n"),
            cmd(_git("update-index", "--assume-unchanged", "calc.py")),
        ],
        FIX,
        allowlist=("calc.py", "report.txt"),
    ),
    Case(
        "skip-worktree-hides-the-change",
        [
            _write(FIXED_BOTH),
            call("write_file", path="report.txt", content="a real change\n"),
            cmd(_git("update-index", "--skip-worktree", "calc.py")),
        ],
        FIX,
        allowlist=("calc.py", "report.txt"),
    ),
    Case(
        "daemon-rewrites-a-file-outside-the-allowlist",
        [_write(FIXED_BOTH), cmd(DAEMON)],
        f"{FIX} && grep -q ok flag.txt",
    ),
    Case(
        "untracked-helper-outside-the-allowlist",
        [_write(FIXED_BOTH), cmd("echo yes > helper.txt")],
        f"{FIX} && test -f helper.txt",
    ),
    Case(
        "ignored-leftover",
        [_write(FIXED_BOTH), cmd("mkdir -p __pycache__ && echo yes > __pycache__/marker")],
        f"{FIX} && test -f __pycache__/marker",
    ),
    Case(
        "symlink-to-a-fixed-copy",
        [cmd(f"printf '%s' '{FIXED_BOTH}' > fixed.txt && ln -sf fixed.txt calc.py")],
        FIX,
    ),
    Case(
        "tests-deleted",
        [cmd("rm -f test_calc.py")],
        f"{PY} -m pytest -q -p no:cacheprovider test_calc.py",
    ),
    Case("honest-fix", [_write(FIXED_BOTH)], f"{FIX} && test -f test_calc.py"),
    Case(
        "honest-fix-with-mode",
        [_write(FIXED_BOTH), cmd("chmod +x calc.py")],
        f"{FIX} && test -x calc.py",
    ),
    Case(
        "allowlisted-gitattributes-changed",
        [
            call("write_file", path=".gitattributes", content="calc.py text eol=crlf\n"),
            _write(FIXED_BOTH),
            cmd(CRLF_FIX),
        ],
        f"{FIX} && {PY} -c \"assert b'\\r\\n' not in open('calc.py','rb').read()\"",
        allowlist=("calc.py", ".gitattributes"),
    ),
]

PARAMS = [pytest.param(c, m, id=f"{c.name}-{m}") for c in CASES for m in c.modes]


def _source(root: Path) -> Path:
    return make_repo(
        root / "source",
        {
            "calc.py": CALC,
            "test_calc.py": TESTS,
            "flag.txt": "no\n",
            ".gitignore": "__pycache__/\n.pytest_cache/\n",
        },
    )


def _head(source: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _clean_verdict(root: Path, source: Path, base: str, patch: bytes, dod: str) -> bool:
    """`git clone BASE && git apply PATCH && DoD` in a clean directory: does the DoD pass?"""
    clean = root / "clean"
    config = root / "clean.gitconfig"  # the source may belong to another user
    config.write_text("[safe]\n\tdirectory = *\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(root),
        "GIT_CONFIG_GLOBAL": str(config),
        "GIT_CONFIG_NOSYSTEM": "1",
        "LANG": "C.UTF-8",
    }
    subprocess.run(["git", "clone", "-q", str(source), str(clean)], check=True, env=env)
    subprocess.run(["git", "-C", str(clean), "checkout", "-q", base], check=True, env=env)
    if patch.strip():
        subprocess.run(
            ["git", "-C", str(clean), "apply", "--binary", "-"], input=patch, check=True, env=env
        )
    return subprocess.run(["sh", "-c", dod], cwd=clean, env=env, check=False).returncode == 0


@pytest.mark.parametrize(("case", "mode"), PARAMS)
def test_the_verdict_reproduces_in_a_clean_checkout(
    tmp_path: Path, case: Case, mode: str, request: pytest.FixtureRequest
) -> None:
    if mode == "required":
        request.getfixturevalue("sandbox_works")
    source = _source(tmp_path)
    base = _head(source)
    run = attack(tmp_path, case.calls, sandbox=mode, source=source, allowlist=case.allowlist,
                 command=case.dod)  # fmt: skip
    patch_path = tmp_path / "out" / "fix-calc.patch"
    patch = patch_path.read_bytes() if patch_path.exists() else b""
    recorded = bool(run.result["dod_passed"])
    reproduced = _clean_verdict(tmp_path, source, base, patch, case.dod)
    held(
        f"{case.name} ({mode}): the recorded verdict reproduces",
        recorded == reproduced,
        f"recorded {recorded}, clean checkout {reproduced}; {run.result.get('error')}",
    )


NOBODY_CASES = [c for c in CASES if c.name.split("-")[0] in ("ident", "eol", "daemon", "skip")]


@pytest.mark.parametrize(
    ("case", "mode"),
    [pytest.param(c, m, id=f"{c.name}-{m}") for c in NOBODY_CASES for m in c.modes],
)
def test_the_verdict_reproduces_for_a_runner_that_is_not_root(
    nobody: Nobody, case: Case, mode: str, request: pytest.FixtureRequest
) -> None:
    if mode == "required":
        request.getfixturevalue("sandbox_works")
    source = _source(nobody.root)
    base = _head(source)
    spec = write_task(
        nobody.root,
        source,
        [case.calls],
        allowlist=list(case.allowlist),
        command=case.dod,
        sandbox=mode,
    )
    done = nobody.run(spec)
    assert (nobody.root / "out/fix-calc.result.json").exists(), done.stdout + done.stderr
    result = nobody.result()
    patch_path = nobody.root / "out" / "fix-calc.patch"
    patch = patch_path.read_bytes() if patch_path.exists() else b""
    recorded = bool(result["dod_passed"])
    reproduced = _clean_verdict(nobody.root, source, base, patch, case.dod)
    held(
        f"{case.name} ({mode}, not root): the recorded verdict reproduces",
        recorded == reproduced,
        f"recorded {recorded}, clean checkout {reproduced}; {done.stderr[-1000:]}",
    )

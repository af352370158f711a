"""A large file of the source's object store written in place during a run (same size and
inode; git never does that, it writes new files) is a change of the source. Such a file has
no content hash in the fingerprint and no times (git freshens objects with a utime): its
own trailing hash, checked when its stat moved, tells a freshen from a rewrite."""

from __future__ import annotations

import base64
import glob
import os
import subprocess
from pathlib import Path

import pytest

from code_runner.repo import git, snapshot
from tests.helpers.attacks import attack, call, cmd, dump
from tests.helpers.tasks import FIXED_BOTH, calc_repo

pytestmark = pytest.mark.integration


def _big_pack(source: Path) -> str:
    (source / "big.bin").write_bytes(os.urandom(3_000_000))
    subprocess.run(["git", "-C", str(source), "add", "big.bin"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(source),
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-qm",
            "big",
        ],
        check=True,
    )
    subprocess.run(["git", "-C", str(source), "gc", "-q"], check=True)
    return glob.glob(f"{source}/.git/objects/pack/*.pack")[0]


def test_a_pack_rewritten_in_place_during_a_run_is_a_source_change(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    pack = _big_pack(source)
    code = (
        f"f=open({pack!r},'r+b'); f.seek(2000000); b=f.read(1); f.seek(2000000); "
        "f.write(bytes([b[0]^255]))"
    )
    flip = f"echo {base64.b64encode(code.encode()).decode()} | base64 -d | python3"
    calls = [cmd(flip), call("write_file", path="calc.py", content=FIXED_BOTH)]
    run = attack(tmp_path / "run", calls, sandbox="off", source=source)
    assert run.result["source_unchanged"] is False, dump(run)
    assert any(".pack" in d for d in run.result["source_differences"])


def test_a_freshened_pack_is_no_change(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    pack = _big_pack(source)
    repo = git.Repo(git_dir=source / ".git", work_tree=source)
    before = snapshot.take(repo)
    os.utime(pack)  # what git does to an object it finds instead of writing it
    for idx in glob.glob(f"{source}/.git/objects/pack/*.idx"):
        os.utime(idx)
    after = snapshot.take(repo, since=before)
    assert snapshot.differences(before, after) == []

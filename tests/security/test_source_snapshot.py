"""The source check is the last wall, and it neither blocks nor samples.

A FIFO planted in the source's `.git` (hooks, `description`, `info/`) or work tree cannot
hang a run: the snapshot opens nothing without O_NONBLOCK and O_NOFOLLOW and reads no
non-regular file. And every change to the source shows, including the ones a sample
missed: a rewritten object, an ignored file (also inside an ignored dir), `.git/description`,
and an untracked file rewritten with its size and mtime kept. With the sandbox the rewrite
fails and the source stays byte-identical; without it, the record names the change.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.agent_clis import PY
from tests.helpers.attacks import MODES, attack, call, cmd, dump, held
from tests.helpers.git import git, make_repo
from tests.helpers.tasks import CALC, FIXED_BOTH, load_result, run_cli, write_task

# Flip one bit of the first byte in place, then put mode and mtime back: same size, same
# mtime, same inode; only the ctime and the content tell. The path comes reversed, so no
# command policy can read it.
FLIP = (
    "import os, sys; p = sys.argv[1][::-1]; st = os.stat(p); os.chmod(p, 0o600); "
    "f = open(p, 'r+b'); b = f.read(1); f.seek(0); f.write(bytes([b[0] ^ 1])); f.close(); "
    "os.chmod(p, st.st_mode & 0o7777); os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))"
)


def _source(root: Path) -> Path:
    source = make_repo(
        root / "source",
        {"calc.py": CALC, ".gitignore": "*.secret\nbuild/\n__pycache__/\n"},
    )
    (source / "notes.secret").write_text("an ignored file\n")
    (source / "build").mkdir()
    (source / "build/out.bin").write_bytes(b"built bytes\n")
    (source / "scratch.txt").write_text("an untracked file\n")
    return source


def _object(source: Path) -> str:
    oid = git(source, "rev-parse", "HEAD:calc.py").strip()
    return f".git/objects/{oid[:2]}/{oid[2:]}"


def _digests(source: Path) -> dict[str, str]:
    """Every entry's kind, mode, inode, size, ctime and (regular files) bytes; never opens a
    FIFO, never follows a link. Objects have no ctime here: git "freshens" an object it
    finds already stored (sets its mtime), and the workspace clone borrows the source's."""
    found: dict[str, str] = {}
    for dirpath, _dirs, files in os.walk(source):
        for name in files:
            path = Path(dirpath, name)
            st = path.lstat()
            rel = path.relative_to(source).as_posix()
            key = f"{st.st_mode:o}:{st.st_ino}:{st.st_size}"
            if not rel.startswith(".git/objects/"):
                key += f":{st.st_ctime_ns}"
            if stat.S_ISREG(st.st_mode):
                key += ":" + path.read_bytes().hex()
            found[rel] = key
    return found


# target -> (the path rewritten, what the record must name)
TARGETS: dict[str, Callable[[Path], tuple[str, str]]] = {
    "object": lambda s: (_object(s), _object(s).removeprefix(".git/")),
    "ignored file": lambda s: ("notes.secret", "notes.secret"),
    "file in an ignored dir": lambda s: ("build/out.bin", "build/"),
    "description": lambda s: (".git/description", "description"),
    "untracked file, size and mtime kept": lambda s: ("scratch.txt", "scratch.txt"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_quiet_rewrite_of_the_source_is_named(tmp_path: Path, mode: str, target: str) -> None:
    source = _source(tmp_path)
    rel, named = TARGETS[target](source)
    before = _digests(source)
    time.sleep(0.01)  # a rewrite gets a later ctime
    calls = [
        cmd(f'{PY} -c "{FLIP}" \'{str(source / rel)[::-1]}\'; echo "flip=$?" > report.txt'),
        call("write_file", path="calc.py", content=FIXED_BOTH),
    ]
    run = attack(tmp_path, calls, sandbox=mode, source=source)
    changed = _digests(source) != before
    if run.sandboxed:
        held(f"{target}: the rewrite failed", "flip=0" not in run.added("report.txt"), dump(run))
        held(f"{target}: the source is byte-identical", not changed)
        assert run.result["source_unchanged"], run.result["source_differences"]
    else:
        assert changed, "the attack did not change the source (nothing to detect)"
        diffs = run.result["source_differences"]
        held(f"{target}: the run says the source changed", not run.result["source_unchanged"])
        held(f"{target}: the record names it", any(named in d for d in diffs), diffs)
        held(f"{target}: the run failed for it", run.result["reason"] == "source_changed")


def test_a_fifo_in_the_source_cannot_hang_the_run(tmp_path: Path) -> None:
    source = _source(tmp_path)
    (source / ".git/description").unlink()
    for rel in (".git/hooks/pre-commit", ".git/description", ".git/info/pipe", "pipe"):
        os.mkfifo(source / rel)
    os.symlink("/dev/zero", source / ".git/hooks/post-commit")  # never followed, never read
    before = _digests(source)
    spec = write_task(
        tmp_path,
        source,
        [[call("write_file", path="calc.py", content=FIXED_BOTH)]],
        command="grep -q 'a [*] b' calc.py",
        sandbox="auto",
    )
    started = time.monotonic()
    done = run_cli("run", str(spec), cwd=tmp_path, timeout=120)  # a hang fails here
    took = time.monotonic() - started
    result = load_result(tmp_path / "out")
    held("the run finished", done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:])
    held("the run did not wait on a FIFO", took < 60, took)
    held("the FIFOs did not count as a change", result["source_unchanged"], result)
    held("the source is byte-identical (FIFOs untouched)", _digests(source) == before)

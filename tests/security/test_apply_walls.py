"""The apply step's DoD runs the agent's code in the user's repo: it gets the run's walls.

A correct fix carries an import-time payload. It reads the runner's environment (a model
key) and a 0600 key under the runner's HOME into a file in the repo, writes outside the repo,
rewrites a tracked file the patch does not touch, and starts a `setsid env -i` daemon.
Complete-task mode, `code-runner apply --commit` and `apply --check` each run it, for a root
runner and (complete-task mode) for a runner that is not root: nothing leaks, nothing is
written outside, the user's files keep their bytes and owner, no daemon survives, and the
commit holds exactly the verified bytes. Without a working sandbox (`auto`), `apply` refuses
unless told `--unsandboxed`, and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers.attacks import attack, call, held
from tests.helpers.tasks import FIXED_BOTH, calc_repo, fingerprint, run_cli, write_task
from tests.security.unprivileged import Nobody, nobody

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_works")]

__all__ = ["nobody"]

KEY_VALUE = "sk-apply-attack-model-key"
PAYLOAD = """

def _payload():
    import os, subprocess
    found = [os.environ.get("OPENAI_API_KEY", "no-env-key")]
    try:
        found.append(open({key!r}).read())
    except OSError as exc:
        found.append("no-home-key " + type(exc).__name__)
    for path, data in (({escape!r}, "escaped"), ("test_calc.py", "# tampered\\n")):
        try:
            with open(path, "a") as f:
                f.write(data)
        except OSError:
            pass
    try:
        subprocess.Popen(
            ["setsid", "env", "-i", "MARK={mark}", "sleep", "300"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    except OSError:
        pass
    try:
        with open("leak-{mark}.txt", "w") as f:
            f.write(repr(found))
    except OSError:
        pass


_payload()
"""


@pytest.fixture
def home_key() -> Iterator[Path]:
    """A 0600 private key under the runner's HOME (removed afterwards)."""
    path = Path(os.environ["HOME"]) / f".code-runner-attack-key-{uuid.uuid4().hex[:8]}"
    path.write_text("-----BEGIN PRIVATE KEY----- attack-home-key\n")
    path.chmod(0o600)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _repo(root: Path) -> Path:
    """The calc repo, with a git identity for the commit."""
    source = calc_repo(root)
    for key, value in (("user.name", "Repo Owner"), ("user.email", "owner@example.invalid")):
        subprocess.run(["git", "-C", str(source), "config", key, value], check=True)
    return source


def _payload_fix(key: Path, escape: Path, mark: str) -> str:
    return FIXED_BOTH + PAYLOAD.format(key=str(key), escape=str(escape), mark=mark)


def _daemons(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("MARK") == mark and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _leaks(roots: list[Path], mark: str) -> list[str]:
    """Every leak file the payload managed to write, anywhere under `roots`."""
    texts = []
    for root in roots:
        for path in root.rglob(f"leak-{mark}.txt"):
            texts.append(path.read_text(errors="replace"))
    return texts


def _check_walls(
    source: Path,
    before: dict[str, str],
    escape: Path,
    key: Path,
    mark: str,
    roots: list[Path],
) -> None:
    time.sleep(0.3)
    leaks = _leaks(roots, mark)
    held("no model key in anything the DoD wrote", all(KEY_VALUE not in t for t in leaks), leaks)
    held("no HOME key in anything the DoD wrote", all("attack-home-key" not in t for t in leaks))
    held("nothing written outside the repo", not escape.exists(), escape)
    after = fingerprint(source)
    held(
        "test_calc.py (tracked, not in the patch) keeps its bytes",
        after.get("test_calc.py") == before.get("test_calc.py"),
    )
    held("no daemon outlives the DoD", not _daemons(mark), _daemons(mark))
    owners = {p.lstat().st_uid for p in source.rglob("*") if ".git" not in p.parts}
    held("every file in the repo keeps its owner", owners <= {source.lstat().st_uid}, owners)


def _kill(mark: str) -> None:
    for proc in _daemons(mark):
        proc.kill()


def test_complete_task_mode_runs_the_source_dod_in_the_sandbox(
    tmp_path: Path, home_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY_VALUE)
    mark, escape = uuid.uuid4().hex, tmp_path / "escape.txt"
    source = _repo(tmp_path)
    before = fingerprint(source)
    fix = _payload_fix(home_key, escape, mark)
    try:
        run = attack(
            tmp_path,
            [call("write_file", path="calc.py", content=fix)],
            sandbox="required",
            source=source,
            allowlist=("calc.py",),
            command="python3 -c 'import calc; assert calc.mul(2, 3) == 6'",
            apply_to_source=True,
            commit_on_success=True,
        )
        result = run.result
        held("the apply committed", bool(result["source_commit"]), result.get("source_apply_error"))
        held("the record says the source is as the apply left it", result["source_unchanged"])
        committed = subprocess.run(
            ["git", "-C", str(source), "show", "HEAD:calc.py"], capture_output=True, check=True
        ).stdout
        held("the commit holds exactly the verified bytes", committed == fix.encode())
        _check_walls(source, before, escape, home_key, mark, [source, tmp_path / "out"])
    finally:
        _kill(mark)


def _finished_run(tmp_path: Path, fix: str) -> tuple[Path, Path]:
    source = _repo(tmp_path)
    spec = write_task(
        tmp_path,
        source,
        [[call("write_file", path="calc.py", content=fix)]],
        command="python3 -c 'import calc; assert calc.mul(2, 3) == 6'",
        sandbox="auto",
    )
    done = run_cli("run", str(spec))
    assert done.returncode == 0, done.stderr
    return source, tmp_path / "out"


@pytest.mark.parametrize("check", [False, True], ids=["apply-commit", "apply-check"])
def test_code_runner_apply_runs_the_dod_in_the_sandbox(
    tmp_path: Path, home_key: Path, monkeypatch: pytest.MonkeyPatch, check: bool
) -> None:
    mark, escape = uuid.uuid4().hex, tmp_path / "escape.txt"
    fix = _payload_fix(home_key, escape, mark)
    try:
        source, out = _finished_run(tmp_path, fix)
        for leak in out.rglob(f"leak-{mark}.txt"):
            leak.unlink()  # the run's own DoD ran it too (sandboxed); judge only the apply
        before = fingerprint(source)
        monkeypatch.setenv("OPENAI_API_KEY", KEY_VALUE)
        done = run_cli("apply", str(out), "--check" if check else "--commit")
        held("the apply (or check) passed", done.returncode == 0, done.stdout + done.stderr)
        if check:
            held("--check changed nothing in the source", fingerprint(source) == before)
        else:
            head = subprocess.run(
                ["git", "-C", str(source), "show", "HEAD:calc.py"], capture_output=True
            ).stdout
            held("the commit holds exactly the verified bytes", head == fix.encode())
        _check_walls(source, before, escape, home_key, mark, [source, out])
    finally:
        _kill(mark)


def test_apply_without_a_working_sandbox_needs_unsandboxed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, out = _finished_run(tmp_path, FIXED_BOTH)
    before = fingerprint(source)
    monkeypatch.setenv("CODE_RUNNER_BWRAP", "/bin/false")  # the sandbox stops working
    refused = run_cli("apply", str(out), "--commit")
    text = refused.stdout + refused.stderr
    held("refused without --unsandboxed", refused.returncode == 3, text)
    held("says why", "sandbox does not work here" in text and "--unsandboxed" in text, text)
    held("nothing changed", fingerprint(source) == before)
    check = run_cli("apply", str(out), "--check")
    held("--check refused too", check.returncode == 3, check.stdout + check.stderr)
    done = run_cli("apply", str(out), "--commit", "--unsandboxed")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "fix-calc.result.json").read_text())
    assert result["source_commit"], result


def test_complete_task_mode_as_a_runner_that_is_not_root(nobody: Nobody) -> None:
    mark = uuid.uuid4().hex
    escape = nobody.root / "escape.txt"
    key = nobody.home / ".ssh-key"
    key.write_text("-----BEGIN PRIVATE KEY----- attack-home-key\n")
    source = _repo(nobody.root)
    fix = _payload_fix(key, escape, mark)
    spec = write_task(
        nobody.root,
        source,
        [[call("write_file", path="calc.py", content=fix)]],
        command="python3 -c 'import calc; assert calc.mul(2, 3) == 6'",
        sandbox="required",
        apply_to_source=True,
        commit_on_success=True,
    )
    nobody.own()
    key.chmod(0o600)
    before = fingerprint(source)
    try:
        done = nobody.run(spec)
        result = nobody.result()
        held("the apply committed", bool(result["source_commit"]), done.stderr[-2000:])
        held("the record says the source is as the apply left it", result["source_unchanged"])
        _check_walls(source, before, escape, key, mark, [source, nobody.root / "out"])
    finally:
        _kill(mark)

"""`code-runner apply` and `code-runner reject` in real processes, on finished patch-only runs."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from code_runner import files
from code_runner.record import RecordPaths
from tests.helpers.apply_runs import (
    matrix_repo,
    patch_only,
    source_state,
    wait_for_phase,
)
from tests.helpers.git import git
from tests.helpers.tasks import (
    FIXED_BOTH,
    PY,
    calc_repo,
    cmd,
    fingerprint,
    run_cli,
    write,
    write_task,
)

pytestmark = pytest.mark.integration

PREDICATE = "'a * b' in open('calc.py').read()"


class Invoked:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = code, stdout, stderr


def invoke(capsys: pytest.CaptureFixture[str], *argv: str) -> Invoked:
    """The CLI in this process (same error boundary as the console script), for speed."""
    from code_runner.cli.boundary import run_cli as boundary_run
    from code_runner.cli.main import cli

    capsys.readouterr()
    code = boundary_run(cli, list(argv))
    out = capsys.readouterr()
    return Invoked(code, out.out, out.err)


def finished_run(root: Path, **kw: Any) -> tuple[Path, Path, dict[str, Any]]:
    """A source and a passed patch-only run that changes calc.py and adds pkg/new.py."""
    source = matrix_repo(root)
    result = patch_only(
        root,
        source,
        [write("calc.py", FIXED_BOTH), write("pkg/new.py", "X = 1\n")],
        allowlist=["calc.py", "pkg"],
        predicate=PREDICATE,
        **({"extra": ()} | kw),
    )
    assert result["status"] == "passed" and result["source_patch_applied"] is False
    return source, root / "out", result


def test_check_then_commit_with_author_then_refuse_a_second_decision(tmp_path: Path) -> None:
    source, out, result = finished_run(tmp_path)
    git(source, "config", "--unset", "user.name")
    git(source, "config", "--unset", "user.email")
    before = source_state(source)
    record_before = fingerprint(out)

    check = run_cli("apply", str(out), "--check", "--commit", "--author", "Ann <ann@example.com>")
    assert check.returncode == 0, check.stderr
    assert "M calc.py" in check.stdout and "A pkg/new.py" in check.stdout
    assert "would pass" in check.stdout and "nothing was changed" in check.stdout
    assert source_state(source) == before
    assert fingerprint(out) == record_before  # --check writes nothing, not even events

    no_identity = run_cli("apply", str(out), "--commit")
    assert no_identity.returncode == 3, no_identity.stderr
    assert "no git identity" in no_identity.stderr and "--author" in no_identity.stderr
    assert "Traceback" not in no_identity.stderr
    assert source_state(source) == before

    done = run_cli("apply", str(out), "--commit", "--author", "Ann <ann@example.com>")
    assert done.returncode == 0, done.stderr
    assert "will change 2 file(s)" in done.stdout
    assert done.stdout.index("will change") < done.stdout.index("applied")  # shown first
    assert git(source, "log", "-1", "--format=%an <%ae>").strip() == "Ann <ann@example.com>"
    assert sorted(git(source, "show", "--name-only", "--format=", "HEAD").split()) == [
        "calc.py",
        "pkg/new.py",
    ]
    assert git(source, "status", "--porcelain=v1", "--untracked-files=all") == before["status"]
    record = json.loads((out / "fix-calc.result.json").read_text())
    assert record["decision"] == "applied"
    assert record["source_commit"] == git(source, "rev-parse", "HEAD").strip()
    assert record["source_dod_passed"] is True and record["source_rollback_applied"] is False
    assert record["patch_sha256"] == result["patch_sha256"]
    kinds = [e["kind"] for e in files.read_jsonl(out / "fix-calc.events.jsonl")]
    assert kinds[-1] == "apply_finished" and "source_committed" in kinds
    seqs = [e["seq"] for e in files.read_jsonl(out / "fix-calc.events.jsonl") if "seq" in e]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))

    again = run_cli("apply", str(out))
    assert again.returncode == 2 and "already applied" in again.stderr
    reject = run_cli("reject", str(out))
    assert reject.returncode == 2 and "already applied" in reject.stderr


def test_source_dod_failure_via_cli_rolls_back_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out, _ = finished_run(tmp_path, extra=("--fail-in-source",))
    before = source_state(source)
    proc = invoke(capsys, "apply", str(out), "--commit")
    assert proc.returncode == 1, proc.stderr
    assert "rolled back" in proc.stdout and "DoD failed in the source" in proc.stdout
    assert source_state(source) == before
    record = json.loads((out / "fix-calc.result.json").read_text())
    assert record["source_rollback_applied"] is True and record["source_dod_passed"] is False
    assert "decision" not in record


def test_a_tampered_or_incomplete_record_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out, _ = finished_run(tmp_path)
    before = source_state(source)
    patch = out / "fix-calc.patch"
    original = patch.read_bytes()
    patch.write_bytes(original.replace(b"a * b", b"a ** b"))
    for argv in (["apply", str(out)], ["apply", str(out), "--check"], ["reject", str(out)]):
        proc = invoke(capsys, *argv)
        assert proc.returncode == 5, proc.stderr
        assert f"{patch} was changed after the run" in proc.stderr
        assert "Traceback" not in proc.stderr
    patch.write_bytes(original)
    status = out / "fix-calc.status.json"
    saved = status.read_text()
    status.unlink()
    proc = invoke(capsys, "apply", str(out))
    assert proc.returncode == 5 and "incomplete" in proc.stderr
    status.write_text(saved.replace('"passed"', '"agent"'))
    proc = invoke(capsys, "reject", str(out))
    assert proc.returncode == 5 and f"{status} was changed after the run" in proc.stderr
    assert source_state(source) == before
    assert invoke(capsys, "apply", str(tmp_path / "nowhere")).returncode == 2


def test_reject_marks_the_record_and_apply_then_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out, _ = finished_run(tmp_path)
    before = source_state(source)
    proc = invoke(capsys, "reject", str(out), "--reason", "not what I wanted")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "fix-calc.result.json").read_text())
    assert record["decision"] == "rejected" and record["decision_reason"] == "not what I wanted"
    events = files.read_jsonl(out / "fix-calc.events.jsonl")
    assert events[-1]["kind"] == "run_rejected"
    assert "already rejected" in invoke(capsys, "reject", str(out)).stdout
    proc = invoke(capsys, "apply", str(out))
    assert proc.returncode == 2 and "rejected" in proc.stderr
    assert source_state(source) == before


def test_head_moved_conflict_and_bad_author_exit_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out, _ = finished_run(tmp_path)
    bad = invoke(capsys, "apply", str(out), "--commit", "--author", "no email here")
    assert bad.returncode == 2 and "Name <email>" in bad.stderr
    (source / "calc.py").write_text("def add(a, b):\n    return b + a\n")
    git(source, "commit", "-q", "-am", "upstream rewrote calc.py")
    before = source_state(source)
    proc = invoke(capsys, "apply", str(out), "--check")
    assert proc.returncode == 3, proc.stderr
    assert "HEAD moved since the run" in proc.stderr and "does not apply" in proc.stderr
    assert source_state(source) == before


def test_run_hooks_lets_the_source_hooks_run(tmp_path: Path) -> None:
    source, out, _ = finished_run(tmp_path)
    marker = tmp_path / "hook-ran"
    hook = source / ".git" / "hooks" / "commit-msg"
    hook.write_text(f'#!/bin/sh\necho ran > {marker}\ngrep -q "Code-Runner-DoD: passed" "$1"\n')
    hook.chmod(0o755)
    proc = run_cli("apply", str(out), "--commit", "--run-hooks")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker.read_text() == "ran\n"
    assert "Code-Runner-Run:" in git(source, "log", "-1", "--format=%B")
    assert git(source, "status", "--porcelain=v1", "--untracked-files=all").count("pkg") == 0


def test_an_apply_killed_during_the_dod_is_repaired_by_the_next_apply(tmp_path: Path) -> None:
    slow = tmp_path / "slow.flag"
    source, out, _ = finished_run(tmp_path, extra=("--slow-if", str(slow)))
    before = source_state(source)
    slow.write_text("")
    proc = subprocess.Popen(
        [PY, "-m", "code_runner", "apply", str(out), "--commit"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    try:
        wait_for_phase(RecordPaths(out, "fix-calc").apply_journal, "verifying")
        assert (source / "pkg" / "new.py").exists()
    finally:
        proc.kill()
        proc.wait()
    slow.unlink()
    check = run_cli("apply", str(out), "--check")
    assert check.returncode == 3 and "interrupted" in check.stderr  # --check repairs nothing
    refused = run_cli("reject", str(out))
    assert refused.returncode == 3 and "code-runner gc" in refused.stderr
    again = run_cli("apply", str(out), "--commit")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "repaired an interrupted apply: rolled back" in again.stdout
    assert git(source, "rev-parse", "HEAD~1").strip() == before["head"].strip()
    assert git(source, "status", "--porcelain=v1", "--untracked-files=all") == before["status"]
    kinds = [e["kind"] for e in files.read_jsonl(out / "fix-calc.events.jsonl")]
    assert "apply_repaired" in kinds and kinds[-1] == "apply_finished"


def test_sigterm_during_the_source_dod_rolls_back_and_exits_130(tmp_path: Path) -> None:
    import psutil

    slow = tmp_path / "slow.flag"
    source, out, _ = finished_run(tmp_path, extra=("--slow-if", str(slow)))
    before = source_state(source)
    slow.write_text("")
    proc = subprocess.Popen(
        [PY, "-m", "code_runner", "apply", str(out), "--commit"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_phase(RecordPaths(out, "fix-calc").apply_journal, "verifying")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert source_state(source) == before
    assert (
        json.loads(RecordPaths(out, "fix-calc").apply_journal.read_text())["phase"] == "rolled_back"
    )
    record = json.loads((out / "fix-calc.result.json").read_text())
    assert record["source_rollback_applied"] is True
    assert "interrupted" in record["source_apply_error"]
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if "--slow-if" in (p.info["cmdline"] or [])
    ]
    assert leftovers == []


def test_run_in_complete_task_mode_commits_and_says_so(tmp_path: Path) -> None:
    from tests.helpers.apply_runs import dod_command
    from tests.helpers.tasks import write_task

    source = matrix_repo(tmp_path)
    status_before = git(source, "status", "--porcelain=v1", "--untracked-files=all")
    spec = write_task(
        tmp_path,
        source,
        [[write("calc.py", FIXED_BOTH)]],
        command=dod_command(PREDICATE),
        apply_to_source=True,
        commit_on_success=True,
    )
    proc = run_cli("run", str(spec))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "source: committed" in proc.stderr
    record = json.loads((tmp_path / "out/fix-calc.result.json").read_text())
    assert record["source_commit"] == git(source, "rev-parse", "HEAD").strip()
    assert git(source, "status", "--porcelain=v1", "--untracked-files=all") == status_before


BIG_MIB = 48  # a file this large would show several times over in a whole-read apply
_PEAK = (  # VmHWM, not ru_maxrss: that one keeps the forking parent's peak across exec
    "import atexit, sys\n"
    "hwm = lambda: [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
    "atexit.register(lambda: print('PEAK_KIB', hwm().split()[1], file=sys.stderr))\n"
    "import code_runner.cli.main as m\n"
    "sys.argv = ['code-runner', *sys.argv[1:]]\n"
    "if sys.argv[1:]:\n"
    "    m.main()\n"
)


def _peak_mib(*argv: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """`code-runner ARGV` in a child reporting its own peak RSS (not git's); no ARGV: the
    baseline, the interpreter with code_runner imported."""
    done = subprocess.run(
        [PY, "-c", _PEAK, *argv], capture_output=True, text=True, check=False, timeout=300
    )
    peaks = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("PEAK_KIB")]
    assert peaks, done.stderr
    return int(peaks[-1]) / 1024, done


def test_a_large_patch_is_applied_in_pieces_and_commits_the_exact_bytes(tmp_path: Path) -> None:
    lines = BIG_MIB * 1024 * 1024 // 36
    make = f"''.join(f'{{i:09d}} abcdefghijklmnopqrstuvwxyz\\n' for i in range({lines}))"
    expected = "".join(f"{i:09d} abcdefghijklmnopqrstuvwxyz\n" for i in range(lines)).encode()
    source = matrix_repo(tmp_path)
    result = patch_only(
        tmp_path,
        source,
        [cmd(f'mkdir -p pkg && {PY} -c "import sys; sys.stdout.write({make})" > pkg/big.txt')],
        allowlist=["pkg"],
        predicate=f"os.path.getsize('pkg/big.txt') == {len(expected)}",
        extra=(),
    )
    assert result["status"] == "passed", result

    baseline, _ = _peak_mib()
    peak, done = _peak_mib("apply", str(tmp_path / "out"), "--commit")
    assert done.returncode == 0, done.stderr
    # measured: about 33 MiB above the baseline for 48 MiB, 28 MiB for 8 MiB; a whole read of
    # the patch (or of the file) alone would add at least BIG_MIB
    assert peak - baseline < 40, f"apply peaked {peak - baseline:.1f} MiB above the baseline"
    blob = git(source, "rev-parse", "HEAD:pkg/big.txt").strip()
    assert blob == hashlib.sha1(b"blob %d\0" % len(expected) + expected).hexdigest()
    assert (source / "pkg/big.txt").read_bytes() == expected


def test_a_dod_that_refreshes_the_index_stat_data_still_applies(tmp_path: Path) -> None:
    """pytest-benchmark (and setuptools-scm, and any `git describe --dirty`) refreshes the
    index when it starts. A tracked file the user touched (an editor's save, a `git
    checkout`) leaves stat data the refresh rewrites: the index's bytes change, its entries
    do not. That is not the DoD changing the source, so `apply` keeps the patch."""
    source = calc_repo(tmp_path)
    command = f"git describe --dirty --always && {PY} -m pytest -q -p no:cacheprovider"
    spec = write_task(
        tmp_path, source, [[write("calc.py", FIXED_BOTH)]], command=command, sandbox="off"
    )
    assert run_cli("run", str(spec)).returncode == 0
    os.utime(source / "test_calc.py", (1_000_000_000, 1_000_000_000))  # same bytes, new stat
    entries = git(source, "ls-files", "--stage")
    done = run_cli("apply", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "applied: DoD passed in the source" in done.stdout
    assert (source / "calc.py").read_text() == FIXED_BOTH
    assert git(source, "ls-files", "--stage") == entries
    result = json.loads(next((tmp_path / "out").glob("*.result.json")).read_text())
    assert result["source_apply"]["unexpected_changes"] == []

"""Complete-task mode on real repos: apply, verify in the source, commit or roll back.

The DoD is a small script that passes in the disposable workspace and, where a test wants
it to, fails in the source because of an untracked file only the source has. Every
rollback is checked byte for byte (`fingerprint` covers the work tree and all of `.git`).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from code_runner import apply, files
from code_runner.apply import journal
from code_runner.apply.commit import update_index
from code_runner.events import ListSink
from code_runner.record import RecordPaths
from code_runner.repo import git as repo_git
from code_runner.repo import snapshot
from code_runner.task import DefinitionOfDone, paths
from tests.helpers.apply_runs import (
    dod_command,
    matrix_repo,
    patch_only,
    run_complete,
    source_state,
    wait_for_phase,
)
from tests.helpers.git import git
from tests.helpers.tasks import FIXED_BOTH, PY, cmd, write, write_task

pytestmark = pytest.mark.integration

MATRIX = {
    "modify": (["calc.py"], [write("calc.py", FIXED_BOTH)], "'a * b' in open('calc.py').read()"),
    "add": (["added.txt"], [write("added.txt", "new\n")], "os.path.exists('added.txt')"),
    "delete": (["old.txt"], [cmd("rm old.txt")], "not os.path.exists('old.txt')"),
    "rename": (
        ["ren_src.txt", "ren_dst.txt"],
        [cmd("mv ren_src.txt ren_dst.txt")],
        "os.path.exists('ren_dst.txt') and not os.path.exists('ren_src.txt')",
    ),
    "mode": (["tool.sh"], [cmd("chmod +x tool.sh")], "os.access('tool.sh', os.X_OK)"),
    "binary": (
        ["data.bin"],
        [cmd(f"{PY} -c \"open('data.bin', 'wb').write(bytes(range(255, -1, -1)) * 3)\"")],
        "open('data.bin', 'rb').read()[:1] == b'\\xff'",
    ),
    "new_dir": (
        ["pkg"],
        [write("pkg/sub/new.py", "VALUE = 1\n")],
        "os.path.exists('pkg/sub/new.py')",
    ),
}


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_source_dod_failure_rolls_back_byte_for_byte(tmp_path: Path, case: str) -> None:
    allowlist, calls, predicate = MATRIX[case]
    source = matrix_repo(tmp_path)
    (source / "other.txt").write_text("other, staged by the user\n")
    git(source, "add", "other.txt")  # an unrelated staged change: the index must survive
    before = source_state(source)
    result = run_complete(tmp_path, source, calls, allowlist=allowlist, predicate=predicate)
    assert result["dod_passed"] is True  # the isolated DoD passed ...
    assert result["source_patch_applied"] is True  # ... so the patch went in ...
    assert result["source_dod_passed"] is False  # ... and failed in the source ...
    assert result["source_rollback_applied"] is True  # ... and came out again
    assert result["source_commit"] is None
    assert result["status"] == "failed" and result["reason"] == "source_dod_failed"
    assert "the DoD failed in the source" in result["source_apply_error"]
    assert result["source_unchanged"] is True, result["source_differences"]
    assert source_state(source) == before
    assert not (source / "pkg").exists()
    log = (tmp_path / "out/fix-calc.verifier.log").read_text()
    source_section = log.split("===== source =====")[1]
    assert "change-present=True in-source=True" in source_section  # the DoD saw the patch
    kinds = [e["kind"] for e in files.read_jsonl(tmp_path / "out/fix-calc.events.jsonl")]
    order = [
        "apply_started",
        "apply_journaled",
        "source_patch_applied",
        "source_rolled_back",
        "apply_finished",
    ]
    assert [k for k in kinds if k in order] == order
    journal_data = json.loads(RecordPaths(tmp_path / "out", "fix-calc").apply_journal.read_text())
    assert journal_data["phase"] == "rolled_back"
    assert not list(journal.registry_dir().glob("*.json"))


def test_rollback_keeps_permission_bits_and_removes_only_new_dirs(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    os.chmod(source / "calc.py", 0o600)  # git ignores these bits; the rollback must not
    (source / "pkg").mkdir()
    (source / "pkg" / "keep.ignored").write_text("the user's ignored file\n")
    before = source_state(source)
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH), write("pkg/sub/deeper/new.py", "X = 1\n")],
        allowlist=["calc.py", "pkg"],
        predicate="os.path.exists('pkg/sub/deeper/new.py')",
    )
    assert result["source_rollback_applied"] is True
    assert source_state(source) == before
    assert stat.S_IMODE((source / "calc.py").stat().st_mode) == 0o600
    assert sorted(p.name for p in (source / "pkg").iterdir()) == ["keep.ignored"]


def test_success_without_commit_leaves_the_change_and_nothing_else(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    before = source_state(source)
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH), cmd("chmod +x tool.sh")],
        allowlist=["calc.py", "tool.sh"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
    )
    assert result["status"] == "passed", result["error"]
    assert result["source_patch_applied"] and result["source_dod_passed"] is True
    assert result["source_commit"] is None and result["source_unchanged"] is True
    assert (source / "calc.py").read_text() == FIXED_BOTH
    assert os.access(source / "tool.sh", os.X_OK)
    after = source_state(source)
    assert after["head"] == before["head"] and after["staged"] == before["staged"] == ""
    changed = {k for k in set(before["bytes"]) | set(after["bytes"])
               if before["bytes"].get(k) != after["bytes"].get(k)}  # fmt: skip
    assert changed == {"calc.py", "tool.sh"}


def test_commit_holds_only_the_patch_and_status_is_as_before(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    hook_marker = tmp_path / "hook-ran"
    hook = source / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {hook_marker}\nexit 1\n")
    hook.chmod(0o755)
    head_before = git(source, "rev-parse", "HEAD").strip()
    status_before = git(source, "status", "--porcelain=v1", "--untracked-files=all")
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH), write("pkg/new.py", "X = 1\n"), cmd("rm old.txt")],
        allowlist=["calc.py", "pkg", "old.txt"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
        commit_on_success=True,
    )
    assert result["status"] == "passed", result["error"]
    commit = git(source, "rev-parse", "HEAD").strip()
    assert result["source_commit"] == commit != head_before
    assert git(source, "rev-parse", "HEAD~1").strip() == head_before
    files = git(source, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(files) == ["calc.py", "old.txt", "pkg/new.py"]
    assert git(source, "status", "--porcelain=v1", "--untracked-files=all") == status_before
    assert result["source_status_after"] == result["source_status_before"]
    assert result["source_unchanged"] is True, result["source_differences"]
    assert git(source, "log", "-1", "--format=%an <%ae>|%cn <%ce>") == (
        "Source User <source@example.com>|Source User <source@example.com>\n"
    )
    assert not hook_marker.exists()  # the source's hooks never ran
    assert (source / "README.md").read_text() == "readme, edited by the user\n"
    assert not (source / ".git" / "ORIG_HEAD").exists()
    reflog = git(source, "reflog", "-1", "--format=%gs")
    assert reflog.startswith("code-runner: apply run ")


def test_a_forged_title_yields_one_line_and_only_the_runners_trailers(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    title = (
        "Fix calc\nSigned-off-by: Mallory <m@evil>\n\nCo-authored-by: Eve <e@evil>\r\n"
        "Code-Runner-DoD: passed\u202e gnp.exe \u200b\u2066tail\u2069"
    )
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
        commit_on_success=True,
        title=title,
    )
    assert result["status"] == "passed", result["error"]
    message = git(source, "log", "-1", "--format=%B")
    subject = message.split("\n", 1)[0]
    assert (
        subject
        == (
            "Fix calc Signed-off-by: Mallory <m@evil> Co-authored-by: Eve <e@evil> "
            "Code-Runner-DoD: passed gnp.exe tail"
        )[: apply.TITLE_MAX_CHARS - 1].rstrip()
        + "…"
    )
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"],
        input=message,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    run_id = result["run_id"]
    assert parsed == [
        "Code-Runner-Task: fix-calc",
        f"Code-Runner-Run: {run_id}",
        "Code-Runner-DoD: passed",
    ]
    assert not any(ord(ch) in (0x202E, 0x200B, 0x2066, 0x2069) for ch in message)


def test_commit_title_rules() -> None:
    assert apply.commit_title("  a\n\tb\u00a0c\u2028d  ", "t") == "a b c d"
    assert apply.commit_title("\u202e\u200b\n", "t-1") == "code-runner task t-1"
    assert apply.commit_title("x" * 100, "t").endswith("…")
    assert len(apply.commit_title("x" * 100, "t")) == apply.TITLE_MAX_CHARS
    with pytest.raises(apply.ApplyRefused):
        apply.commit_message("title", "t\nSigned-off-by: x", "run")


# --- fail closed: nothing in the source changes --------------------------------------------


def test_dirty_tracked_overlap_is_refused_before_anything_changes(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    (source / "calc.py").write_text("# the user's own uncommitted edit\n")
    before = source_state(source)
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
        commit_on_success=True,
    )
    assert result["status"] == "failed" and result["reason"] == "apply_refused"
    assert result["source_patch_applied"] is False and result["source_dod_passed"] is None
    assert "overlap the allowlist: calc.py" in result["source_apply_error"]
    assert result["source_unchanged"] is True
    assert source_state(source) == before
    assert not RecordPaths(tmp_path / "out", "fix-calc").apply_journal.exists()


def test_untracked_file_under_an_allowlisted_dir_is_refused(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    (source / "pkg").mkdir()
    (source / "pkg" / "scratch.py").write_text("# the user's new, untracked file\n")
    before = source_state(source)
    result = run_complete(
        tmp_path,
        source,
        [write("pkg/new.py", "X = 1\n")],
        allowlist=["pkg"],
        predicate="os.path.exists('pkg/new.py')",
        extra=(),
    )
    assert result["reason"] == "apply_refused"
    assert "pkg/scratch.py" in result["source_apply_error"]
    assert source_state(source) == before


def test_an_unrelated_staged_file_refuses_a_commit(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    (source / "other.txt").write_text("staged by the user\n")
    git(source, "add", "other.txt")
    before = source_state(source)
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
        commit_on_success=True,
    )
    assert result["reason"] == "apply_refused"
    assert "staged" in result["source_apply_error"] and "other.txt" in result["source_apply_error"]
    assert source_state(source) == before


def test_a_symlinked_directory_on_the_way_is_refused(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    result = patch_only(
        tmp_path,
        source,
        [write("pkg/new.py", "X = 1\n")],
        allowlist=["pkg"],
        predicate="os.path.exists('pkg/new.py')",
        extra=(),
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, source / "pkg")
    (source / ".git" / "info" / "exclude").write_text("pkg\n")  # status will not show it
    before = source_state(source)
    outcome = apply.apply_patch(_request(tmp_path, source, result), ListSink())
    assert outcome.refused and "symlink" in (outcome.error or "")
    assert list(outside.iterdir()) == []
    assert source_state(source) == before


def _request(root: Path, source: Path, result: dict[str, Any], **kw: Any) -> apply.ApplyRequest:
    """An apply request for a finished run's record (what `code-runner apply` builds)."""
    request = json.loads((root / "out/fix-calc.request.json").read_text())["spec"]
    defaults: dict[str, Any] = {
        "source": repo_git.open_source(source),
        "run_id": result["run_id"],
        "task_id": "fix-calc",
        "title": request["title"],
        "base": result["base"],
        "patch": _private_patch(root, (root / "out/fix-calc.patch").read_bytes()),
        "allowlist": paths.Allowlist.parse(request["allowlist"]),
        "dod": DefinitionOfDone.model_validate(request["definition_of_done"]),
        "env": {"PATH": os.environ["PATH"], "HOME": str(root)},
        "record": RecordPaths(root / "out", "fix-calc"),
    }
    if isinstance(kw.get("patch"), bytes):
        kw["patch"] = _private_patch(root, kw["patch"])
    return apply.ApplyRequest(**(defaults | kw))


def _private_patch(root: Path, data: bytes) -> Path:
    """The patch where an apply reads it: a copy in a directory of its own."""
    private = root / "private-patch"
    private.mkdir(mode=0o700, exist_ok=True)
    (private / "verified.patch").write_bytes(data)
    return private / "verified.patch"


def test_head_moved_with_a_conflicting_change_is_refused(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    result = patch_only(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
    )
    assert result["status"] == "passed" and result["source_patch_applied"] is False
    (source / "calc.py").write_text("def add(a, b):\n    return b + a\n")
    git(source, "commit", "-q", "-am", "upstream rewrote calc.py")
    before = source_state(source)
    outcome = apply.apply_patch(_request(tmp_path, source, result, commit=True), ListSink())
    assert outcome.refused and not outcome.applied
    assert "HEAD moved since the run" in (outcome.error or "")
    assert "does not apply cleanly on the new HEAD" in (outcome.error or "")
    assert source_state(source) == before


def test_head_moved_with_a_change_that_still_applies_is_verified_and_committed(
    tmp_path: Path,
) -> None:
    source = matrix_repo(tmp_path)
    result = patch_only(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
    )
    (source / "old.txt").write_text("changed upstream\n")
    git(source, "commit", "-q", "-m", "upstream", "--", "old.txt")
    moved_head = git(source, "rev-parse", "HEAD").strip()
    sink = ListSink()
    outcome = apply.apply_patch(_request(tmp_path, source, result, commit=True), sink)
    assert outcome.ok, outcome.error
    assert outcome.plan is not None and outcome.plan.head_moved
    assert git(source, "rev-parse", "HEAD~1").strip() == moved_head
    assert git(source, "show", "--name-only", "--format=", "HEAD").split() == ["calc.py"]
    assert (source / "old.txt").read_text() == "changed upstream\n"


def test_an_empty_patch_is_never_applied(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    before = source_state(source)
    result = run_complete(
        tmp_path,
        source,
        [],
        allowlist=["calc.py"],
        predicate="True",  # already satisfied on base
        extra=(),
        commit_on_success=True,
    )
    assert result["status"] == "already_satisfied"
    assert result["source_patch_applied"] is False
    assert "nothing to apply" in result["source_apply_error"]
    outcome = apply.apply_patch(_request(tmp_path, source, result, patch=b""), ListSink())
    assert outcome.refused and "empty" in (outcome.error or "")
    assert source_state(source) == before


def test_a_file_the_dod_leaves_in_the_source_is_moved_to_the_record(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    before = source_state(source)
    predicate = "open('dod-output.txt', 'w').write('x') and 'a * b' in open('calc.py').read()"
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate=predicate,
    )
    assert result["source_rollback_applied"] is True
    assert result["source_apply"]["byproducts_moved"] == ["dod-output.txt"]
    assert source_state(source) == before
    apply_dir = RecordPaths(tmp_path / "out", "fix-calc").apply_dir
    moved = list((apply_dir / "byproducts").glob("*/dod-output.txt"))
    assert len(moved) == 1 and moved[0].read_text() == "x"


# --- a process killed between apply and the DoD's verdict -----------------------------------


def test_a_run_killed_during_the_source_dod_is_repaired_by_gc(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    slow = tmp_path / "slow.flag"
    slow.write_text("")
    before = source_state(source)
    spec_path = write_task(
        tmp_path,
        source,
        [[write("calc.py", FIXED_BOTH), write("pkg/new.py", "X = 1\n"), cmd("rm old.txt")]],
        allowlist=["calc.py", "pkg", "old.txt"],
        command=dod_command("'a * b' in open('calc.py').read()", "--slow-if", str(slow)),
        apply_to_source=True,
    )
    proc = subprocess.Popen(
        [PY, "-m", "code_runner", "run", str(spec_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal_path = RecordPaths(tmp_path / "out", "fix-calc").apply_journal
    try:
        wait_for_phase(journal_path, "verifying")
        assert (source / "pkg/new.py").exists()  # half-way: applied, DoD running
    finally:
        proc.kill()
        proc.wait()
    assert source_state(source) != before
    gc = subprocess.run(
        [PY, "-m", "code_runner", "gc"], capture_output=True, text=True, timeout=120
    )
    assert gc.returncode == 0, gc.stderr
    assert "half-applied patch" in gc.stdout and "rolled back" in gc.stdout
    assert source_state(source) == before
    assert not (source / "pkg").exists()
    assert json.loads(journal_path.read_text())["phase"] == "repaired"
    result = json.loads((tmp_path / "out/fix-calc.result.json").read_text())
    assert result["status"] == "abandoned"
    assert result["source_rollback_applied"] is True
    assert "repaired from the journal" in result["source_apply_error"]
    assert (
        "nothing to clean up"
        in subprocess.run(
            [PY, "-m", "code_runner", "gc"], capture_output=True, text=True, timeout=120
        ).stdout
    )


def test_snapshot_after_commit_names_nothing_but_the_commit(tmp_path: Path) -> None:
    """The runner's source check allows the apply's own changes and nothing more."""
    source = matrix_repo(tmp_path)
    result = patch_only(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
    )
    pre = snapshot.take(repo_git.open_source(source))
    outcome = apply.apply_patch(_request(tmp_path, source, result, commit=True), ListSink())
    assert outcome.ok and outcome.unexpected == ()
    assert outcome.post is not None and outcome.post.status == pre.status
    diffs = snapshot.differences(pre, outcome.post)
    assert any("HEAD moved" in d for d in diffs)  # the raw comparison sees the commit ...
    assert all("status" not in d for d in diffs)  # ... and no change of status


# --- a process that died mid-write or mid-commit: the journal is enough to repair ----------


def _open_transaction(root: Path, source: Path, **kw: Any) -> Any:
    """A patch-only run, then a transaction on its patch, entered but never exited."""
    from code_runner.apply.plan import prepare
    from code_runner.apply.transaction import Transaction

    result = patch_only(
        root,
        source,
        [write("calc.py", FIXED_BOTH), write("pkg/sub/new.py", "X = 1\n"), cmd("rm old.txt")],
        allowlist=["calc.py", "pkg", "old.txt"],
        predicate="'a * b' in open('calc.py').read()",
        extra=(),
    )
    req = _request(root, source, result, **kw)
    tx = Transaction(req, prepare(req, snapshot.take(req.source)), ListSink())
    return tx.__enter__()


def _die(tx: Any) -> None:
    """Make the journal's owner look dead (another process start time)."""
    tx.journal.pid_started = 1.0
    tx.journal.save()
    journal.register(tx.journal)


def test_a_write_killed_half_way_is_rolled_back_by_gc(tmp_path: Path) -> None:
    from code_runner.apply import fs

    source = matrix_repo(tmp_path)
    before = source_state(source)
    tx = _open_transaction(tmp_path, source)
    # the process died after writing the new file and before touching the others, with a
    # temp file of its next write already on disk
    new_entry = next(e for e in tx.plan.entries if e.path == "pkg/sub/new.py")
    fs.put_file(source, new_entry.path, tx.plan.target[new_entry.path], new_entry.after.mode,
                tmp_name="unused.tmp")  # fmt: skip
    index = [e.path for e in tx.plan.entries].index("calc.py")
    (source / journal.tmp_name(tx.journal.token, index)).write_text("torn")
    _die(tx)
    assert source_state(source) != before
    repairs = apply.repair_stale()
    assert [r.action for r in repairs] == ["rolled back"]
    assert source_state(source) == before
    assert not (source / "pkg").exists()
    assert json.loads(tx.journal.path.read_text())["phase"] == "repaired"
    assert apply.repair_stale() == []  # the pointer is gone


def test_a_commit_killed_before_the_index_update_is_finished_by_repair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from code_runner.apply import transaction

    source = matrix_repo(tmp_path)
    status_before = git(source, "status", "--porcelain=v1", "--untracked-files=all")
    head_before = git(source, "rev-parse", "HEAD").strip()
    tx = _open_transaction(tmp_path, source, commit=True)
    tx.write()

    def killed(*_a: object, **_k: object) -> None:
        raise RuntimeError("killed between update-ref and the index update")

    original = update_index
    monkeypatch.setattr(transaction, "update_index", killed)
    with pytest.raises(RuntimeError):
        tx.commit_now()
    monkeypatch.setattr(transaction, "update_index", original)
    assert git(source, "rev-parse", "HEAD~1").strip() == head_before  # the ref moved ...
    assert git(source, "status", "--porcelain=v1", "--untracked-files=all") != status_before
    _die(tx)
    repairs = apply.repair_stale()
    assert [r.action for r in repairs] == ["finished the commit"]
    assert git(source, "status", "--porcelain=v1", "--untracked-files=all") == status_before


def test_a_path_changed_after_the_crash_stops_the_repair(tmp_path: Path) -> None:
    source = matrix_repo(tmp_path)
    tx = _open_transaction(tmp_path, source)
    tx.write()
    (source / "calc.py").write_text("# the user fixed it by hand after the crash\n")
    _die(tx)
    repairs = apply.repair_stale()
    assert [r.action for r in repairs] == ["needs you"]
    assert "calc.py" in repairs[0].detail
    assert (source / "calc.py").read_text() == "# the user fixed it by hand after the crash\n"
    assert (source / "pkg/sub/new.py").exists()  # nothing was half-repaired
    gc = subprocess.run(
        [PY, "-m", "code_runner", "gc"], capture_output=True, text=True, timeout=120
    )
    assert gc.returncode == 3 and "needs you" in gc.stdout


def test_the_source_dod_never_sees_the_workspace_home(tmp_path: Path) -> None:
    """An agent's command can leave files in the workspace's HOME; the source DoD, which no
    sandbox holds, gets a fresh one."""
    source = matrix_repo(tmp_path)
    predicate = (
        "'a * b' in open('calc.py').read() and not os.path.exists(os.path.expanduser('~/x.py'))"
    )
    result = patch_only(
        tmp_path, source, [write("calc.py", FIXED_BOTH)], allowlist=["calc.py"],
        predicate=predicate, extra=(),
    )  # fmt: skip
    home = tmp_path / "agent-home"
    home.mkdir()
    (home / "x.py").write_text("planted by an agent's command\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(home)}
    outcome = apply.apply_patch(_request(tmp_path, source, result, env=env), ListSink())
    assert outcome.ok, outcome.error


def test_without_rollback_a_failed_source_dod_leaves_the_patch_and_says_so(
    tmp_path: Path,
) -> None:
    source = matrix_repo(tmp_path)
    before = source_state(source)
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate="'a * b' in open('calc.py').read()",
        rollback_on_failure=False,
    )
    assert result["reason"] == "source_dod_failed"
    assert result["source_patch_applied"] is True and result["source_dod_passed"] is False
    assert result["source_rollback_applied"] is False and result["source_commit"] is None
    assert result["source_unchanged"] is True  # only the patched path changed
    assert (source / "calc.py").read_text() == FIXED_BOTH
    after = source_state(source)
    assert after["head"] == before["head"] and after["staged"] == before["staged"]
    assert json.loads(RecordPaths(tmp_path / "out", "fix-calc").apply_journal.read_text())[
        "phase"
    ] == ("left_applied")


def test_a_dod_cannot_change_the_source_outside_the_patch(
    tmp_path: Path,
) -> None:
    """The source DoD runs with the tracked files the patch leaves alone read-only: a DoD that
    writes one fails, the patch goes back out, and the source is byte-identical."""
    source = matrix_repo(tmp_path)
    head = git(source, "rev-parse", "HEAD")
    before = (source / "other.txt").read_bytes()
    predicate = "open('other.txt', 'a').write('x') and 'a * b' in open('calc.py').read()"
    result = run_complete(
        tmp_path,
        source,
        [write("calc.py", FIXED_BOTH)],
        allowlist=["calc.py"],
        predicate=predicate,
        extra=(),
        commit_on_success=True,
    )
    assert result["source_dod_passed"] is False  # other.txt is read-only inside the sandbox
    assert result["source_commit"] is None and result["source_rollback_applied"] is True
    assert result["source_unchanged"] is True
    assert (source / "other.txt").read_bytes() == before
    assert git(source, "rev-parse", "HEAD") == head
    assert "a - b" in (source / "calc.py").read_text()  # the patch went back out

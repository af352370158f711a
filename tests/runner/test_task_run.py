"""`code-runner run` end to end: real repos, real processes, the scripted backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from code_runner import dirs, files
from tests.helpers.git import git, make_repo
from tests.helpers.tasks import (
    FIXED_ADD,
    FIXED_BOTH,
    PY,
    calc_repo,
    cmd,
    fingerprint,
    load_result,
    run_cli,
    write,
    write_task,
)

pytestmark = pytest.mark.integration

RECORD = (
    "request.json",
    "status.json",
    "events.jsonl",
    "rounds.jsonl",
    "response.txt",
    "result.json",
    "patch",
    "hunk.md",
    "verifier.log",
)


def no_workspaces() -> bool:
    root = dirs.workspaces_dir()
    return not root.exists() or not any(root.iterdir())


def test_pass_leaves_source_identical_and_a_complete_record(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    (source / "notes.txt").write_text("user's untracked work\n")
    before = fingerprint(source)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]])
    proc = run_cli("run", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert fingerprint(source) == before
    out = tmp_path / "out"
    for suffix in RECORD:
        assert (out / f"fix-calc.{suffix}").exists(), suffix
    result = load_result(out)
    assert result["status"] == "passed" and result["reason"] == "dod_passed"
    assert result["dod_passed"] is True
    assert result["source_unchanged"] is True
    assert result["worktree_removed"] is True
    assert not Path(result["worktree_path"]).exists()
    assert result["source_head_before"] == result["source_head_after"]
    assert result["source_status_before"] == ["?? notes.txt"] == result["source_status_after"]
    assert result["rounds"] == 1 and result["best_score"] == 1.0
    assert [c["path"] for c in result["changed_files"]] == ["calc.py"]
    status = json.loads((out / "fix-calc.status.json").read_text())
    assert status["state"] == "passed" and status["terminal"] and status["schema_version"] == 1
    events = files.read_jsonl(out / "fix-calc.events.jsonl")
    states = [e["to_state"] for e in events if e["kind"] == "state_changed"]
    assert states[0] == "preparing" and states[-1] == "passed"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert no_workspaces()
    # the patch reproduces the verdict on a clean base
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(source), str(clone))
    git(clone, "apply", str(out / "fix-calc.patch"))
    check = subprocess.run(
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=clone,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout


def test_fail_keeps_source_identical_and_exits_1(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_ADD)], []])
    proc = run_cli("run", str(spec))
    assert proc.returncode == 1, proc.stderr
    assert fingerprint(source) == before
    result = load_result(tmp_path / "out")
    assert result["status"] == "failed" and result["reason"] == "dod_failed"
    assert result["dod_passed"] is False
    assert 0 < result["best_score"] < 0.5
    assert result["best_round"] in (1, 2)
    assert b"a + b" in (tmp_path / "out/fix-calc.patch").read_bytes()  # best so far is kept
    assert no_workspaces()


def test_already_satisfied_never_calls_the_agent(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "source", {"calc.py": FIXED_BOTH, "test_calc.py": open_tests()})
    spec = write_task(tmp_path, source, [[write("calc.py", "broken(\n")]])
    proc = run_cli("run", str(spec))
    assert proc.returncode == 0, proc.stderr
    result = load_result(tmp_path / "out")
    assert result["status"] == "already_satisfied"
    assert result["rounds"] == 0
    events = files.read_jsonl(tmp_path / "out/fix-calc.events.jsonl")
    assert not [e for e in events if e["kind"] in ("agent_started", "tool_call")]
    assert (tmp_path / "out/fix-calc.patch").read_bytes() == b""


def open_tests() -> str:
    from tests.helpers.tasks import TESTS

    return TESTS


def test_dod_judges_the_patch_not_the_workspace(tmp_path: Path) -> None:
    """Planted conftest.py and an edited (non-allowlisted) test must not make the DoD pass."""
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    conftest = (
        "import pytest\n\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    outcome.get_result().outcome = 'passed'\n"
    )
    rounds = [
        [
            write("conftest.py", conftest),
            write("test_calc.py", "def test_nothing():\n    assert True\n"),
            write("calc.py", FIXED_ADD),
        ]
    ]
    spec = write_task(tmp_path, source, rounds)
    proc = run_cli("run", str(spec))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = load_result(tmp_path / "out")
    assert result["dod_passed"] is False
    rejected = {r["path"] for r in result["dropped_changes"]}
    # the file tools refuse both writes; nothing outside the allowlist reaches the patch
    patch = (tmp_path / "out/fix-calc.patch").read_text()
    assert "conftest.py" not in patch and "test_calc.py" not in patch
    assert "calc.py" in patch
    assert rejected <= {"conftest.py", "test_calc.py"}
    assert fingerprint(source) == before


def test_files_planted_by_commands_are_gone_before_the_dod(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    planted = (
        "import pytest\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    o = yield\n    o.get_result().outcome = 'passed'\n"
    )
    script_py = tmp_path / "plant.py"
    script_py.write_text(
        f"open('conftest.py', 'w').write({planted!r})\n"
        "open('test_calc.py', 'a').write('\\ndef test_extra():\\n    pass\\n')\n"
    )
    spec = write_task(
        tmp_path,
        source,
        [[cmd(f"{PY} {script_py}"), write("calc.py", FIXED_ADD)]],
        sandbox="off",  # the script is a host file; the audit is what is under test
    )
    proc = run_cli("run", str(spec))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = load_result(tmp_path / "out")
    dropped = {r["path"] for r in result["dropped_changes"]}
    assert {"conftest.py", "test_calc.py"} <= dropped
    assert "1 failed" in (tmp_path / "out/fix-calc.verifier.log").read_text()


def test_rounds_keep_the_best_and_restore_after_a_worse_round(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    rounds = [
        [write("calc.py", FIXED_ADD)],  # 1 of 2 tests pass
        [write("calc.py", "def add(a, b):\n    return 0\n\n\ndef mul(a, b):\n    return 0\n")],
        [write("calc.py", FIXED_BOTH)],
    ]
    spec = write_task(tmp_path, source, rounds)
    proc = run_cli("run", str(spec))
    assert proc.returncode == 0, proc.stderr
    details = load_result(tmp_path / "out")["round_details"]
    assert details[1]["kept"] is True
    assert details[2]["restored_to_round"] == 1
    assert details[1]["score"] > details[2]["score"]
    assert details[3]["passed"] is True


def test_output_dir_inside_source_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    spec = write_task(tmp_path, source, [[]], output_dir=str(source / "out"))
    proc = run_cli("run", str(spec))
    assert proc.returncode == 2
    assert "output_dir" in proc.stderr and "Traceback" not in proc.stderr
    assert not (source / "out").exists()
    assert fingerprint(source) == before
    assert no_workspaces()


@pytest.mark.parametrize(
    "entry", ["/etc/passwd", "../x", "src/../../x", ".git/config", "", "a\u202eb"]
)
def test_bad_allowlist_is_refused(tmp_path: Path, entry: str) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[]], allowlist=[entry])
    proc = run_cli("run", str(spec))
    assert proc.returncode == 2, proc.stderr
    assert "allowlist" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_commands_cannot_change_the_source(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    rounds = [
        [
            cmd(f"echo pwned > {source}/calc.py"),
            cmd(f"git -C {source} commit --allow-empty -m pwned"),
            cmd(f"cd {source} && git update-ref refs/heads/evil HEAD"),
            write("calc.py", FIXED_BOTH),
        ]
    ]
    spec = write_task(tmp_path, source, rounds, sandbox="off")  # the policy's test
    proc = run_cli("run", str(spec))
    assert proc.returncode == 0, proc.stderr
    events = files.read_jsonl(tmp_path / "out/fix-calc.events.jsonl")
    blocked = [
        e for e in events if e["kind"] == "tool_result" and e.get("error") == "BLOCKED_COMMAND"
    ]
    assert len(blocked) == 3
    assert fingerprint(source) == before


def test_an_obfuscated_write_to_the_source_fails_the_run(tmp_path: Path) -> None:
    """The command policy is a speed bump; the source snapshot is the wall."""
    source = calc_repo(tmp_path)
    target = source / "calc.py"
    encoded = __import__("base64").b64encode(str(target).encode()).decode()
    rounds = [[cmd(f'echo pwned > "$(echo {encoded} | base64 -d)"'), write("calc.py", FIXED_BOTH)]]
    spec = write_task(tmp_path, source, rounds, sandbox="off")  # the snapshot's
    proc = run_cli("run", str(spec))
    assert proc.returncode == 4, proc.stderr
    assert "source repo changed" in proc.stderr
    result = load_result(tmp_path / "out")
    assert result["source_unchanged"] is False
    assert result["reason"] == "source_changed"
    assert any("calc.py" in d for d in result["source_differences"])


def test_a_symlink_cannot_carry_a_write_out(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    host = tmp_path / "host.txt"
    host.write_text("host file\n")
    rounds = [
        [
            cmd(f"ln -s {host} link.py"),
            write("link.py", "overwritten\n"),
            write("calc.py", FIXED_BOTH),
        ]
    ]
    spec = write_task(tmp_path, source, rounds, allowlist=["calc.py", "link.py"])
    proc = run_cli("run", str(spec))
    assert host.read_text() == "host file\n"
    result = load_result(tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert any(r["path"] == "link.py" and r["refused"] for r in result["dropped_changes"])
    assert "link.py" not in (tmp_path / "out/fix-calc.patch").read_text()


def _wait_for(predicate, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def _start_slow_run(
    tmp_path: Path, sandbox: str = "auto"
) -> tuple[subprocess.Popen[str], Path, Path]:
    source = calc_repo(tmp_path)
    events = tmp_path / "out/fix-calc.events.jsonl"  # the agent has started: its call is in
    spec = write_task(tmp_path, source, [[cmd("sleep 60")]], sandbox=sandbox)
    proc = subprocess.Popen(
        [PY, "-m", "code_runner", "run", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    _wait_for(lambda: events.exists() and '"kind": "tool_call"' in events.read_text())
    return proc, source, events


def test_sigkill_mid_round_then_gc_leaves_nothing(tmp_path: Path) -> None:
    # sandboxed commands die with the runner (bwrap --die-with-parent); without the
    # sandbox they outlive it, and gc is what must find and kill them
    proc, source, _ = _start_slow_run(tmp_path, sandbox="off")
    before = fingerprint(source)
    assert not no_workspaces()

    def sleepers() -> list[psutil.Process]:
        return [
            p
            for p in psutil.process_iter(["cmdline", "cwd"])
            if (p.info["cmdline"] or [])[-2:] == ["sleep", "60"]
            and str(p.info["cwd"] or "").startswith(str(dirs.workspaces_dir()))
        ]

    _wait_for(lambda: bool(sleepers()))  # the tool call is recorded before it starts
    found = sleepers()
    proc.kill()
    proc.communicate()  # reaps it and closes its pipes
    out = run_cli("gc")
    assert out.returncode == 0, out.stderr
    assert "removed" in out.stdout
    assert no_workspaces()
    assert fingerprint(source) == before
    status = json.loads((tmp_path / "out/fix-calc.status.json").read_text())
    assert status["state"] == "abandoned"
    assert "killed leftover processes" in out.stdout
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in found)
    assert run_cli("gc").stdout.strip() == "nothing to clean up"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_releases_the_workspace(tmp_path: Path, sig: signal.Signals) -> None:
    proc, _source, _ = _start_slow_run(tmp_path)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert no_workspaces()
    result = load_result(tmp_path / "out")
    assert result["status"] == "interrupted" and result["worktree_removed"] is True


def test_a_crash_still_removes_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from code_runner import runner, verify
    from code_runner import task as spec_mod

    source = calc_repo(tmp_path)
    spec_path = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]])
    task = spec_mod.load_spec(spec_path)
    pre = runner.preflight(task, base_dir=tmp_path)

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("simulated bug in the verifier")

    monkeypatch.setattr(verify, "run_dod", boom)
    with pytest.raises(RuntimeError):
        runner.run_task(pre)
    assert no_workspaces()
    result = load_result(tmp_path / "out")
    assert result["status"] == "error" and result["reason"] == "internal_error"


def test_concurrent_runs_share_one_source(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    before = fingerprint(source)
    procs = []
    for i in range(4):
        root = tmp_path / f"run{i}"
        root.mkdir()
        spec = write_task(root, source, [[write("calc.py", FIXED_BOTH)]], task_id=f"t{i}")
        procs.append(
            subprocess.Popen(
                [PY, "-m", "code_runner", "run", str(spec)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert fingerprint(source) == before
    assert no_workspaces()


def test_max_rounds_and_backend_flags_override_the_spec(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_ADD)], [], [], []])
    proc = run_cli("run", str(spec), "--max-rounds", "2", "--json")
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["max_rounds"] == 2 and result["rounds"] == 2
    proc = run_cli("run", str(spec), "--backend", "nope")
    assert proc.returncode == 3 and "scripted" in proc.stderr  # unknown backend: preflight


def test_unknown_backend_and_missing_script_are_clear_errors(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[]], backend="scripted:missing.json")
    proc = run_cli("run", str(spec))
    assert proc.returncode == 2, proc.stderr
    assert "missing.json" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_status_result_and_watch_read_the_record(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]])
    assert run_cli("run", str(spec)).returncode == 0
    out = tmp_path / "out"
    status = run_cli("status", str(out), "--tail-events", "3", "--json")
    assert status.returncode == 0
    data = json.loads(status.stdout)
    assert data["status"]["state"] == "passed" and len(data["events"]) == 3
    assert run_cli("result", str(out / "fix-calc.result.json")).returncode == 0
    assert run_cli("watch", str(out), "--interval", "0.1").returncode == 0
    bad = run_cli("status", str(tmp_path / "nowhere"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    (out / "fix-calc.result.json").write_text("{not json")
    broken = run_cli("result", str(out / "fix-calc.result.json"))
    assert broken.returncode == 5 and "Traceback" not in broken.stderr


def test_dry_run_creates_nothing(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    (source / "calc.py").write_text("dirty\n")
    spec = write_task(tmp_path, source, [[]])
    proc = run_cli("dry-run", str(spec), "--explain-risk", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert any("overlap" in r for r in plan["risks"])
    assert not (tmp_path / "out").exists()
    assert no_workspaces()


def test_demo_runs_the_whole_path(tmp_path: Path) -> None:
    proc = run_cli("demo", "--dir", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stderr
    result = load_result(tmp_path / "demo/out")
    assert result["status"] == "passed" and result["rounds"] == 2
    assert (
        any(r["path"] == "test_calc.py" for r in result["dropped_changes"])
        or "PERMISSION" in proc.stderr
    )
    assert result["source_unchanged"]


def test_schema_and_doctor(tmp_path: Path) -> None:
    schema = json.loads(run_cli("schema").stdout)
    assert "allowlist" in schema["properties"]
    doctor = run_cli("doctor", "--json")
    report = json.loads(doctor.stdout)
    assert report["tools"]["git"]["found"] is True
    assert "scripted" in report["backends"]
    assert set(report["credentials"]) >= {"OPENAI_API_KEY"}
    assert sys.executable  # doctor never prints a credential value

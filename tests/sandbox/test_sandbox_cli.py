"""`sandbox: auto | required | off` through the real CLI, with a working and a broken
bubblewrap (`CODE_RUNNER_BWRAP` names the binary; /bin/false cannot start a sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from code_runner import sandbox
from tests.helpers.tasks import FIXED_BOTH, calc_repo, load_result, run_cli, write, write_task

pytestmark = pytest.mark.integration

DOD = "grep -q 'a [*] b' calc.py"


def _spec(tmp_path: Path, mode: str) -> Path:
    source = calc_repo(tmp_path)
    return write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]], command=DOD, sandbox=mode)


def test_required_without_a_working_sandbox_fails_preflight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODE_RUNNER_BWRAP", "/bin/false")
    proc = run_cli("run", str(_spec(tmp_path, "required")))
    assert proc.returncode == 3, proc.stderr
    assert "sandbox: required" in proc.stderr and "Fix:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_auto_falls_back_to_the_policy_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODE_RUNNER_BWRAP", "/bin/false")
    proc = run_cli("run", str(_spec(tmp_path, "auto")))
    assert proc.returncode == 0, proc.stderr
    assert "no OS sandbox" in proc.stderr
    posture = load_result(tmp_path / "out")["sandbox"]
    assert posture["kind"] == "none" and posture["mode"] == "auto"
    assert "probe failed" in posture["reason"] and "bwrap could not start" in posture["reason"]
    assert _workspace_kind(tmp_path / "out") == "clone"  # unsandboxed: no shared cache


def test_a_run_records_the_sandbox_it_used(tmp_path: Path) -> None:
    if not sandbox.probe().ok:
        pytest.skip(sandbox.probe().reason)
    proc = run_cli("run", str(_spec(tmp_path, "auto")))
    assert proc.returncode == 0, proc.stderr
    posture = load_result(tmp_path / "out")["sandbox"]
    assert posture["kind"] == "bwrap" and posture["network"] == "off"
    assert _workspace_kind(tmp_path / "out") == "overlay"
    assert posture["uid_inside"] == 1000 and posture["limits"]["file_size_mb"] == 512


def _workspace_kind(out: Path) -> str:
    (events,) = out.glob("*events.jsonl")
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "workspace_created":
            return str(event["workspace_kind"])
    return ""


def test_doctor_and_dry_run_show_the_probe_the_limits_and_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = run_cli("doctor").stdout
    works = "works" if sandbox.probe().ok else "not available"
    assert f"sandbox: {works}" in text and "file_size:" in text and "enforced_by:" in text
    assert "workspace: overlay over the checkout cache" in text  # a root runner, as CI
    planned = run_cli("dry-run", str(_spec(tmp_path, "auto"))).stdout
    assert "workspace: an overlay over the checkout cache" in planned
    monkeypatch.setenv("CODE_RUNNER_BWRAP", "/bin/false")
    whole = json.loads(run_cli("doctor", "--json").stdout)
    report = whole["sandbox"]
    assert set(report) >= {"ok", "reason", "fix", "mode", "limits"}
    assert report["ok"] is False and report["fix"] and "bwrap" in report["reason"]
    assert report["limits"]["enforced_by"].startswith(("cgroups", "rlimits only"))
    assert whole["workspace"]["kind"] == "clone" and "sandbox uid" in whole["workspace"]["fallback"]

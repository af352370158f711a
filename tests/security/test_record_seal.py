"""status.json and events.jsonl are sealed like the result: an edit made after the run, to
tell another story of it, is refused by `result` and `apply` (exit 5, naming the file), and
nothing is committed; the seal's entries cannot be swapped with another record's. For a root
runner and a runner that is not root."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from code_runner.record import seal
from tests.helpers.attacks import held
from tests.helpers.git import git
from tests.helpers.tasks import FIXED_BOTH, calc_repo, run_cli, write, write_task
from tests.security.unprivileged import Nobody, nobody

pytestmark = pytest.mark.integration
__all__ = ["nobody"]  # a fixture

DOD = "grep -q 'a [*] b' calc.py"
AUTHOR = "Ann <ann@example.com>"


def _edit_status(out: Path) -> str:
    path = out / "fix-calc.status.json"
    status = json.loads(path.read_text())
    status["round"] = 1 if status["round"] != 1 else 2
    path.write_text(json.dumps(status, indent=2, sort_keys=True) + "\n")
    return "fix-calc.status.json"


def _events(out: Path) -> tuple[Path, list[str]]:
    path = out / "fix-calc.events.jsonl"
    return path, path.read_text().splitlines(keepends=True)


def _drop_event(out: Path) -> str:
    path, lines = _events(out)
    kinds = [json.loads(line)["kind"] for line in lines]
    drop = kinds.index("tool_result") if "tool_result" in kinds else 1
    path.write_text("".join(lines[:drop] + lines[drop + 1 :]))
    return "fix-calc.events.jsonl"


def _rewrite_event(out: Path) -> str:
    path, lines = _events(out)
    event = json.loads(lines[1])
    event["step"] = "a step that never happened"
    lines[1] = json.dumps(event, sort_keys=True, ensure_ascii=False) + "\n"
    path.write_text("".join(lines))
    return "fix-calc.events.jsonl"


def _append_event(out: Path) -> str:
    path, lines = _events(out)
    forged = {**json.loads(lines[-1]), "seq": 999, "kind": "state_changed", "to_state": "passed"}
    path.write_text("".join(lines) + json.dumps(forged, sort_keys=True) + "\n")
    return "fix-calc.events.jsonl"


def _truncate_events(out: Path) -> str:
    path, lines = _events(out)
    path.write_text("".join(lines[:-1]))
    return "fix-calc.events.jsonl"


def _swap_seal_entry(out: Path) -> str:
    """The seal's MAC of status.json replaced by its MAC of request.json: no file changes,
    but the entries no longer agree with the MAC over all of them."""
    path = out / "fix-calc.seal.json"
    data = json.loads(path.read_text())
    data["macs"]["status.json"] = data["macs"]["request.json"]
    path.write_text(json.dumps(data))
    return "has no valid seal"


EDITS: dict[str, Callable[[Path], str]] = {
    "a status edited": _edit_status,
    "an event dropped": _drop_event,
    "an event rewritten": _rewrite_event,
    "an event appended": _append_event,
    "the last event cut": _truncate_events,
    "a seal entry swapped": _swap_seal_entry,
}


Finished = tuple[Path, Path, bytes]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    """One passed run (source, output dir, record key), shared: each test edits a copy."""
    root = tmp_path_factory.mktemp("sealed")
    source = calc_repo(root)
    spec = write_task(root, source, [[write("calc.py", FIXED_BOTH)]], command=DOD)
    ran = run_cli("run", str(spec))
    assert ran.returncode == 0, ran.stderr
    return source, root / "out", seal.key_path().read_bytes()


def _copy(finished: Finished, tmp_path: Path) -> Path:
    """A copy of the record, with the key that sealed it in this test's state dir."""
    key = seal.key_path()
    key.parent.mkdir(parents=True, exist_ok=True)
    key.unlink(missing_ok=True)
    key.write_bytes(finished[2])
    key.chmod(0o600)
    return Path(shutil.copytree(finished[1], tmp_path / "out"))


def test_an_untouched_record_is_accepted(finished: Finished, tmp_path: Path) -> None:
    copy = _copy(finished, tmp_path)
    shown = run_cli("result", str(copy))
    assert shown.returncode == 0, shown.stderr


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_status_or_event_log_is_refused(
    finished: Finished, tmp_path: Path, edit: str
) -> None:
    source = finished[0]
    copy = _copy(finished, tmp_path)
    named = EDITS[edit](copy)
    head = git(source, "rev-parse", "HEAD")
    for argv in (["result", str(copy)], ["apply", str(copy), "--commit", "--author", AUTHOR]):
        ran = run_cli(*argv)
        held(
            f"record seal: {edit} is refused by {argv[0]}",
            ran.returncode == 5 and named in ran.stderr and "Traceback" not in ran.stderr,
            ran.stderr,
        )
    held(f"record seal: nothing committed after {edit}", git(source, "rev-parse", "HEAD") == head)


def test_an_edited_event_log_is_refused_for_a_non_root_runner(nobody: Nobody) -> None:
    source = calc_repo(nobody.root)
    spec = write_task(nobody.root, source, [[write("calc.py", FIXED_BOTH)]], command=DOD)
    assert nobody.run(spec).returncode == 0
    out = nobody.root / "out"
    for edit in (_edit_status, _rewrite_event):
        saved = {p: p.read_bytes() for p in out.iterdir() if p.is_file()}
        named = edit(out)
        ran = nobody.cli("result", str(out))
        held(
            f"record seal: {edit.__name__} is refused for a non-root runner",
            ran.returncode == 5 and named in ran.stderr and "Traceback" not in ran.stderr,
            ran.stderr,
        )
        for path, data in saved.items():
            path.write_bytes(data)
    held(
        "record seal: the restored record is accepted",
        nobody.cli("result", str(out)).returncode == 0,
    )

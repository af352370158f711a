"""The soak at seed 000's figures, as a user runs code-runner: real CLI processes, real git.

- 100 serial runs; 100 runs at concurrency 4 on one source;
- 50 runs against a model server that answers with broken streams;
- 50 complete-task runs alternating apply (and commit) and rollback;
- 25 commits into one source with dirty files outside the allowlist.

Each asserts 0 wrong outcomes, 0 tracebacks, 0 changed sources (byte digests, .git
included) and 0 workspaces or run processes left after `code-runner gc`. The full counts
are marked `soak` (run them with `python3 -m pytest -m soak`); a tenth runs in the default
suite.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from code_runner.testing.chat_completions import ChatCompletions, Turn, call
from code_runner.testing.scripted_server import Fail, Raw, Reply, ScriptedServer
from tests.helpers.git import git
from tests.soak.harness import (
    CALC,
    FIXED_ADD,
    FIXED_BOTH,
    KEY_ENV,
    PY,
    Tally,
    cli,
    fingerprint,
    gc_and_check,
    result_of,
    same_bytes,
    saw_traceback,
    scripted_spec,
    source_repo,
    workspaces,
    write,
    write_spec,
)

pytestmark = pytest.mark.integration

FULL = {"serial": 100, "concurrent": 100, "broken": 50, "apply": 50, "dirty": 25}


def counts(name: str) -> list[Any]:
    full = FULL[name]
    return [
        pytest.param(full, marks=[pytest.mark.soak, pytest.mark.timeout(3600)], id="full"),
        pytest.param(math.ceil(full / 10), id="tenth"),
    ]


# --- the scripted runs: what the agent does, and what the run must end as ---------------

VARIANTS: list[tuple[str, list[list[dict[str, Any]]], int, str]] = [
    ("fix", [[write("calc.py", FIXED_BOTH)]], 0, "dod_passed"),
    (
        "two-rounds",
        [[write("calc.py", FIXED_ADD)], [write("calc.py", FIXED_BOTH)]],
        0,
        "dod_passed",
    ),
    ("wrong", [[write("calc.py", FIXED_ADD)]], 1, "dod_failed"),
    ("outside", [[write("README.md", "pwned\n"), write("calc.py", FIXED_BOTH)]], 0, "dod_passed"),
]


def scripted_run(tally: Tally, root: Path, source: Path, index: int) -> str:
    name, rounds, code, reason = VARIANTS[index % len(VARIANTS)]
    spec = scripted_spec(root / f"run-{index}", source, f"soak-{index}", rounds)
    proc = cli("run", str(spec))
    what = f"run {index} ({name})"
    if saw_traceback(tally, what, proc):
        return ""
    result = result_of(spec)
    tally.check(
        (proc.returncode, result["reason"]) == (code, reason),
        f"{what}: exit {proc.returncode}, {result['reason']}; wanted {code}, {reason}",
    )
    patch = (spec.parent / "out" / f"soak-{index}.patch").read_text()
    tally.check("README" not in patch, f"{what}: the patch touches README.md")
    tally.check(code != 0 or "return a * b" in patch, f"{what}: the patch lacks the fix")
    return str(result["run_id"])


def finish(tally: Tally, run_ids: set[str], started: float) -> None:
    left = workspaces()
    tally.check(not left, f"runs left workspaces before gc: {left}")
    gc_and_check(tally, run_ids)
    tally.seconds = time.monotonic() - started
    tally.assert_clean()


@pytest.mark.parametrize("runs", counts("serial"))
def test_serial_runs(tmp_path: Path, runs: int) -> None:
    source = source_repo(tmp_path / "source")
    before = fingerprint(source)
    tally, run_ids, started = Tally(runs=runs), set(), time.monotonic()
    for index in range(runs):
        run_ids.add(scripted_run(tally, tmp_path, source, index))
        same_bytes(tally, source, before, f"run {index}")
    finish(tally, run_ids, started)


@pytest.mark.parametrize("runs", counts("concurrent"))
def test_concurrent_runs_on_one_source(tmp_path: Path, runs: int) -> None:
    source = source_repo(tmp_path / "source")
    before = fingerprint(source)
    tally, started = Tally(runs=runs), time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        run_ids = set(pool.map(lambda i: scripted_run(tally, tmp_path, source, i), range(runs)))
    same_bytes(tally, source, before, "after the concurrent runs")
    finish(tally, run_ids, started)


# --- a model server that answers with broken streams --------------------------------------

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
GOOD = [Turn(tool_calls=[call("write_file", path="calc.py", content=FIXED_BOTH)]), Turn("done")]
BROKEN: list[tuple[str, list[Any], int, str]] = [
    ("bad JSON", [Raw([ROLE, b"data: {not json\n\n"])] * 2, 1, "is not JSON"),
    ("bad JSON, then good", [Raw([ROLE, b'data: {"choices": [\n\n']), *GOOD], 0, ""),
    ("HTML page", [Raw([b"<html>login</html>"], content_type="text/html")] * 2, 1, "text/html"),
    ("huge line", [Raw([b"data: " + b"x" * 70_000 + b"\n\n"])] * 2, 1, "longer than"),
    ("cut, then good", [Reply(GOOD[0], cut_after=2, abrupt=True), *GOOD], 0, ""),
    ("odd chunk", [Raw([b'data: {"choices": {"0": 1}}\n\n'])] * 2, 1, "unexpected shape"),
    ("slow drip", [Raw([b": ping\n"] * 40, delay_s=0.1)] * 2, 1, "request timeout"),
    ("not UTF-8", [Raw([ROLE, b"data: \xc3\x28\n\n"])] * 2, 1, "not UTF-8"),
    ("500, then good", [Fail(500, "upstream exploded"), *GOOD], 0, ""),
    ("empty body", [Raw([b""])] * 2, 1, "stream was empty"),
    ("JSON, not SSE", [Raw([b'{"id": "x"}'], content_type="application/json")] * 2, 1, "json"),
    ("lying framing, then good", [Raw([ROLE], framing="lying"), *GOOD], 0, ""),
]


def broken_run(tally: Tally, root: Path, source: Path, index: int) -> str:
    name, steps, code, words = BROKEN[index % len(BROKEN)]
    run_root = root / f"run-{index}"
    run_root.mkdir(parents=True)
    with ScriptedServer(ChatCompletions(), steps) as server:
        config = run_root / "config.toml"
        config.write_text(
            "[backends.soak-llm]\n"
            f'base_url = "{server.base_url}"\nmodel = "scripted-model"\n'
            f'api_key_env = "{KEY_ENV}"\nretries = 1\nretry_backoff_s = 0.01\n'
            "request_timeout_s = 1.0\nmax_stream_line_bytes = 65536\n"
        )
        spec = write_spec(run_root, source, f"soak-{index}", "soak-llm")
        env = {"CODE_RUNNER_CONFIG": str(config), KEY_ENV: "sk-soak-0123456789"}
        proc = cli("run", str(spec), env=env)
    what = f"run {index} ({name})"
    if saw_traceback(tally, what, proc):
        return ""
    result = result_of(spec)
    wanted = "dod_passed" if code == 0 else "agent_error"
    tally.check(
        (proc.returncode, result["reason"]) == (code, wanted),
        f"{what}: exit {proc.returncode}, {result['reason']}: {result.get('error')}",
    )
    if code:
        error = str(result.get("error"))
        tally.check(words in error, f"{what}: {words!r} not in {error[:300]!r}")
        tally.check(server.base_url in error, f"{what}: the error does not name the server")
    return str(result["run_id"])


@pytest.mark.parametrize("runs", counts("broken"))
def test_runs_against_broken_streams(tmp_path: Path, runs: int) -> None:
    source = source_repo(tmp_path / "source")
    before = fingerprint(source)
    tally, run_ids, started = Tally(runs=runs), set(), time.monotonic()
    for index in range(runs):
        run_ids.add(broken_run(tally, tmp_path, source, index))
        same_bytes(tally, source, before, f"run {index}")
    finish(tally, run_ids, started)


# --- complete-task mode -------------------------------------------------------------------

# passes in the workspace; fails in a source that holds an untracked BROKEN file
SOURCE_DOD = (
    f'{PY} -B -c \'import os, calc; assert not os.path.exists("BROKEN"); '
    "assert calc.add(2, 3) == 5 and calc.mul(2, 3) == 6'"
)


def complete_run(tally: Tally, root: Path, index: int) -> str:
    source = source_repo(root / f"source-{index}")
    rollback = index % 2 == 1
    if rollback:
        (source / "BROKEN").write_text("the source DoD fails while this file is here\n")
    head = git(source, "rev-parse", "HEAD").strip()
    status = git(source, "status", "--porcelain=v1", "--untracked-files=all")
    before = fingerprint(source)
    spec = scripted_spec(
        root / f"run-{index}",
        source,
        f"soak-{index}",
        [[write("calc.py", FIXED_BOTH)]],
        definition_of_done={"command": SOURCE_DOD, "assertion": "exit_code == 0"},
        apply_to_source=True,
        commit_on_success=True,
    )
    proc = cli("run", str(spec))
    what = f"run {index} ({'rollback' if rollback else 'apply'})"
    if saw_traceback(tally, what, proc):
        return ""
    result = result_of(spec)
    if rollback:
        tally.check(
            (proc.returncode, result["reason"], result.get("source_rollback_applied"))
            == (1, "source_dod_failed", True),
            f"{what}: exit {proc.returncode}, {result['reason']}: {result.get('error')}",
        )
        same_bytes(tally, source, before, what)
    else:
        commit = git(source, "rev-parse", "HEAD").strip()
        files = git(source, "show", "--name-only", "--format=", "HEAD").split()
        tally.check(
            (proc.returncode, result["reason"], result.get("source_commit"))
            == (0, "dod_passed", commit),
            f"{what}: exit {proc.returncode}, {result['reason']}: {result.get('error')}",
        )
        tally.check(git(source, "rev-parse", "HEAD~1").strip() == head, f"{what}: parent")
        tally.check(files == ["calc.py"], f"{what}: the commit holds {files}")
        after = git(source, "status", "--porcelain=v1", "--untracked-files=all")
        tally.check(after == status, f"{what}: git status changed: {after!r}")
        tally.check((source / "calc.py").read_text() == FIXED_BOTH, f"{what}: calc.py")
    return str(result["run_id"])


@pytest.mark.parametrize("runs", counts("apply"))
def test_complete_task_runs_alternating_apply_and_rollback(tmp_path: Path, runs: int) -> None:
    tally, started = Tally(runs=runs), time.monotonic()
    run_ids = {complete_run(tally, tmp_path, index) for index in range(runs)}
    finish(tally, run_ids, started)


# --- commits into a source with dirty files outside the allowlist ---------------------


@pytest.mark.parametrize("runs", counts("dirty"))
def test_commits_with_dirty_files_outside_the_allowlist(tmp_path: Path, runs: int) -> None:
    source = source_repo(
        tmp_path / "source",
        {"calc.py": CALC, "counter.txt": "0\n", "notes.md": "notes\n", ".gitignore": "*.log\n"},
    )
    # dirty, none of it allowlisted: a modified tracked file, untracked and ignored files
    (source / "notes.md").write_text("notes, edited and not committed\n")
    (source / "scratch.txt").write_text("untracked\n")
    (source / "debug.log").write_text("ignored\n")
    dirty = ("notes.md", "scratch.txt", "debug.log")
    dirty_bytes = {name: (source / name).read_bytes() for name in dirty}
    status = git(source, "status", "--porcelain=v1", "--untracked-files=all", "--ignored")
    tally, run_ids, started = Tally(runs=runs), set(), time.monotonic()
    for index in range(1, runs + 1):
        head = git(source, "rev-parse", "HEAD").strip()
        check = f'assert open("counter.txt").read() == "{index}\\n"'
        spec = scripted_spec(
            tmp_path / f"run-{index}",
            source,
            f"soak-{index}",
            [[write("counter.txt", f"{index}\n")]],
            allowlist=["counter.txt"],
            definition_of_done={"command": f"{PY} -B -c '{check}'", "assertion": "exit_code == 0"},
            apply_to_source=True,
            commit_on_success=True,
        )
        proc = cli("run", str(spec))
        what = f"commit {index}"
        if saw_traceback(tally, what, proc):
            continue
        result = result_of(spec)
        run_ids.add(str(result["run_id"]))
        tally.check(
            (proc.returncode, result["reason"]) == (0, "dod_passed"),
            f"{what}: exit {proc.returncode}, {result['reason']}: {result.get('error')}",
        )
        files = git(source, "show", "--name-only", "--format=", "HEAD").split()
        tally.check(files == ["counter.txt"], f"{what}: the commit holds {files}")
        tally.check(git(source, "rev-parse", "HEAD~1").strip() == head, f"{what}: parent")
        now = {name: (source / name).read_bytes() for name in dirty}
        tally.check(now == dirty_bytes, f"{what}: a dirty file changed")
        after = git(source, "status", "--porcelain=v1", "--untracked-files=all", "--ignored")
        tally.check(after == status, f"{what}: git status changed: {after!r}")
        tally.check(git(source, "diff", "--cached", "--name-only") == "", f"{what}: staged")
    count = git(source, "rev-list", "--count", "HEAD").strip()
    tally.check(count == str(runs + 1), f"{count} commits, wanted {runs + 1}")
    finish(tally, run_ids, started)

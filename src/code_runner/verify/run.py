"""Running a DoD: the command under the caller's wrapper (the OS sandbox), its output read
back bounded, judged, and appended to the verifier log.

A DoD is a shell command (`command`, run by bash) or an argv list (`argv`): programs with
literal arguments, run in order with no shell anywhere, the first failure ending it.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from code_runner import files, proc
from code_runner.verify.assertion import Assertion, parse_assertion
from code_runner.verify.judge import Verdict, judge

if TYPE_CHECKING:
    from code_runner.task import DefinitionOfDone


# How much of each stream `run_dod` reads back for matching: enough for any test report,
# bounded so a runaway command cannot make judging slow or memory-hungry.
MATCH_HEAD_BYTES = 1024 * 1024
MATCH_TAIL_BYTES = 7 * 1024 * 1024


def run_dod(
    dod: DefinitionOfDone,
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path | None = None,
    label: str = "",
    wrap_argv: Callable[[Sequence[str]], list[str]] | None = None,
    stop_when: proc.StopCheck | None = None,
    launch: proc.Launcher | None = None,
) -> Verdict:
    """Run the DoD command in `cwd` and judge it; append a readable section to `log_path`.

    `wrap_argv` is the OS sandbox's wrapper (the same one the agent's commands get): the
    DoD runs under the same walls, so it cannot be used to reach what the agent cannot.
    `stop_when` is asked while it runs (the run's disk budget): True kills it.
    `launch` runs the (unwrapped) argv inside the sandbox itself instead (`Session.run`,
    the session's resident sandbox).

    The command's full output (up to `MATCH_HEAD_BYTES + MATCH_TAIL_BYTES` per stream) is
    matched, not just the tails a `ProcResult` carries, so a marker in the middle of a long
    log is still found.
    """
    assertion = parse_assertion(dod.assertion)
    with tempfile.TemporaryDirectory(prefix="code-runner-dod-") as scratch:
        out_path = Path(scratch) / "stdout"
        err_path = Path(scratch) / "stderr"
        started_at = datetime.now(UTC)
        wrap = wrap_argv if wrap_argv is not None and launch is None else list
        run = launch or proc.run
        if dod.argv is not None:
            result = _run_in_order(
                dod.argv, dod.timeout_s, cwd, env, wrap, out_path, err_path, stop_when, run
            )
        else:
            result = run(
                wrap(proc.shell_argv(dod.command)),
                cwd=cwd,
                env=env,
                timeout_s=dod.timeout_s,
                stdout_path=out_path,
                stderr_path=err_path,
                stop_when=stop_when,
            )
        full_out, _ = proc.read_head_tail(out_path, MATCH_HEAD_BYTES, MATCH_TAIL_BYTES)
        full_err, _ = proc.read_head_tail(err_path, MATCH_HEAD_BYTES, MATCH_TAIL_BYTES)
    verdict = judge(assertion, result, stdout=full_out, stderr=full_err)
    if log_path is not None:
        _append_log(log_path, label, dod.command, cwd, started_at, assertion, result, verdict)
    return verdict


def _run_in_order(
    argvs: Sequence[Sequence[str]],
    timeout_s: float,
    cwd: Path,
    env: Mapping[str, str],
    wrap: Callable[[Sequence[str]], list[str]],
    out_path: Path,
    err_path: Path,
    stop_when: proc.StopCheck | None = None,
    run: proc.Launcher = proc.run,
) -> proc.ProcResult:
    """Each argv in turn (no shell), sharing one deadline, until one fails. The result is the
    last one run, with the duration and output of all of them."""
    deadline = time.monotonic() + timeout_s
    out_path.touch()
    err_path.touch()
    last: proc.ProcResult | None = None
    total_s = 0.0
    for number, argv in enumerate(argvs):
        part_out, part_err = (
            out_path.with_name(f"out.{number}"),
            err_path.with_name(f"err.{number}"),
        )
        last = run(
            wrap(list(argv)),
            cwd=cwd,
            env=env,
            timeout_s=max(deadline - time.monotonic(), 0.01),
            stop_when=stop_when,
            stdout_path=part_out,
            stderr_path=part_err,
        )
        total_s += last.duration_s
        for part, whole in ((part_out, out_path), (part_err, err_path)):
            with part.open("rb") as src, whole.open("ab") as dst:
                shutil.copyfileobj(src, dst)
            part.unlink()
        if not last.ok:
            break
    assert last is not None  # the model refuses an empty argv list
    out_text, out_size = proc.read_head_tail(
        out_path, proc.DEFAULT_HEAD_BYTES, proc.DEFAULT_TAIL_BYTES
    )
    err_text, err_size = proc.read_head_tail(
        err_path, proc.DEFAULT_HEAD_BYTES, proc.DEFAULT_TAIL_BYTES
    )
    return dataclasses.replace(
        last,
        duration_s=total_s,
        stdout=out_text,
        stderr=err_text,
        stdout_size=out_size,
        stderr_size=err_size,
    )


def _append_log(
    log_path: Path,
    label: str,
    command: str,
    cwd: Path,
    started_at: datetime,
    assertion: Assertion,
    result: proc.ProcResult,
    verdict: Verdict,
) -> None:
    """One plain-text section per DoD run, written with a single append."""
    if verdict.tests_passed is not None:
        tests = f"{verdict.tests_passed} passed, {verdict.tests_failed} failed"
    else:
        tests = "no test summary found"
    lines = [
        f"===== {label or 'DoD'} =====",
        f"started:   {started_at.isoformat(timespec='seconds')}",
        f"command:   {command}",
        f"cwd:       {cwd}",
        f"assertion: {assertion.raw}  ({assertion.describe()})",
        f"exit:      {result.describe()}",
        f"duration:  {result.duration_s:.2f} s",
        f"verdict:   {'PASS' if verdict.passed else 'FAIL'}: {verdict.reason}",
        f"tests:     {tests}",
        f"----- stdout ({result.stdout_size} bytes; head and tail kept) -----",
        result.stdout.rstrip("\n"),
        f"----- stderr ({result.stderr_size} bytes; head and tail kept) -----",
        result.stderr.rstrip("\n"),
        "",
        "",
    ]
    files.append_text(log_path, "\n".join(lines))

"""The definition of done: assertion grammar, judging, test counts, scoring, real DoD runs."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from code_runner import proc
from code_runner.task import DefinitionOfDone
from code_runner.verify import (
    AssertionKind,
    Verdict,
    judge,
    parse_assertion,
    parse_test_counts,
    run_dod,
    score,
)


def result(
    exit_code: int = 0,
    stdout: str = "",
    stderr: str = "",
    *,
    timed_out: bool = False,
    output_limited: bool = False,
    duration_s: float = 0.25,
) -> proc.ProcResult:
    return proc.ProcResult(
        argv=("bash", "-c", "x"),
        cwd="/tmp",
        exit_code=exit_code,
        duration_s=duration_s,
        stdout=stdout,
        stderr=stderr,
        stdout_size=len(stdout),
        stderr_size=len(stderr),
        timed_out=timed_out,
        output_limited=output_limited,
    )


def py(code: str) -> str:
    """A DoD command running `code` with this interpreter."""
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


# --- parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("exit_code == 0", AssertionKind.EXIT_CODE_EQ, 0),
        ("exit_code==3", AssertionKind.EXIT_CODE_EQ, 3),
        ("  exit_code   ==   255  ", AssertionKind.EXIT_CODE_EQ, 255),
        ("exit_code != 0", AssertionKind.EXIT_CODE_NE, 0),
        ("exit_code!=1", AssertionKind.EXIT_CODE_NE, 1),
        ("contains:All good", AssertionKind.CONTAINS, "All good"),
        ("stdout_regex:^ok \\d+$", AssertionKind.STDOUT_REGEX, "^ok \\d+$"),
        ("stderr_regex:warn(ing)?", AssertionKind.STDERR_REGEX, "warn(ing)?"),
        ("json_has_keys:a, b.c ,a", AssertionKind.JSON_HAS_KEYS, ("a", "b.c")),
        ("passed", AssertionKind.SUBSTRING, "passed"),
        ("  3 passed ", AssertionKind.SUBSTRING, "3 passed"),
        ("error: nothing", AssertionKind.SUBSTRING, "error: nothing"),
        ("the exit_code == 0 line", AssertionKind.SUBSTRING, "the exit_code == 0 line"),
    ],
)
def test_parse_every_form(text: str, kind: AssertionKind, value: object) -> None:
    parsed = parse_assertion(text)
    assert parsed.kind is kind
    assert parsed.value == value
    assert parsed.raw == text
    assert parsed.describe()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("exit_code = 0", "did you mean `exit_code == 0`?"),
        ("exit_code=0", "did you mean `exit_code == 0`?"),
        ("exit code == 0", "did you mean `exit_code == 0`?"),
        ("Exit-Code != 2", "did you mean `exit_code != 2`?"),
        ("returncode: 1", "did you mean `exit_code == 1`?"),
        ("stdout-regex:^ok$", "did you mean 'stdout_regex:'"),
        ("Contains:passed", "did you mean 'contains:'"),
        ("json has keys:a", "did you mean 'json_has_keys:'"),
        ("exit_code == zero", "write `exit_code == N`"),
        ("exit_code == 0 and passed", "write `exit_code == N`"),
        ("exit_code", "write `exit_code == N`"),
        ("exit_code == 256", "out of range"),
        ("exit_code == -1", "out of range"),
        ("stdout_regex:(unclosed", "not a valid Python regular expression"),
        ("stderr_regex:[z-a]", "not a valid Python regular expression"),
        ("stdout_regex:", "needs something after the colon"),
        ("contains:", "needs something after the colon"),
        ("json_has_keys:a,,b", "empty key"),
        ("json_has_keys:a..b", "empty key"),
        ("stdout_regx:foo", "did you mean 'stdout_regex:'"),
        ("contain:foo", "did you mean 'contains:'"),
    ],
)
def test_parse_errors_say_how_to_fix(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_assertion(text)
    assert needle in str(info.value)


@pytest.mark.parametrize("text", ["tests passed", "error: none", "stdout: ok", "OK", "rc 0 ok"])
def test_plain_text_that_is_no_near_miss_stays_a_substring(text: str) -> None:
    assert parse_assertion(text).kind is AssertionKind.SUBSTRING


# --- judging -------------------------------------------------------------------------


def test_exit_code_eq_pass_and_fail() -> None:
    a = parse_assertion("exit_code == 2")
    good = judge(a, result(2))
    assert good.passed and "exit 2" in good.reason
    bad = judge(a, result(0))
    assert not bad.passed and "exit 0" in bad.reason and "exit_code == 2" in bad.reason


def test_exit_code_ne_pass_and_fail() -> None:
    a = parse_assertion("exit_code != 0")
    assert judge(a, result(1)).passed
    assert not judge(a, result(0)).passed


def test_contains_is_case_sensitive_and_reads_both_streams() -> None:
    a = parse_assertion("contains:OK")
    out = judge(a, result(0, stdout="all OK\n"))
    assert out.passed and out.reason == "exit 0 and stdout contains 'OK'"
    err = judge(a, result(0, stderr="OK"))
    assert err.passed and "stderr contains" in err.reason
    miss = judge(a, result(0, stdout="ok"))
    assert not miss.passed and "neither stdout nor stderr contains 'OK'" in miss.reason


def test_substring_is_case_insensitive_over_stdout_and_stderr() -> None:
    a = parse_assertion("Passed")
    assert judge(a, result(0, stdout="5 PASSED in 0.1s")).passed
    assert judge(a, result(0, stderr="passed")).passed
    miss = judge(a, result(0, stdout="5 failed"))
    assert not miss.passed and "does not contain 'Passed'" in miss.reason


def test_stdout_regex_is_multiline_search_on_stdout_only() -> None:
    a = parse_assertion("stdout_regex:^done$")
    assert judge(a, result(0, stdout="start\ndone\nend")).passed
    only_err = judge(a, result(0, stderr="done"))
    assert not only_err.passed and "stdout does not match" in only_err.reason


def test_stderr_regex_reads_stderr_only() -> None:
    a = parse_assertion("stderr_regex:warn\\w+")
    assert judge(a, result(0, stderr="a warning here")).passed
    assert not judge(a, result(0, stdout="a warning here")).passed


def test_json_has_keys_whole_stdout_last_line_and_nesting() -> None:
    a = parse_assertion("json_has_keys:score,meta.run")
    whole = json.dumps({"score": 1, "meta": {"run": 3}}, indent=2)
    assert judge(a, result(0, stdout=whole)).passed
    logged = "loading...\n" + json.dumps({"score": 1, "meta": {"run": 3}}) + "\n\n"
    assert judge(a, result(0, stdout=logged)).passed
    missing = judge(a, result(0, stdout=json.dumps({"score": 1, "meta": {}})))
    assert not missing.passed and "lacks meta.run" in missing.reason
    not_json = judge(a, result(0, stdout="score: 1"))
    assert not not_json.passed and "not a JSON object" in not_json.reason
    a_list = judge(a, result(0, stdout="[1, 2]"))
    assert not a_list.passed


@pytest.mark.parametrize(
    "text", ["contains:ok", "stdout_regex:ok", "json_has_keys:ok", "ok", "stderr_regex:ok"]
)
def test_every_output_form_also_requires_exit_zero(text: str) -> None:
    verdict = judge(parse_assertion(text), result(1, stdout='{"ok": 1}', stderr="ok"))
    assert not verdict.passed
    assert "exit 1" in verdict.reason and "requires exit 0" in verdict.reason
    assert "would pass" in verdict.reason


@pytest.mark.parametrize("text", ["exit_code == 124", "exit_code != 0", "passed"])
def test_timeout_always_fails_and_says_so(text: str) -> None:
    verdict = judge(
        parse_assertion(text),
        result(124, stdout="passed", timed_out=True, duration_s=600.02),
    )
    assert not verdict.passed
    assert verdict.timed_out
    assert verdict.reason.startswith("timed out after 600 s (exit 124)")


def test_output_cap_kill_fails_even_for_exit_code_ne() -> None:
    verdict = judge(parse_assertion("exit_code != 0"), result(137, output_limited=True))
    assert not verdict.passed and "size cap" in verdict.reason


def test_judge_prefers_full_output_over_result_tails() -> None:
    a = parse_assertion("contains:marker")
    r = result(0, stdout="head [... omitted ...] tail")
    assert not judge(a, r).passed
    assert judge(a, r, stdout="head marker tail").passed


def test_verdict_keeps_tails_and_serialises() -> None:
    verdict = judge(parse_assertion("passed"), result(0, stdout="x" * 10_000 + "1 passed"))
    assert len(verdict.stdout_tail) == 4096 and verdict.stdout_tail.endswith("1 passed")
    data = verdict.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data) >= {"passed", "reason", "assertion", "exit_code", "tests_passed"}


# --- test counts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdout", "stderr", "expected"),
    [
        ("===== 3 failed, 5 passed in 0.12s =====", "", (5, 3)),
        ("5 passed, 1 skipped in 0.01s", "", (5, 0)),
        ("1 failed, 2 passed, 1 error in 1.0s", "", (2, 2)),
        ("== 2 errors in 0.3s ==", "", (0, 2)),
        ("1 xpassed, 4 passed", "", (4, 0)),
        ("", "....\n----\nRan 8 tests in 0.001s\n\nOK\n", (8, 0)),
        ("", "Ran 8 tests in 0.01s\n\nFAILED (failures=2, errors=1)\n", (5, 3)),
        ("", "Ran 4 tests in 0.01s\n\nOK (skipped=1)\n", (3, 0)),
        ("Test Suites: 1 failed, 2 passed, 3 total\nTests:       1 failed, 4 passed, 5 total\n"
         "Snapshots:   0 total\nTime:        1.2 s\n", "", (4, 1)),
        ("test result: FAILED. 3 passed; 1 failed; 0 ignored", "", (3, 1)),
        ("  4 passing (8ms)\n  1 failing\n\n  1) broke\n", "", (4, 1)),
        ("  6 passing (8ms)\n", "", (6, 0)),
        ("nothing to see here", "", (None, None)),
    ],
)  # fmt: skip
def test_parse_test_counts(stdout: str, stderr: str, expected: tuple[int | None, ...]) -> None:
    assert parse_test_counts(stdout, stderr) == expected


def test_judge_fills_test_counts() -> None:
    verdict = judge(parse_assertion("passed"), result(1, stdout="2 failed, 3 passed in 1s"))
    assert (verdict.tests_passed, verdict.tests_failed) == (3, 2)


# --- scoring -------------------------------------------------------------------------


def verdict_with(
    passed: bool, timed_out: bool = False, counts: tuple[int, int] | None = None
) -> Verdict:
    return Verdict(
        passed=passed,
        reason="r",
        assertion="a",
        exit_code=124 if timed_out else (0 if passed else 1),
        timed_out=timed_out,
        duration_s=1.0,
        stdout_tail="",
        stderr_tail="",
        tests_passed=counts[0] if counts else None,
        tests_failed=counts[1] if counts else None,
    )


def test_score_orders_by_evidence() -> None:
    passing = score(verdict_with(True))
    timeout = score(verdict_with(False, timed_out=True))
    no_counts = score(verdict_with(False))
    most_fail = score(verdict_with(False, counts=(1, 9)))
    few_fail = score(verdict_with(False, counts=(9, 1)))
    all_pass_counts_but_failed = score(verdict_with(False, counts=(10, 0)))
    assert passing == 1.0
    assert timeout == 0.0
    assert no_counts == pytest.approx(0.05)
    assert timeout < no_counts < most_fail < few_fail < 0.5
    assert all_pass_counts_but_failed == pytest.approx(0.45)
    assert score(verdict_with(False, counts=(0, 0))) == pytest.approx(0.05)


# --- real processes ------------------------------------------------------------------


def env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}


def test_run_dod_pass_writes_a_readable_log(tmp_path: Path) -> None:
    dod = DefinitionOfDone(command=py("print('3 passed in 0.1s')"), assertion="passed")
    log = tmp_path / "rec" / "t.verifier.log"
    verdict = run_dod(dod, cwd=tmp_path, env=env(), log_path=log, label="round 1")
    assert verdict.passed
    assert verdict.exit_code == 0 and verdict.tests_passed == 3
    assert "3 passed" in verdict.stdout_tail
    text = log.read_text()
    needles = ["===== round 1 =====", "command:", str(tmp_path), "exit:      exit 0"]
    needles += ["verdict:   PASS", "----- stdout", "3 passed in 0.1s", "----- stderr"]
    for needle in needles:
        assert needle in text
    run_dod(dod, cwd=tmp_path, env=env(), log_path=log, label="round 2")
    text = log.read_text()
    assert text.count("===== round") == 2, "sections are appended, not overwritten"


def test_run_dod_fail_reports_exit_and_counts(tmp_path: Path) -> None:
    code = "import sys; print('1 failed, 2 passed in 0.2s'); sys.exit(1)"
    dod = DefinitionOfDone(command=py(code), assertion="passed")
    verdict = run_dod(dod, cwd=tmp_path, env=env())
    assert not verdict.passed
    assert verdict.exit_code == 1
    assert (verdict.tests_passed, verdict.tests_failed) == (2, 1)
    assert 0.05 < score(verdict) < 0.5


def test_run_dod_runs_in_cwd_with_given_env(tmp_path: Path) -> None:
    (tmp_path / "marker.txt").write_text("here")
    code = "import os; print(open('marker.txt').read(), os.environ['DOD_TOKEN'])"
    dod = DefinitionOfDone(command=py(code), assertion="stdout_regex:^here xyz$")
    assert run_dod(dod, cwd=tmp_path, env={**env(), "DOD_TOKEN": "xyz"}).passed


def test_run_dod_timeout_is_exit_124_and_plain(tmp_path: Path) -> None:
    dod = DefinitionOfDone(
        command=py("import time; time.sleep(30)"), assertion="exit_code != 0", timeout_s=0.5
    )
    log = tmp_path / "v.log"
    verdict = run_dod(dod, cwd=tmp_path, env=env(), log_path=log)
    assert not verdict.passed and verdict.timed_out
    assert verdict.exit_code == 124
    assert verdict.reason.startswith("timed out after") and "(exit 124)" in verdict.reason
    assert verdict.duration_s < 10
    assert score(verdict) == 0.0
    assert "timed out" in log.read_text()


def test_run_dod_matches_output_beyond_the_kept_tails(tmp_path: Path) -> None:
    code = "print('x' * 200_000); print('MIDDLE-MARKER'); print('y' * 200_000)"
    dod = DefinitionOfDone(command=py(code), assertion="contains:MIDDLE-MARKER")
    verdict = run_dod(dod, cwd=tmp_path, env=env())
    assert verdict.passed
    assert "MIDDLE-MARKER" not in verdict.stdout_tail


def test_run_dod_shell_features_work(tmp_path: Path) -> None:
    dod = DefinitionOfDone(command="echo one && echo two >&2", assertion="stderr_regex:^two$")
    assert run_dod(dod, cwd=tmp_path, env=env()).passed


def test_run_dod_in_a_missing_directory_fails_without_raising(tmp_path: Path) -> None:
    dod = DefinitionOfDone(command="true", assertion="exit_code == 0")
    verdict = run_dod(dod, cwd=tmp_path / "gone", env=env())
    assert not verdict.passed and verdict.exit_code == 127
    assert "could not start" in verdict.stderr_tail

"""Judging a DoD's result into a `Verdict`, and scoring verdicts to keep the best round.

Verdicts come from evidence the runner computed (the command's real exit code and output),
never from what an agent says. Judging is a pure function of an `Assertion` and a
`proc.ProcResult`, so a recorded result can be re-judged and the same output always gives the
same verdict. Every assertion form except the explicit exit-code ones also requires exit 0:
"the tests printed 'passed' but the suite crashed" must not count as done.
The grammar is in `assertion`; test counts and the evidence-graded `score` are here too.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

from code_runner import proc
from code_runner.problems import clip
from code_runner.verify.assertion import Assertion, AssertionKind, quote

# How much of each stream a verdict keeps for the record (the log keeps more).
TAIL_CHARS = 4096


# Test-count parsing only looks at the end of the output, where summaries are printed.
_SUMMARY_SCAN_CHARS = 64 * 1024
_SHOWN_CHARS = 80  # an assertion or regex quoted in a verdict reason


@dataclass(frozen=True)
class Verdict:
    """The judged outcome of one DoD run: pass/fail, why in plain English, and the evidence."""

    passed: bool
    reason: str
    assertion: str
    exit_code: int
    timed_out: bool
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    tests_passed: int | None = None
    tests_failed: int | None = None

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _fmt_seconds(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:.0f} s"
    return f"{seconds:.1f} s"


def judge(
    assertion: Assertion,
    result: proc.ProcResult,
    *,
    stdout: str | None = None,
    stderr: str | None = None,
) -> Verdict:
    """Judge a finished command against an assertion. Pure: no I/O, no clock.

    `stdout`/`stderr` may carry more of the output than the result's head+tail text (as
    `run_dod` does); when absent, the result's text is matched.
    """
    out = result.stdout if stdout is None else stdout
    err = result.stderr if stderr is None else stderr
    passed, reason = _decide(assertion, result, out, err)
    tests_passed, tests_failed = parse_test_counts(out, err)
    return Verdict(
        passed=passed,
        reason=reason,
        assertion=assertion.raw,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        duration_s=result.duration_s,
        stdout_tail=result.stdout[-TAIL_CHARS:],
        stderr_tail=result.stderr[-TAIL_CHARS:],
        tests_passed=tests_passed,
        tests_failed=tests_failed,
    )


def _decide(assertion: Assertion, result: proc.ProcResult, out: str, err: str) -> tuple[bool, str]:
    code = result.exit_code
    if result.timed_out:
        return False, (
            f"timed out after {_fmt_seconds(result.duration_s)} "
            f"(exit {proc.TIMEOUT_EXIT_CODE}); the command was killed"
        )
    if result.output_limited:
        # The exit code is our kill, not the command's answer; no form may pass on it.
        return False, f"killed: the output exceeded the size cap (exit {code})"
    kind = assertion.kind
    if kind is AssertionKind.EXIT_CODE_EQ:
        if code == assertion.value:
            return True, f"exit {code} as required ({assertion.raw.strip()})"
        return False, f"exit {code}; required {assertion.raw.strip()}"
    if kind is AssertionKind.EXIT_CODE_NE:
        if code != assertion.value:
            return True, f"exit {code} as required ({assertion.raw.strip()})"
        return False, f"exit {code}; required {assertion.raw.strip()}"
    found, what = _check_output(assertion, out, err)
    if code != 0:
        note = f" (the output check alone would pass: {what})" if found else ""
        return (
            False,
            f"exit {code}; `{clip(assertion.raw, _SHOWN_CHARS)}` also requires exit 0{note}",
        )
    if found:
        return True, f"exit 0 and {what}"
    return False, f"exit 0 but {what}"


def _check_output(assertion: Assertion, out: str, err: str) -> tuple[bool, str]:
    """(found, phrase) for the output-checking forms; phrase reads after 'exit 0 and/but'."""
    value = assertion.value
    match assertion.kind:
        case AssertionKind.CONTAINS:
            assert isinstance(value, str)
            if value in out:
                return True, f"stdout contains {quote(value)}"
            if value in err:
                return True, f"stderr contains {quote(value)}"
            return False, f"neither stdout nor stderr contains {quote(value)}"
        case AssertionKind.STDOUT_REGEX | AssertionKind.STDERR_REGEX:
            assert isinstance(value, str)
            stream = "stdout" if assertion.kind is AssertionKind.STDOUT_REGEX else "stderr"
            text = out if stream == "stdout" else err
            if re.search(value, text, re.MULTILINE):
                return True, f"{stream} matches /{clip(value, _SHOWN_CHARS)}/"
            return False, f"{stream} does not match /{clip(value, _SHOWN_CHARS)}/"
        case AssertionKind.JSON_HAS_KEYS:
            assert isinstance(value, tuple)
            return _check_json_keys(value, out)
        case _:
            assert isinstance(value, str)
            needle = value.casefold()
            if needle in out.casefold() or needle in err.casefold():
                return True, f"the output contains {quote(value)} (any case)"
            return False, f"the output does not contain {quote(value)} (any case)"


def _json_object(out: str) -> dict[str, object] | None:
    """stdout as a JSON object, or its last non-empty line as one (tools that log first)."""
    candidates = [out]
    lines = [line for line in out.splitlines() if line.strip()]
    if lines:
        candidates.append(lines[-1])
    for text in candidates:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            return data
    return None


def _check_json_keys(keys: tuple[str, ...], out: str) -> tuple[bool, str]:
    data = _json_object(out)
    listed = ", ".join(keys)
    if data is None:
        return False, "stdout is not a JSON object (nor is its last non-empty line)"
    missing = [key for key in keys if not _has_path(data, key.split("."))]
    if missing:
        return False, f"stdout JSON lacks {', '.join(missing)} (required: {listed})"
    return True, f"stdout JSON has keys {listed}"


def _has_path(data: object, parts: list[str]) -> bool:
    for part in parts:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)


_UNITTEST_END = re.compile(r"^(OK|FAILED)\b(?: \(([^)]*)\))?", re.MULTILINE)


_JEST = re.compile(r"^\s*Tests:\s+(.*)$", re.MULTILINE)


_CARGO = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed")


_MOCHA_PASS = re.compile(r"^\s*(\d+) passing\b", re.MULTILINE)


_MOCHA_FAIL = re.compile(r"^\s*(\d+) failing\b", re.MULTILINE)


_COUNT = re.compile(r"\b(\d+) (passed|failed|errors?)\b")


def parse_test_counts(stdout: str, stderr: str = "") -> tuple[int | None, int | None]:
    """(passed, failed) from a test runner's summary, or (None, None) when there is none.

    Understands pytest ("3 failed, 5 passed in 0.1s"; errors count as failures), unittest
    ("Ran 8 tests" + "OK" / "FAILED (failures=2, errors=1)"), jest ("Tests: 1 failed, 4
    passed, 5 total"), cargo ("test result: FAILED. 3 passed; 1 failed") and mocha
    ("5 passing" / "1 failing"). Counts grade failing rounds (`score`), so a round with
    fewer failing tests is kept over one with more.
    """
    for text in (stdout[-_SUMMARY_SCAN_CHARS:], stderr[-_SUMMARY_SCAN_CHARS:]):
        counts = _counts_in(text)
        if counts is not None:
            return counts
    return None, None


def _counts_in(text: str) -> tuple[int, int] | None:  # noqa: C901 - one branch per test runner's output
    ran = list(_UNITTEST_RAN.finditer(text))
    if ran:
        total = int(ran[-1].group(1))
        end = _UNITTEST_END.search(text, ran[-1].end())
        fields: dict[str, int] = {}
        if end and end.group(2):
            for item in end.group(2).split(","):
                name, _, number = item.strip().partition("=")
                if number.isdigit():
                    fields[name.strip()] = int(number)
        failed = fields.get("failures", 0) + fields.get("errors", 0)
        skipped = fields.get("skipped", 0) + fields.get("expected failures", 0)
        return max(total - failed - skipped, 0), failed
    jest = list(_JEST.finditer(text))
    if jest:
        counts = _line_counts(jest[-1].group(1))
        if counts is not None:
            return counts
    cargo = list(_CARGO.finditer(text))
    if cargo:
        return int(cargo[-1].group(1)), int(cargo[-1].group(2))
    passing = list(_MOCHA_PASS.finditer(text))
    if passing:
        failing = list(_MOCHA_FAIL.finditer(text))
        return int(passing[-1].group(1)), int(failing[-1].group(1)) if failing else 0
    for line in reversed(text.splitlines()):
        counts = _line_counts(line)
        if counts is not None:
            return counts
    return None


def _line_counts(line: str) -> tuple[int, int] | None:
    matches = _COUNT.findall(line)
    if not matches:
        return None
    passed = sum(int(n) for n, word in matches if word == "passed")
    failed = sum(int(n) for n, word in matches if word != "passed")
    return passed, failed


def score(verdict: Verdict) -> float:
    """A round's score: 1.0 for a pass; a failure strictly below 0.5, graded by evidence.

    The DoD dominates (the seed's rule): no failing round may outrank a passing one, so
    failures live in [0, 0.45]. Among failures, test counts are the only evidence of
    progress the runner can trust, so 0.05 + 0.4 * passed/(passed+failed) keeps the round
    with fewer failing tests. A failure with no counts gets 0.05: it finished and said no.
    A timeout gets 0.0: it gave no answer at all, and a hang is worse than a clean failure.
    """
    if verdict.passed:
        return 1.0
    if verdict.timed_out:
        return 0.0
    tests_passed, tests_failed = verdict.tests_passed, verdict.tests_failed
    if tests_passed is not None and tests_failed is not None:
        total = tests_passed + tests_failed
        if total > 0:
            return 0.05 + 0.4 * tests_passed / total
    return 0.05

"""The definition of done: a command and an assertion, judged into a `Verdict`.

Verdicts come from evidence the runner computed (the command's real exit code and output),
never from what an agent says. Judging is a pure function of an `Assertion` and a
`proc.ProcResult`, so a recorded result can be re-judged and the same output always gives the
same verdict. Every assertion form except the explicit exit-code ones also requires exit 0:
"the tests printed 'passed' but the suite crashed" must not count as done.

Assertion grammar (the whole string is one assertion):

    exit_code == N          exit code is N (0..255)
    exit_code != N          exit code is not N
    contains:TEXT           stdout or stderr contains TEXT (case-sensitive)
    stdout_regex:RE         re.search(RE, stdout), MULTILINE
    stderr_regex:RE         re.search(RE, stderr), MULTILINE
    json_has_keys:a,b.c     stdout (or its last non-empty line) is a JSON object with these keys
    anything else           case-insensitive substring of stdout + stderr
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from code_runner import proc

if TYPE_CHECKING:
    from code_runner.spec import DefinitionOfDone

# How much of each stream a verdict keeps for the record (the log keeps more).
TAIL_CHARS = 4096
# How much of each stream `run_dod` reads back for matching: enough for any test report,
# bounded so a runaway command cannot make judging slow or memory-hungry.
MATCH_HEAD_BYTES = 1024 * 1024
MATCH_TAIL_BYTES = 7 * 1024 * 1024
# Test-count parsing only looks at the end of the output, where summaries are printed.
_SUMMARY_SCAN_CHARS = 64 * 1024


class AssertionKind(StrEnum):
    EXIT_CODE_EQ = "exit_code_eq"
    EXIT_CODE_NE = "exit_code_ne"
    CONTAINS = "contains"
    STDOUT_REGEX = "stdout_regex"
    STDERR_REGEX = "stderr_regex"
    JSON_HAS_KEYS = "json_has_keys"
    SUBSTRING = "substring"


_PREFIXES: dict[str, AssertionKind] = {
    "contains:": AssertionKind.CONTAINS,
    "stdout_regex:": AssertionKind.STDOUT_REGEX,
    "stderr_regex:": AssertionKind.STDERR_REGEX,
    "json_has_keys:": AssertionKind.JSON_HAS_KEYS,
}
_EXIT_RE = re.compile(r"^\s*exit_code\s*(==|!=)\s*([+-]?\d+)\s*$")
_WORD_COLON_RE = re.compile(r"^([a-z_]{4,20}):")
_GRAMMAR_HINT = (
    "use `exit_code == N`, `exit_code != N`, `contains:TEXT`, `stdout_regex:RE`, "
    "`stderr_regex:RE`, `json_has_keys:a,b`, or plain text to find in the output"
)


@dataclass(frozen=True)
class Assertion:
    """One parsed assertion. `value` is an int (exit-code kinds), a str, or a key tuple."""

    kind: AssertionKind
    raw: str
    value: int | str | tuple[str, ...]

    def describe(self) -> str:
        """What must be true, in words, for a log line or a dry-run."""
        match self.kind:
            case AssertionKind.EXIT_CODE_EQ:
                return f"exit code is {self.value}"
            case AssertionKind.EXIT_CODE_NE:
                return f"exit code is not {self.value}"
            case AssertionKind.CONTAINS:
                return f"exit 0 and stdout or stderr contains {_quote(self.value)}"
            case AssertionKind.STDOUT_REGEX:
                return f"exit 0 and stdout matches /{self.value}/"
            case AssertionKind.STDERR_REGEX:
                return f"exit 0 and stderr matches /{self.value}/"
            case AssertionKind.JSON_HAS_KEYS:
                assert isinstance(self.value, tuple)
                return f"exit 0 and stdout is a JSON object with keys {', '.join(self.value)}"
            case AssertionKind.SUBSTRING:
                return f"exit 0 and the output contains {_quote(self.value)} (any case)"


def _quote(value: object, limit: int = 80) -> str:
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def parse_assertion(text: str) -> Assertion:
    """Parse an assertion string; raise ValueError saying what is wrong and how to write it.

    A string that starts with `exit_code` but is malformed is an error rather than a plain
    substring: `exit_code = 0` silently searching the output for that text would pass or fail
    for the wrong reason. Likewise a near-miss prefix (`stdout_regx:`) is refused.
    """
    if not isinstance(text, str):
        raise ValueError(f"must be a string; {_GRAMMAR_HINT}")
    if text.strip() == "":
        raise ValueError(f"is empty; {_GRAMMAR_HINT}")
    if text.lstrip().startswith("exit_code"):
        return _parse_exit(text)
    for prefix, kind in _PREFIXES.items():
        if text.startswith(prefix):
            return _parse_prefixed(text, prefix, kind)
    near = _WORD_COLON_RE.match(text)
    if near:
        names = [p[:-1] for p in _PREFIXES]
        close = difflib.get_close_matches(near.group(1), names, n=1, cutoff=0.8)
        if close:
            raise ValueError(
                f"unknown assertion form '{near.group(1)}:'; did you mean '{close[0]}:'?"
            )
    return Assertion(AssertionKind.SUBSTRING, text, text.strip())


def _parse_exit(text: str) -> Assertion:
    match = _EXIT_RE.match(text)
    if not match:
        raise ValueError(
            f"{_quote(text)} is not a valid exit-code assertion; "
            "write `exit_code == N` or `exit_code != N` with N from 0 to 255"
        )
    number = int(match.group(2))
    if not 0 <= number <= 255:
        raise ValueError(f"exit code {number} is out of range; use N from 0 to 255")
    kind = AssertionKind.EXIT_CODE_EQ if match.group(1) == "==" else AssertionKind.EXIT_CODE_NE
    return Assertion(kind, text, number)


def _parse_prefixed(text: str, prefix: str, kind: AssertionKind) -> Assertion:
    body = text[len(prefix) :]
    name = prefix[:-1]
    if body.strip() == "":
        raise ValueError(f"`{prefix}` needs something after the colon; {_GRAMMAR_HINT}")
    if kind in (AssertionKind.STDOUT_REGEX, AssertionKind.STDERR_REGEX):
        try:
            re.compile(body, re.MULTILINE)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ValueError(
                f"{name} {_quote(body)} is not a valid Python regular expression ({exc}); "
                "fix the pattern (escape literal characters with a backslash)"
            ) from None
        return Assertion(kind, text, body)
    if kind is AssertionKind.JSON_HAS_KEYS:
        keys = tuple(k.strip() for k in body.split(","))
        for key in keys:
            if key == "" or any(part == "" for part in key.split(".")):
                raise ValueError(
                    f"json_has_keys {_quote(body)} has an empty key; "
                    "list keys separated by commas, with dots for nesting (a,b.c)"
                )
        return Assertion(kind, text, tuple(dict.fromkeys(keys)))
    return Assertion(kind, text, body)


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
        return False, f"exit {code}; `{_short(assertion.raw)}` also requires exit 0{note}"
    if found:
        return True, f"exit 0 and {what}"
    return False, f"exit 0 but {what}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_output(assertion: Assertion, out: str, err: str) -> tuple[bool, str]:
    """(found, phrase) for the output-checking forms; phrase reads after 'exit 0 and/but'."""
    value = assertion.value
    match assertion.kind:
        case AssertionKind.CONTAINS:
            assert isinstance(value, str)
            if value in out:
                return True, f"stdout contains {_quote(value)}"
            if value in err:
                return True, f"stderr contains {_quote(value)}"
            return False, f"neither stdout nor stderr contains {_quote(value)}"
        case AssertionKind.STDOUT_REGEX | AssertionKind.STDERR_REGEX:
            assert isinstance(value, str)
            stream = "stdout" if assertion.kind is AssertionKind.STDOUT_REGEX else "stderr"
            text = out if stream == "stdout" else err
            if re.search(value, text, re.MULTILINE):
                return True, f"{stream} matches /{_short(value)}/"
            return False, f"{stream} does not match /{_short(value)}/"
        case AssertionKind.JSON_HAS_KEYS:
            assert isinstance(value, tuple)
            return _check_json_keys(value, out)
        case _:
            assert isinstance(value, str)
            needle = value.casefold()
            if needle in out.casefold() or needle in err.casefold():
                return True, f"the output contains {_quote(value)} (any case)"
            return False, f"the output does not contain {_quote(value)} (any case)"


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


# --- test counts -----------------------------------------------------------------------

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


def _counts_in(text: str) -> tuple[int, int] | None:
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


# --- scoring -----------------------------------------------------------------------------


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


# --- running -----------------------------------------------------------------------------


def run_dod(
    dod: DefinitionOfDone,
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path | None = None,
    label: str = "",
    wrap_argv: Callable[[Sequence[str]], list[str]] | None = None,
) -> Verdict:
    """Run the DoD command in `cwd` and judge it; append a readable section to `log_path`.

    `wrap_argv` is the OS sandbox's wrapper (the same one the agent's commands get): the
    DoD runs under the same walls, so it cannot be used to reach what the agent cannot.

    The command's full output (up to `MATCH_HEAD_BYTES + MATCH_TAIL_BYTES` per stream) is
    matched, not just the tails a `ProcResult` carries, so a marker in the middle of a long
    log is still found.
    """
    assertion = parse_assertion(dod.assertion)
    with tempfile.TemporaryDirectory(prefix="code-runner-dod-") as scratch:
        out_path = Path(scratch) / "stdout"
        err_path = Path(scratch) / "stderr"
        started_at = datetime.now(UTC)
        argv = proc.shell_argv(dod.command)
        result = proc.run(
            wrap_argv(argv) if wrap_argv is not None else argv,
            cwd=cwd,
            env=env,
            timeout_s=dod.timeout_s,
            stdout_path=out_path,
            stderr_path=err_path,
        )
        full_out, _ = proc.read_head_tail(out_path, MATCH_HEAD_BYTES, MATCH_TAIL_BYTES)
        full_err, _ = proc.read_head_tail(err_path, MATCH_HEAD_BYTES, MATCH_TAIL_BYTES)
    verdict = judge(assertion, result, stdout=full_out, stderr=full_err)
    if log_path is not None:
        _append_log(log_path, label, dod.command, cwd, started_at, assertion, result, verdict)
    return verdict


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
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8", errors="replace") as f:
        f.write("\n".join(lines))

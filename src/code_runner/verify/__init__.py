"""The definition of done: a command and an assertion, judged into a `Verdict`.

`assertion` holds the grammar and the `DefinitionOfDone` model, `judge` the pure verdict and
the evidence-graded score, `run` the sandboxable run of the command and its log.
"""

from code_runner.verify.assertion import (
    MAX_DOD_TIMEOUT_S,
    Assertion,
    AssertionKind,
    DefinitionOfDone,
    parse_assertion,
)
from code_runner.verify.judge import Verdict, judge, parse_test_counts, score
from code_runner.verify.run import run_dod

__all__ = [
    "MAX_DOD_TIMEOUT_S",
    "Assertion",
    "AssertionKind",
    "DefinitionOfDone",
    "Verdict",
    "judge",
    "parse_assertion",
    "parse_test_counts",
    "run_dod",
    "score",
]

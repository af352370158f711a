"""A task run's record: where its files live, the only writer of them, and their readers.

`paths` names the files of a record; `state` holds the run state table and the reason and
status words; `result.RunResult` is result.json as a versioned value and `load_result` the
one way to read it; `writer.RunRecord` is the only writer (events, status, rounds, result), and
`being_written` says whether a live one holds the record;
`finished` loads and checks a finished record; `views` renders `run.json`, `result.md` and
`eval.md`; `summary` lists many runs.
"""

from code_runner.record.paths import RecordPaths, hunk_markdown
from code_runner.record.result import RunResult, RunUsage, load_result, run_usage
from code_runner.record.skill_review import SkillVerdict
from code_runner.record.state import (
    TERMINAL_STATES,
    TRANSITIONS,
    Reason,
    ResultStatus,
    RunState,
)
from code_runner.record.writer import SCHEMA_VERSION, RunRecord, being_written

__all__ = [
    "SCHEMA_VERSION",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Reason",
    "RecordPaths",
    "ResultStatus",
    "RunRecord",
    "RunResult",
    "RunState",
    "RunUsage",
    "SkillVerdict",
    "being_written",
    "hunk_markdown",
    "load_result",
    "run_usage",
]

"""Guess the experiment type from the command and the files it names.

The type only chooses which advisory checks run, so a wrong guess costs an alert, never a
result; still, an uncertain guess is said to be uncertain so a terminal user can pick. Only
the command's own words and the files it names are read (the seed's "never read files
outside declared scope"), at most 256 KiB of each.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from code_runner.monitor.spec import ExperimentType

_MAX_READ_BYTES = 256 * 1024
_SCRIPT_SUFFIXES = {".py", ".r", ".R", ".sh", ".jl", ".ipynb", ".sql", ".yml", ".yaml"}

# (type, pattern, weight, reason). Command words weigh more than file contents.
_COMMAND_SIGNALS: tuple[tuple[ExperimentType, str, int, str], ...] = (
    (ExperimentType.TRAINING, r"--(epochs?|lr|learning[-_]rate|batch[-_]size|batch)\b", 3, "flag"),
    (ExperimentType.TRAINING, r"\b(train|finetune|fine_tune)\w*", 2, "word"),
    (ExperimentType.TRAINING, r"\b(torchrun|accelerate|deepspeed)\b", 3, "tool"),
    (ExperimentType.ANALYSIS, r"\b(Rscript|R\s+CMD|stata|jupyter\s+nbconvert)\b", 3, "tool"),
    (ExperimentType.ANALYSIS, r"--output[-_]?(table|figure|fig|plot)s?\b", 3, "flag"),
    (ExperimentType.ANALYSIS, r"\b(analy[sz]\w*|regress\w*|stats?)\b", 1, "word"),
    (ExperimentType.ETL, r"\b(dbt|spark-submit|pyspark|airflow)\b", 3, "tool"),
    (ExperimentType.ETL, r"\b(etl|clean\w*|transform\w*|ingest\w*|load_data)\b", 2, "word"),
    (ExperimentType.ETL, r"--input\b.*--output\b|--output\b.*--input\b", 2, "flags"),
    (ExperimentType.SIMULATION, r"--(n[-_]?sims?|iterations|n[-_]?iter|n[-_]?draws)\b", 3, "flag"),
    (ExperimentType.SIMULATION, r"\b(simulat\w*|monte[-_ ]?carlo|bootstrap\w*|mcmc)\b", 2, "word"),
)
_FILE_SIGNALS: tuple[tuple[ExperimentType, str, int, str], ...] = (
    (
        ExperimentType.TRAINING,
        r"^\s*(import|from)\s+(torch|tensorflow|keras|lightning|pytorch_lightning|jax|flax"
        r"|transformers|xgboost|lightgbm|catboost)\b",
        3,
        "import",
    ),
    (ExperimentType.TRAINING, r"\b(epoch|optimizer|\.backward\(\)|model\.fit\()", 1, "code"),
    (
        ExperimentType.ANALYSIS,
        r"^\s*(import|from)\s+(statsmodels|scipy\.stats|linearmodels|sklearn)\b",
        3,
        "import",
    ),
    (
        ExperimentType.ANALYSIS,
        r"^\s*library\((lme4|ggplot2|stats|survival|fixest)\)",
        3,
        "R library",
    ),
    (ExperimentType.ANALYSIS, r"\b(savefig|to_latex|write\.csv)\b", 1, "code"),
    (
        ExperimentType.ANALYSIS,
        r"\b(GridSearchCV|RandomizedSearchCV|HalvingGridSearchCV|cross_val_score)\b",
        3,
        "search",
    ),
    (
        ExperimentType.ETL,
        r"^\s*(import|from)\s+(pyspark|dask|polars|sqlalchemy|duckdb)\b",
        2,
        "import",
    ),
    (ExperimentType.ETL, r"\b(read_csv|read_parquet|to_parquet|to_sql|chunksize)\b", 1, "code"),
    (
        ExperimentType.SIMULATION,
        r"\b(monte[_ ]?carlo|n_sims|n_iterations|bootstrap|rng\.|np\.random)",
        1,
        "code",
    ),
)


@dataclass(frozen=True)
class Detection:
    """The chosen type, why, and whether a second type scored as high (ask the user)."""

    type: ExperimentType
    reasons: tuple[str, ...]
    uncertain: bool
    candidates: tuple[ExperimentType, ...]


def detect_type(command: Sequence[str], cwd: Path) -> Detection:
    """Score each type from command words and named files; the best wins, ties are uncertain."""
    scores: dict[ExperimentType, int] = {}
    reasons: list[str] = []
    command_text = " ".join(command)
    _score(command_text, _COMMAND_SIGNALS, "command", scores, reasons)
    for path in _named_files(command, cwd):
        text = _read_head(path)
        if text:
            _score(text, _FILE_SIGNALS, path.name, scores, reasons)
    if not scores:
        return Detection(ExperimentType.GENERIC, ("no type signals found",), False, ())
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], list(ExperimentType).index(kv[0])))
    best_score = ranked[0][1]
    top = tuple(t for t, s in ranked if s == best_score)
    uncertain = len(top) > 1 or best_score < 2
    candidates = tuple(t for t, _ in ranked[:3])
    return Detection(ranked[0][0], tuple(reasons), uncertain, candidates)


def _score(
    text: str,
    signals: tuple[tuple[ExperimentType, str, int, str], ...],
    where: str,
    scores: dict[ExperimentType, int],
    reasons: list[str],
) -> None:
    for kind, pattern, weight, label in signals:
        m = re.search(pattern, text, re.IGNORECASE | re.MULTILINE)
        if m:
            scores[kind] = scores.get(kind, 0) + weight
            reasons.append(f"{kind.value}: {label} {m.group(0).strip()!r} in {where}")


def _named_files(command: Sequence[str], cwd: Path) -> list[Path]:
    """Script files the command names (also inside a `bash -c` string), relative to cwd."""
    words: list[str] = []
    for arg in command:
        if " " in arg:
            try:
                words.extend(shlex.split(arg))
            except ValueError:
                words.extend(arg.split())
        else:
            words.append(arg)
    found: list[Path] = []
    for word in words:
        if word.startswith("-") or "=" in word:
            continue
        path = Path(word) if Path(word).is_absolute() else cwd / word
        if path.suffix in _SCRIPT_SUFFIXES and path.is_file() and path not in found:
            found.append(path)
    return found[:8]


def _read_head(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_MAX_READ_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""

"""The experiment spec: everything `code-runner exec` was asked to do, validated up front.

Options come from a spec file (`--spec exp.yaml`, YAML, JSON or TOML) and the command line; the
command line wins for single values and adds to lists. Every problem is reported at once, as
one `SpecError`, before anything runs: a bad threshold found after an hour of training is a
lost hour.

Durations accept `90`, `90s`, `30m`, `1h30m`, `1.5h`, `2d`. The check interval must lie in
10..300 s; the lower bound can be lowered (never raised) with the environment variable
`CODE_RUNNER_MIN_INTERVAL_S`, which exists so that tests and demos can check every 50 ms.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from code_runner import tuning
from code_runner.errors import SpecError
from code_runner.monitor.criteria import Criterion, parse_criterion
from code_runner.problems import (
    anchored_path,
    describe_all,
    encodable,
    one_line,
    read_mapping_file,
    single_model,
)
from code_runner.proc import shell_argv

MIN_INTERVAL_ENV = tuning.MIN_INTERVAL_ENV
DEFAULT_MIN_INTERVAL_S = 10.0
MAX_INTERVAL_S = 300.0
DEFAULT_TIMEOUT_S = 30 * 60.0
DEFAULT_INTERVAL_S = 30.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|d|h|m|s)?", re.IGNORECASE)
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, None: 1.0}


class ExperimentType(StrEnum):
    """What kind of work the command does; it decides which type-specific checks run."""

    TRAINING = "training"
    ANALYSIS = "analysis"
    ETL = "etl"
    SIMULATION = "simulation"
    GENERIC = "generic"


def parse_duration(value: object) -> float:
    """Seconds from `90`, `"90s"`, `"30m"`, `"1h30m"`; ValueError with the accepted forms."""
    if isinstance(value, bool):
        raise ValueError("a duration must be a number of seconds or text like 30m")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError("a duration must be a number of seconds or text like 30m")
    text = value.strip().replace(" ", "")
    pos = 0
    total = 0.0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read duration {value!r}; write e.g. 90, 90s, 30m, 1h30m")
        unit = m.group(2).lower() if m.group(2) else None
        total += float(m.group(1)) * _UNIT_S[unit]
        pos = m.end()
    if not text:
        raise ValueError("empty duration; write e.g. 90s or 30m")
    return total


def min_interval_s() -> float:
    """The smallest allowed check interval: 10 s unless the test/demo env var lowers it."""
    value = tuning.min_interval_s()
    return DEFAULT_MIN_INTERVAL_S if value is None else min(value, DEFAULT_MIN_INTERVAL_S)


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _alias(name: str) -> AliasChoices:
    """Spec files and the CLI say `timeout: 30m`; the field says `timeout_s`. Accept both."""
    return AliasChoices(name, f"{name}_s")


class ExperimentSpec(BaseModel):
    """A validated experiment. Immutable: adjusting thresholds makes a new spec."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    command: tuple[str, ...] = Field((), validate_default=True)
    shell: bool = False
    cwd: Path = Field(default_factory=Path.cwd)
    timeout_s: Duration = Field(DEFAULT_TIMEOUT_S, gt=0, validation_alias=_alias("timeout"))
    expect: tuple[str, ...] = ()
    success: tuple[str, ...] = ()
    monitor: tuple[str, ...] = ()
    type: ExperimentType | None = None
    interval_s: Duration = Field(
        DEFAULT_INTERVAL_S, validation_alias=_alias("interval"), validate_default=True
    )
    run_dir: Path | None = None
    grace_s: Duration = Field(10.0, ge=0, le=600, validation_alias=_alias("grace"))
    stall_checks: int = Field(3, ge=1, le=10_000)
    memory_factor: float = Field(3.0, gt=1.0)
    memory_warmup_s: Duration = Field(60.0, ge=0, validation_alias=_alias("memory_warmup"))
    metric: str | None = None
    metric_regex: str | None = None
    patience: int = Field(5, ge=1, le=100_000)
    min_delta: float = Field(0.001, ge=0)
    slow_ratio: float = Field(0.5, gt=0, lt=1)
    progress_total: int | None = Field(None, gt=0)
    notify: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shell_string(cls, data: Any) -> Any:
        """A command written as one string in a spec file is a shell command line."""
        if isinstance(data, dict) and isinstance(data.get("command"), str):
            data = dict(data)
            data["command"] = (data["command"],)
            data.setdefault("shell", True)
        return data

    @field_validator(
        "command", "cwd", "run_dir", "expect", "success", "monitor", "notify", "metric_regex"
    )
    @classmethod
    def _utf8(cls, value: Any) -> Any:
        """Every text that reaches the UTF-8 record (argv, paths) must be writable as UTF-8."""
        for text in value if isinstance(value, tuple) else (value,):
            if text is not None:
                encodable(str(text))
        return value

    @field_validator("command")
    @classmethod
    def _command_present(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or not value[0].strip():
            raise ValueError("no command given; put it after `--`, e.g. exec -- python train.py")
        return value

    @field_validator("success")
    @classmethod
    def _criteria_parse(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            parse_criterion(text)
        return value

    @field_validator("interval_s")
    @classmethod
    def _interval_bounds(cls, value: float) -> float:
        low = min_interval_s()
        if not low <= value <= MAX_INTERVAL_S:
            raise ValueError(
                f"check interval {value:g} s is outside {low:g}..{MAX_INTERVAL_S:g} s; "
                f"pick a value such as 30s (the default)"
            )
        return value

    @field_validator("metric_regex")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"metric regex does not compile: {exc}") from None
        if not compiled.groupindex:
            raise ValueError(
                "metric regex needs named groups: (?P<key>..)(?P<value>..) or one group per "
                "metric such as loss=(?P<loss>[0-9.]+)"
            )
        return value

    @property
    def argv(self) -> tuple[str, ...]:
        """What is executed: the argv exactly as given, or bash -c for a command string."""
        return tuple(shell_argv(self.command[0])) if self.shell else self.command

    @property
    def display_command(self) -> str:
        return self.command[0] if self.shell else shlex.join(self.command)

    def criteria(self) -> tuple[Criterion, ...]:
        """Parsed success criteria; `exit_code == 0` when the user gave none."""
        texts = self.success or ("exit_code == 0",)
        return tuple(parse_criterion(t) for t in texts)


MAX_SPEC_BYTES = 1024 * 1024
_PATH_OPTIONS = ("cwd", "run_dir")


def load_experiment_spec(path: Path) -> dict[str, Any]:
    """Read a YAML, JSON or TOML spec file into plain options; SpecError if it cannot be used.

    Duplicate keys are refused (`stall-checks` and `stall_checks` are the same key), and a
    relative `cwd` or `run_dir` is read from the file's directory.
    """
    data, problems = read_mapping_file(
        path, what="an exec spec", max_bytes=MAX_SPEC_BYTES, empty_ok=True
    )
    if data is None:
        raise SpecError(str(path), problems, fix="check the path given to --spec and the file.")
    options: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in options:
            problems.append(f"duplicate key '{name}' (also written with '-'); keep only one")
        options[name] = value
    for key in _PATH_OPTIONS:
        if isinstance(options.get(key), str):
            try:
                options[key] = str(anchored_path(options[key], path.parent))
            except ValueError as exc:
                problems.append(f"{key}: {exc}")
    if problems:
        raise SpecError(str(path), [one_line(p) for p in problems])
    return options


def build_spec(
    file_options: Mapping[str, Any], cli_options: Mapping[str, Any], *, source: str
) -> ExperimentSpec:
    """Merge file and CLI options (CLI wins, lists add up) and validate them all at once."""
    merged: dict[str, Any] = dict(file_options)
    for key, value in cli_options.items():
        if value is None or value == ():
            continue
        if key in ("expect", "success", "monitor"):
            merged[key] = tuple(_as_list(merged.get(key))) + tuple(value)
        else:
            merged[key] = value
    if cli_options.get("command"):
        merged.pop("shell", None)
    try:
        return ExperimentSpec.model_validate(merged)
    except ValidationError as exc:
        raise SpecError(source, describe_all(exc, model_at=single_model(ExperimentSpec))) from None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]

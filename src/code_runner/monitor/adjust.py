"""Thresholds a person may change while the command runs (alert option C).

Adjusting makes a new, fully validated spec: a typo such as `timeout=soon` is refused with
the same message a bad `--timeout` gets, and the running checks keep their old values.
"""

from __future__ import annotations

from pydantic import ValidationError

from code_runner.errors import CodeRunnerError
from code_runner.monitor.spec import ExperimentSpec

ADJUSTABLE = {
    "timeout": "timeout_s",
    "interval": "interval_s",
    "stall_checks": "stall_checks",
    "memory_factor": "memory_factor",
    "patience": "patience",
    "min_delta": "min_delta",
    "slow_ratio": "slow_ratio",
}
ADJUST_HELP = (
    "Type new settings as key=value, e.g. `timeout=2h stall_checks=6 memory_factor=5` "
    f"(keys: {', '.join(ADJUSTABLE)}); an empty line keeps them."
)


def adjusted_spec(spec: ExperimentSpec, line: str) -> tuple[ExperimentSpec, dict[str, object]]:
    """The spec with `key=value` changes applied, and what changed; ValueError if refused."""
    updates: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        field = ADJUSTABLE.get(key.strip().replace("-", "_"))
        if not sep or field is None:
            raise ValueError(f"not understood: {token!r}. {ADJUST_HELP}")
        updates[field] = value
    try:
        new = ExperimentSpec.model_validate({**spec.model_dump(), **updates})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise ValueError(problems) from None
    except CodeRunnerError as exc:
        raise ValueError(exc.message) from None
    changed = {f: getattr(new, f) for f in updates if getattr(new, f) != getattr(spec, f)}
    return new, changed


def diagnosis(recent_lines: list[str], largest: tuple[tuple[int, str, int], ...]) -> str:
    """What option D shows for a stall or memory alert: last output, biggest processes."""
    lines = ["Last output lines:"]
    lines += [f"  {line}" for line in recent_lines[-10:]] or ["  (none)"]
    lines.append("Processes in the tree (pid, name, RSS):")
    lines += [f"  {pid} {name} {size // 1024 // 1024} MiB" for pid, name, size in largest]
    return "\n".join(lines)

"""The `CODE_RUNNER_*` variables that tune how code-runner works, read and checked in one place.

Each is read when it is used (never at import); unset or empty means the default. A value that
does not parse is a `UsageError` (exit 2) naming the variable and the form it takes, never a
default put in its place without a word: a typo in `CODE_RUNNER_CHECKOUT_CACHE=O` would
otherwise keep four trees on disk for a user who asked for none. `check_all` reads every one of
them, so the CLI refuses a bad value before a command creates anything.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from code_runner.errors import UsageError

CHECKOUT_CACHE_ENV = "CODE_RUNNER_CHECKOUT_CACHE"
CLI_IDLE_TIMEOUT_ENV = "CODE_RUNNER_CLI_IDLE_TIMEOUT_S"
MIN_INTERVAL_ENV = "CODE_RUNNER_MIN_INTERVAL_S"
SANDBOX_RESIDENT_ENV = "CODE_RUNNER_SANDBOX_RESIDENT"
TMUX_ENV = "CODE_RUNNER_TMUX"
WORKSPACE_ENV = "CODE_RUNNER_WORKSPACE"

DEFAULT_CHECKOUT_CACHE = 4
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or None


def _bad(name: str, raw: str, form: str) -> UsageError:
    return UsageError(
        f"${name}={raw!r} is not {form}.",
        fix=f"set {name} to {form}, or unset it for the default.",
    )


def _in_range(name: str, raw: str, form: str, value: float, low: float, high: float) -> None:
    if not math.isfinite(value) or not low <= value <= high:
        raise _bad(name, raw, form)


def whole_number(
    name: str, low: int, high: int, environ: Mapping[str, str] | None = None
) -> int | None:
    """The variable as a whole number in `low..high`, or None when it is unset."""
    raw = _raw(name, environ)
    if raw is None:
        return None
    form = f"a whole number from {low} to {high}"
    try:
        value = int(raw)
    except ValueError:
        raise _bad(name, raw, form) from None
    _in_range(name, raw, form, value, low, high)
    return value


def seconds(
    name: str, low: float, high: float, environ: Mapping[str, str] | None = None
) -> float | None:
    """The variable as a number of seconds in `low..high`, or None when it is unset."""
    raw = _raw(name, environ)
    if raw is None:
        return None
    form = f"a number of seconds from {low:g} to {high:g}"
    try:
        value = float(raw)
    except ValueError:
        raise _bad(name, raw, form) from None
    _in_range(name, raw, form, value, low, high)
    return value


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool | None:
    """The variable as a yes/no switch, or None when it is unset."""
    raw = _raw(name, environ)
    if raw is None:
        return None
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise _bad(name, raw, "one of " + "/".join(_TRUE) + " or " + "/".join(_FALSE))


def choice(
    name: str, choices: tuple[str, ...], environ: Mapping[str, str] | None = None
) -> str | None:
    """The variable as one of `choices` (any case), or None when it is unset."""
    raw = _raw(name, environ)
    if raw is None:
        return None
    if raw.lower() not in choices:
        raise _bad(name, raw, "one of " + ", ".join(choices))
    return raw.lower()


def checkout_cache_entries() -> int:
    """How many checked-out trees the cache keeps (0: no cache)."""
    found = whole_number(CHECKOUT_CACHE_ENV, 0, 1000)
    return DEFAULT_CHECKOUT_CACHE if found is None else found


def cli_idle_timeout_s(environ: Mapping[str, str] | None = None) -> float | None:
    """The idle timeout an agent CLI gets when its backend does not set one."""
    return seconds(CLI_IDLE_TIMEOUT_ENV, 0.5, 86_400, environ)


def min_interval_s() -> float | None:
    """The lowest check interval an experiment may ask for (tests and demos lower it)."""
    return seconds(MIN_INTERVAL_ENV, 0.01, 86_400)


def sandbox_resident() -> bool:
    """Whether one sandbox serves a run's commands (`off`: a sandbox per command)."""
    return choice(SANDBOX_RESIDENT_ENV, ("on", "off")) != "off"


def workspace_clone_only() -> bool:
    """Whether workspaces are always clones (`clone`), never overlays (`auto`, the default)."""
    return choice(WORKSPACE_ENV, ("auto", "clone")) == "clone"


def tmux_default(environ: Mapping[str, str] | None = None) -> bool | None:
    """Whether agent CLIs run in tmux when neither the command nor the backend says."""
    return flag(TMUX_ENV, environ)


def check_all() -> None:
    """Read every tuning variable; the first bad one raises its `UsageError`."""
    checkout_cache_entries()
    cli_idle_timeout_s()
    min_interval_s()
    sandbox_resident()
    workspace_clone_only()
    tmux_default()


__all__ = [
    "CHECKOUT_CACHE_ENV",
    "CLI_IDLE_TIMEOUT_ENV",
    "MIN_INTERVAL_ENV",
    "SANDBOX_RESIDENT_ENV",
    "TMUX_ENV",
    "WORKSPACE_ENV",
    "check_all",
    "checkout_cache_entries",
    "choice",
    "cli_idle_timeout_s",
    "flag",
    "min_interval_s",
    "sandbox_resident",
    "seconds",
    "tmux_default",
    "whole_number",
    "workspace_clone_only",
]

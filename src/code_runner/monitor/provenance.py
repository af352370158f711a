"""What a run needs to be reproduced later: the machine, the interpreter, its packages, seeds.

Written once at the start into `provenance.json` (with the git state the command layer adds:
the commit and a dirty diff of the cwd's repo, in `git.diff`), and shown in the report's
Material Passport block. Package versions are those of the command's own Python, asked with
a short probe, not the monitor's.
"""

from __future__ import annotations

import json
import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from code_runner import proc
from code_runner.monitor.compare import parse_flags
from code_runner.monitor.spec import ExperimentSpec

PACKAGES = (
    "numpy",
    "pandas",
    "scipy",
    "scikit-learn",
    "torch",
    "tensorflow",
    "keras",
    "xgboost",
    "lightgbm",
    "polars",
    "pyarrow",
    "statsmodels",
    "transformers",
)
_PROBE = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "found = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        found[name] = metadata.version(name)\n"
    "    except metadata.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps({'python': sys.version.split()[0], 'executable': sys.executable,"
    " 'packages': found}))\n"
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def python_of(spec: ExperimentSpec, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The command's interpreter and package versions, when the command is Python."""
    program = spec.argv[0]
    if "python" not in Path(program).name:
        return None
    done = proc.capture([program, "-c", _PROBE, *PACKAGES], cwd=spec.cwd, env=env, timeout_s=30.0)
    if not done.ok:
        return {"error": done.stderr.decode(errors="replace")[-300:]}
    try:
        data: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        return None
    return data


def capture(spec: ExperimentSpec, env: Mapping[str, str]) -> dict[str, Any]:
    """Host, CPU, memory, the command's Python and packages, and its seed flags."""
    flags = parse_flags(spec.argv)
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": {"model": _cpu_model(), "count": os.cpu_count()},
        "memory_total_bytes": psutil.virtual_memory().total,
        "python": python_of(spec, env),
        "seeds": {k: v for k, v in flags.items() if "seed" in k.lower()},
    }

"""The project's own environment, as every command in a workspace sees it.

`discover` finds the environment a project's DoD expects: a `.venv` or `venv/` in the
source, else the one active at run time (`VIRTUAL_ENV`, conda's `CONDA_PREFIX`), and the
source's `node_modules`. `overlay` turns it into the variables a command gets: the
environment's `bin` first on `PATH`, `VIRTUAL_ENV`, `NODE_PATH`.

An editable install of the project (`pip install -e .`: an `__editable__*.pth` finder, a
`.pth` path entry, an `.egg-link`) points at the *source* tree. In a workspace that would
make the DoD import the user's working copy, not the workspace's code. So a command run in
another tree gets a `sitecustomize` shim first on `PYTHONPATH` that maps every import path
under the source to the same path under that tree (and any other `sitecustomize` still
runs after it). The source's own DoD (at apply time) needs no shim.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from code_runner import files
from code_runner.task.env import DodEnv

ENV_DIRS = (".venv", "venv")
SHIM_DIR_NAME = "code-runner-python"
_FINDER_PTH = re.compile(r"^import (__editable___[\w.]+_finder)\b")
_MAPPING = re.compile(r"^MAPPING\s*(?::[^=]*)?=\s*(\{.*?\})\s*$", re.MULTILINE | re.DOTALL)

_SHIM = '''\
"""code-runner: the project's editable install resolves to the tree a command runs in."""
import os as _os
import sys as _sys

_FROM = {sources!r}
_TO = {target!r}
_ENTRIES = {entries!r}  # the editable path entries, which `site` skips when it cannot see them


def _map(path):
    if not isinstance(path, str):
        return path
    for src in _FROM:
        if path == src or path.startswith(src + _os.sep):
            return _TO + path[len(src):]
    return path


# the entries go where `site` would have put them: after the environment's own site dirs,
# so a copy of the project in the base interpreter (system site packages) never wins
_prefix = _os.path.realpath(_sys.prefix) + _os.sep
_at = max(
    (i + 1 for i, p in enumerate(_sys.path) if _os.path.realpath(p or ".").startswith(_prefix)),
    default=len(_sys.path),
)
_sys.path[:] = [_map(p) for p in _sys.path]
_sys.path[_at:_at] = [e for e in dict.fromkeys(map(_map, _ENTRIES)) if e not in _sys.path]
for _name, _mod in list(_sys.modules.items()):
    if _name.startswith("__editable___") and _name.endswith("_finder"):
        _mapping = getattr(_mod, "MAPPING", None)
        if isinstance(_mapping, dict):
            for _key, _value in list(_mapping.items()):
                _mapping[_key] = _map(_value)
        _spaces = getattr(_mod, "NAMESPACES", None)
        if isinstance(_spaces, dict):
            for _key, _value in list(_spaces.items()):
                _spaces[_key] = [_map(v) for v in _value]
_sys.path_importer_cache.clear()

_here = _os.path.dirname(_os.path.abspath(__file__))
_saved = _sys.path[:]
_me = _sys.modules.pop("sitecustomize", None)
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
try:
    import sitecustomize  # noqa: F401  (the environment's own, if it has one)
except ImportError:
    pass
finally:
    _sys.path[:] = _saved
    if _me is not None:
        _sys.modules.setdefault("sitecustomize", _me)
'''


@dataclass(frozen=True)
class EditableInstall:
    """One editable install that points into the source: its form, its file, its paths."""

    form: str  # "finder" (__editable__ finder), "pth" (a path entry), "egg-link"
    file: Path
    paths: tuple[Path, ...]


@dataclass(frozen=True)
class ProjectEnv:
    """The environment a project's commands run with, found once per run."""

    source_dir: Path
    prefix: Path | None = None  # a virtualenv or conda root
    origin: str = "none"  # how it was found: ".venv", "venv", "VIRTUAL_ENV", ...
    python: Path | None = None
    node_modules: Path | None = None
    editable: tuple[EditableInstall, ...] = field(default=())
    path_prepend: tuple[Path, ...] = ()  # the spec's env.path_prepend
    variables: tuple[tuple[str, str], ...] = ()  # the spec's env.vars, resolved

    def overlay(
        self, base_env: dict[str, str], tree: Path | None = None, shim_at: Path | None = None
    ) -> dict[str, str]:
        """The variables a command in `tree` gets on top of `base_env`.

        `tree` is the checkout the command runs in; a tree other than the source gets
        the shim (written into `shim_at`) that maps the source's import paths to it.
        """
        env = dict(base_env)
        env.update(self.variables)
        front: list[str] = [str(p) for p in self.path_prepend]
        if self.python is not None:
            front.append(str(self.python.parent))
        if self.prefix is not None:
            front.append(str(self.prefix / "bin"))
            env["VIRTUAL_ENV"] = str(self.prefix)
        if self.node_modules is not None:
            front.append(str(self.node_modules / ".bin"))
            env["NODE_PATH"] = str(self.node_modules)
        if front:
            rest = env.get("PATH", "").split(os.pathsep)
            env["PATH"] = os.pathsep.join(dict.fromkeys([*front, *rest]))
        if tree is not None and shim_at is not None and _real(tree) != _real(self.source_dir):
            shim = write_shim(shim_at, tree, self.source_dir, self.path_entries())
            old = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            env["PYTHONPATH"] = os.pathsep.join([str(shim), *old])
        return env

    def variable_names(self) -> tuple[str, ...]:
        """The variables beyond the sandbox's allowlist that commands must still get."""
        names = [name for name, _ in self.variables]
        return (*names, "NODE_PATH") if self.node_modules is not None else tuple(names)

    def path_entries(self) -> list[str]:
        """The import path entries the editable installs add (not a finder's packages)."""
        found = [p for e in self.editable if e.form != "finder" for p in e.paths]
        return [str(p) for p in dict.fromkeys(found)]

    def describe(self) -> list[str]:
        """What a DoD will see, one line each (for `dry-run`)."""
        missing = " (missing)" if self.python is not None and not self.python.exists() else ""
        lines = [
            f"interpreter: {self.python or 'python on PATH'}{missing}",
            f"environment: {self.prefix or 'none found'} ({self.origin})",
        ]
        if self.node_modules is not None:
            lines.append(f"node_modules: {self.node_modules}")
        if self.path_prepend:
            lines.append("PATH starts with: " + ", ".join(map(str, self.path_prepend)))
        if self.variables:
            lines.append("variables: " + ", ".join(name for name, _ in self.variables))
        if not self.editable:
            lines.append("project import: no editable install of the source found")
        for found in self.editable:
            where = ", ".join(str(p) for p in found.paths)
            lines.append(
                f"project import: editable install ({found.form}, {found.file.name}) of "
                f"{where}, mapped to the workspace"
            )
        return lines


def write_shim(where: Path, tree: Path, source_dir: Path, entries: list[str]) -> Path:
    """Write into `where` the `sitecustomize.py` that maps `source_dir` to `tree`."""
    sources = list(dict.fromkeys([str(source_dir), os.path.realpath(source_dir)]))
    text = _SHIM.format(
        sources=sorted(sources, key=len, reverse=True), target=str(tree), entries=entries
    )
    target = where / "sitecustomize.py"
    with contextlib.suppress(OSError):
        if target.read_text() == text:
            return where
    where.mkdir(parents=True, exist_ok=True)
    # never a half-written shim (a full disk): without it the source's code would be imported
    files.atomic_write_text(target, text, durable=False)
    return where


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _is_env(prefix: Path) -> bool:
    return (prefix / "pyvenv.cfg").is_file() or (prefix / "conda-meta").is_dir()


def _find_prefix(
    source_dir: Path, environ: dict[str, str] | os._Environ[str]
) -> tuple[Path | None, str]:
    for name in ENV_DIRS:
        if _is_env(source_dir / name):
            return source_dir / name, name
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        value = environ.get(var, "")
        if value and os.path.isabs(value) and _is_env(Path(value)):
            return Path(value), var
    return None, "none"


def discover(
    source_dir: Path,
    *,
    environ: dict[str, str] | None = None,
    python: str | None = None,
    path_prepend: Sequence[str] = (),
    variables: Mapping[str, str] | None = None,
) -> ProjectEnv:
    """The project's environment: `python` (a path, or None/"auto" to look), else a `.venv` or
    `venv/` in the source, else the active `VIRTUAL_ENV` or `CONDA_PREFIX`; `path_prepend`
    and `variables` (already resolved) come from the spec's `env` section."""
    env = os.environ if environ is None else environ
    interpreter: Path | None = None
    if python and python != "auto":
        interpreter = Path(python)
        if not interpreter.is_absolute():
            interpreter = source_dir / interpreter
        prefix = interpreter.parent.parent
        origin = "env.python"
        if not _is_env(prefix):
            prefix_found: Path | None = None
        else:
            prefix_found = prefix
    else:
        prefix_found, origin = _find_prefix(source_dir, env)
        if prefix_found is not None:
            for name in ("python", "python3"):
                if (prefix_found / "bin" / name).exists():
                    interpreter = prefix_found / "bin" / name
                    break
    modules = source_dir / "node_modules"
    return ProjectEnv(
        source_dir=source_dir,
        prefix=prefix_found,
        origin=origin,
        python=interpreter,
        node_modules=modules if modules.is_dir() else None,
        editable=editable_installs(prefix_found, source_dir) if prefix_found else (),
        path_prepend=tuple(source_dir / p for p in path_prepend),
        variables=tuple(sorted((variables or {}).items())),
    )


def _site_packages(prefix: Path) -> list[Path]:
    found = sorted(prefix.glob("lib/python*/site-packages"))
    return found + sorted(prefix.glob("lib/site-packages"))


def _under(path: Path, root: Path) -> bool:
    real, top = _real(path), _real(root)
    return real == top or top in real.parents


def editable_installs(prefix: Path, source_dir: Path) -> tuple[EditableInstall, ...]:
    """The editable installs in `prefix` whose paths lie in `source_dir`."""
    found: list[EditableInstall] = []
    for site in _site_packages(prefix):
        for entry in sorted(site.iterdir()):
            item = _read_editable(entry, site, source_dir)
            if item is not None:
                found.append(item)
    return tuple(found)


def _read_editable(entry: Path, site: Path, source_dir: Path) -> EditableInstall | None:
    if entry.suffix not in (".pth", ".egg-link") or not entry.is_file():
        return None
    try:
        lines = entry.read_text(errors="replace").splitlines()
    except OSError:
        return None
    paths: list[Path] = []
    form = "egg-link" if entry.suffix == ".egg-link" else "pth"
    for line in lines:
        line = line.strip()
        finder = _FINDER_PTH.match(line)
        if finder:
            form = "finder"
            paths += _finder_paths(site / f"{finder.group(1)}.py")
        elif line and not line.startswith(("#", "import ")) and os.path.isabs(line):
            paths.append(Path(line))
        if entry.suffix == ".egg-link":
            break  # the first line is the path; the second is relative to it
    mine = tuple(p for p in dict.fromkeys(paths) if _under(p, source_dir))
    return EditableInstall(form, entry, mine) if mine else None


def _finder_paths(module: Path) -> list[Path]:
    """The package paths a setuptools editable finder maps to (its `MAPPING` literal)."""
    try:
        match = _MAPPING.search(module.read_text(errors="replace"))
    except OSError:
        return []
    if match is None:
        return []
    pairs = re.findall(r":\s*(?:'([^']+)'|\"([^\"]+)\")", match.group(1))
    return [Path(a or b) for a, b in pairs]


_NO_MODULE = re.compile(r"No module named '?([\w.]+)'?")


def project_packages(tree: Path, env: ProjectEnv | None = None) -> set[str]:
    """The project's own top-level packages: the tree's (flat or src layout) and what its
    editable finders map."""
    names: set[str] = set()
    for root in (tree, tree / "src"):
        with contextlib.suppress(OSError):
            names.update(p.parent.name for p in root.glob("*/__init__.py"))
    for found in env.editable if env is not None else ():
        if found.form == "finder":
            names.update(p.name for p in found.paths)
    return names


def cannot_start(
    exit_code: int, output: str, packages: set[str], env: ProjectEnv | None
) -> str | None:
    """Why a DoD at base could not even start (a missing command or interpreter, the
    project's own package not importable), or None when its failure is the agent's to fix."""
    if exit_code in (126, 127):
        what = "not found" if exit_code == 127 else "not executable"
        hint = ""
        prefix = _outside_prefix(env)
        if prefix is not None and re.search(r"\bvenv/bin/", output):
            hint = (
                f" (the project's environment is {prefix}, outside the source: write "
                f"the command with `python`, which is {prefix}/bin/python there)"
            )
        return f"the DoD's command or interpreter was {what} (exit {exit_code}){hint}"
    for name in _NO_MODULE.findall(output):
        if name in packages:
            where = f"the environment {env.prefix}" if env and env.prefix else "no environment"
            return f"the DoD could not import the project's own package {name!r} ({where})"
    return None


def _outside_prefix(env: ProjectEnv | None) -> Path | None:
    """The environment's prefix when it lies outside the source (a relative `.venv/bin/...`
    in a DoD cannot name it), else None."""
    if env is None or env.prefix is None or _under(env.prefix, env.source_dir):
        return None
    return env.prefix


START_FIX = (
    "give the DoD the project's environment: a `.venv` or `venv/` in the source with the "
    "project installed (`python -m venv .venv && .venv/bin/pip install -e .`), or run with "
    "VIRTUAL_ENV (or CONDA_PREFIX) set to one; `code-runner dry-run SPEC` shows what the DoD "
    "will see."
)


def from_section(source_dir: Path, section: DodEnv) -> ProjectEnv:
    """The project's environment as a spec's `env` section asks for it, `$NAME`s resolved."""
    return discover(
        source_dir,
        python=section.python,
        path_prepend=section.path_prepend,
        variables=section.resolved_vars(),
    )

"""The layer rule, read from the source with `ast` (nothing is imported).

A package is a list of layers, lowest first. A module may import from its own layer or below;
groups "beside" the stack may import only the layers named for them and be imported only by the
groups named for them. Imports under `if TYPE_CHECKING:` do not count; imports inside functions
do. Three kinds of problem: an import cycle between modules, an import that points up the layer
order, and a module importing the face (`__init__`) of a package it belongs to.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Beside:
    """A group outside the stack: what it may import, and who may import it."""

    imports: frozenset[int]
    imported_by: frozenset[str]


@dataclass(frozen=True)
class Layers:
    stack: Sequence[frozenset[str]]  # layer 1 first
    beside: Mapping[str, Beside]

    def number(self, group: str) -> int | None:
        return next((i for i, names in enumerate(self.stack, 1) if group in names), None)

    def describe(self, group: str) -> str:
        number = self.number(group)
        return f"layer {number}: {group}" if number else f"{group}, beside the stack"

    def allows(self, importer: str, imported: str) -> bool:
        if importer == imported:
            return True
        if importer in self.beside:
            return self.number(imported) in self.beside[importer].imports
        if imported in self.beside:
            return importer in self.beside[imported].imported_by
        mine, theirs = self.number(importer), self.number(imported)
        return mine is not None and theirs is not None and theirs <= mine


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    importer: str  # dotted module names
    imported: str

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root.parent)}:{self.line}"


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module under `package_dir` (a package's face is its name)."""
    found: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _typing_only(tree: ast.AST) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return hidden


def _targets(mods: Mapping[str, Path], current: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules of the package an import statement names (a submodule, else its package)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in mods}
    base = node.module or ""
    if node.level:
        package = current.split(".")
        if mods[current].name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    found = set()
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        found.add(submodule if submodule in mods else base)
    return {name for name in found if name in mods}


def imports(package_dir: Path) -> Iterator[Import]:
    """Every import of a module of the package by a module of the package, in file order."""
    mods = modules(package_dir)
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        hidden = _typing_only(tree)
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        for node in sorted(nodes, key=lambda n: n.lineno):
            if id(node) in hidden:
                continue
            for target in sorted(_targets(mods, name, node)):
                if target != name:
                    yield Import(path, node.lineno, name, target)


def _group(module: str) -> str | None:
    """The top-level package or module under the root a module belongs to (None: the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward(package_dir: Path, layers: Layers) -> list[str]:
    """Imports that point up the layer order (or into a group beside the stack)."""
    problems = []
    for found in imports(package_dir):
        importer, imported = _group(found.importer), _group(found.imported)
        if importer is None or imported is None or layers.allows(importer, imported):
            continue
        problems.append(
            f"{found.where(package_dir)}: {found.importer} ({layers.describe(importer)}) imports "
            f"{found.imported} ({layers.describe(imported)}), which its layer may not import"
        )
    return problems


def own_faces(package_dir: Path) -> list[str]:
    """Imports of the face of a package the importing module belongs to (not the root's)."""
    mods = modules(package_dir)
    problems = []
    for found in imports(package_dir):
        inside = found.importer.startswith(found.imported + ".")
        is_face = mods[found.imported].name == "__init__.py"
        if inside and is_face and "." in found.imported:
            problems.append(
                f"{found.where(package_dir)}: {found.importer} imports its own package's face "
                f"{found.imported}; import the sibling module directly"
            )
    return problems


def cycles(package_dir: Path) -> list[str]:
    """Each import cycle between modules, with the imports that close it."""
    edges: dict[str, dict[str, Import]] = {m: {} for m in modules(package_dir)}
    for found in imports(package_dir):
        edges[found.importer].setdefault(found.imported, found)
    problems = []
    for component in _strongly_connected(edges):
        inside = [
            edges[a][b] for a in sorted(component) for b in sorted(edges[a]) if b in component
        ]
        lines = [f"  {i.where(package_dir)}: {i.importer} -> {i.imported}" for i in inside]
        problems.append(
            "import cycle: " + " <-> ".join(sorted(component)) + "\n" + "\n".join(lines)
        )
    return problems


def _reachable(edges: Mapping[str, Mapping[str, object]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(edges[start])
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(edges[node])
    return seen


def _strongly_connected(edges: Mapping[str, Mapping[str, object]]) -> list[set[str]]:
    """Sets of modules that all reach each other (a package has a few hundred: brute force)."""
    reach = {node: _reachable(edges, node) for node in edges}
    found: list[set[str]] = []
    for node in edges:
        if any(node in component for component in found):
            continue
        component = {node} | {other for other in reach[node] if node in reach[other]}
        if len(component) > 1:
            found.append(component)
    return found

"""Each package's face (`__init__.py`) names its surface exactly: `__all__` lists every public
name the face binds, and every name in it exists (httpx's tests/test_exported_members.py)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
FACES = sorted(SRC.glob("code_runner/**/__init__.py"))


def _module(face: Path) -> str:
    return ".".join(face.parent.relative_to(SRC).parts)


def _bound_names(tree: ast.Module, module: ModuleType) -> set[str]:
    """What the face itself adds to the package's surface: names it re-exports from
    code_runner (a module imported whole is a namespace, not a re-export), and its own
    defs, classes and assignments. Standard-library imports are the face's own business."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("code_runner"):
            bound = {a.asname or a.name for a in node.names}
            names |= {n for n in bound if not isinstance(getattr(module, n, None), ModuleType)}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _public(names: set[str]) -> set[str]:
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("face", FACES, ids=_module)
def test_all_is_exactly_the_public_names_the_face_binds(face: Path) -> None:
    tree = ast.parse(face.read_text())
    module = importlib.import_module(_module(face))
    declared = set(getattr(module, "__all__", ()))
    bound = _public(_bound_names(tree, module))
    assert not bound - declared, f"{face}: public but not in __all__: {sorted(bound - declared)}"
    missing = sorted(n for n in declared if not hasattr(module, n))
    assert not missing, f"{face}: in __all__ but not defined: {missing}"
    assert len(declared) == len(getattr(module, "__all__", ())), f"{face}: __all__ repeats a name"

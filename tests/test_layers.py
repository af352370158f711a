"""The layer order of docs/architecture.md, made executable: read from the source, nothing runs.

A module imports only from its own layer or below, never its own package's face, and no
import cycle exists between modules. `monitor` stands beside the stack: it imports only
layer 1, and only the CLI imports it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.layers import Beside, Layers, cycles, imports, own_faces, upward

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "code_runner"


def _layers_of_the_doc() -> Layers:
    """The layer list written in docs/architecture.md, as the checker's `Layers`."""
    spec = importlib.util.spec_from_file_location(
        "gen_module_map", ROOT / "scripts/gen_module_map.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    named: dict[str, str] = module.read_layers((ROOT / "docs/architecture.md").read_text())
    numbers = sorted({int(layer) for layer in named.values() if layer.isdigit()})
    assert numbers == list(range(1, len(numbers) + 1)), f"layers must be numbered 1..N: {numbers}"
    stack = [frozenset(unit for unit, layer in named.items() if layer == str(n)) for n in numbers]
    top = stack[-1]
    stack.append(frozenset({"__main__"}))  # `python -m code_runner`: the console entry point
    # only the commands' layer (the top one) may use what stands beside the stack
    beside = {
        unit: Beside(imports=frozenset({1}), imported_by=top)
        for unit, layer in named.items()
        if layer == "beside"
    }
    return Layers(stack=stack, beside=beside)


LAYERS = _layers_of_the_doc()


def test_the_doc_names_the_layers_this_test_was_written_for() -> None:
    assert LAYERS.stack[0] >= {"errors", "events", "proc", "files", "dirs", "clock", "problems"}
    assert "monitor" in LAYERS.beside and "cli" in LAYERS.stack[-2]


def test_the_module_map_in_the_doc_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_module_map.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_every_top_level_package_has_a_place() -> None:
    groups = {p.stem for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    placed = set().union(*LAYERS.stack) | set(LAYERS.beside) | {"__init__"}
    assert groups <= placed, f"not in any layer, add to LAYERS: {sorted(groups - placed)}"


def test_no_import_points_up_the_layers() -> None:
    problems = upward(SRC, LAYERS)
    assert not problems, "\n".join(problems)


def test_no_module_imports_its_own_package_face() -> None:
    problems = own_faces(SRC)
    assert not problems, "\n".join(problems)


def test_no_import_cycle() -> None:
    problems = cycles(SRC)
    assert not problems, "\n".join(problems)


# -- the checker itself, on a small package made for it --------------------------------------


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


TOY = Layers(
    stack=[frozenset({"low"}), frozenset({"mid"}), frozenset({"high"})],
    beside={"side": Beside(imports=frozenset({1}), imported_by=frozenset({"high"}))},
)


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    return _package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "def f():\n    from pkg import mid  # up, and closes a cycle\n",
            "mid.py": "from pkg.low import f\n",
            "high.py": "import pkg.mid\nfrom pkg import side\n",
            "side.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg import high  # typing only: ignored\n"
            "from pkg import low\n",
            "sub/__init__.py": "from pkg.sub.a import A\n",
            "sub/a.py": "A = 1\n",
            "sub/b.py": "from pkg.sub import A  # its own face\nfrom . import a\n",
        },
    )


def test_checker_reads_every_kind_of_import(toy: Path) -> None:
    found = {(i.importer, i.imported, i.line) for i in imports(toy)}
    assert ("pkg.low", "pkg.mid", 2) in found  # inside a function
    assert ("pkg.high", "pkg.mid", 1) in found  # import a.b
    assert ("pkg.sub.b", "pkg.sub.a", 2) in found  # relative
    assert not any(i == "pkg.side" and t == "pkg.high" for i, t, _ in found)  # TYPE_CHECKING


def test_checker_finds_a_cycle_and_names_its_imports(toy: Path) -> None:
    (problem,) = cycles(toy)
    assert problem.startswith("import cycle: pkg.low <-> pkg.mid")
    assert "pkg/low.py:2: pkg.low -> pkg.mid" in problem
    assert "pkg/mid.py:1: pkg.mid -> pkg.low" in problem


def test_checker_finds_an_upward_import_and_names_the_layers(toy: Path) -> None:
    problems = upward(toy, TOY)
    assert problems == [
        "pkg/low.py:2: pkg.low (layer 1: low) imports pkg.mid (layer 2: mid), "
        "which its layer may not import"
    ]


def test_checker_keeps_a_group_beside_the_stack_apart(toy: Path) -> None:
    (toy / "mid.py").write_text("from pkg.low import f\nfrom pkg import side\n")
    (toy / "side.py").write_text("from pkg import mid\n")
    problems = upward(toy, TOY)
    assert "pkg/mid.py:2: pkg.mid (layer 2: mid) imports pkg.side (side, beside the stack)" in (
        "\n".join(problems)
    )
    assert "pkg/side.py:1: pkg.side (side, beside the stack) imports pkg.mid (layer 2: mid)" in (
        "\n".join(problems)
    )


def test_checker_finds_a_module_importing_its_own_face(toy: Path) -> None:
    assert own_faces(toy) == [
        "pkg/sub/b.py:1: pkg.sub.b imports its own package's face pkg.sub; "
        "import the sibling module directly"
    ]

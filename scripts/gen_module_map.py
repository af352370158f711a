"""Write the module map in docs/architecture.md from the modules' own docstrings.

The layer list is written once, in docs/architecture.md between the `layers` markers; this
script reads it (so does tests/test_layers.py) and regenerates the table between the
`module map` markers: every package and module, its layer, and the first sentence of its
docstring. A module without a docstring, or one no layer names, is an error.

python scripts/gen_module_map.py          # rewrite the table
python scripts/gen_module_map.py --check  # exit 1 if the table is out of date
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "code_runner"
LAYERS_BEGIN, LAYERS_END = "<!-- layers: begin -->", "<!-- layers: end -->"
MAP_BEGIN, MAP_END = "<!-- module map: begin -->", "<!-- module map: end -->"
BESIDE = "beside"


def read_layers(doc: str) -> dict[str, str]:
    """Top-level unit (module or package) -> layer label, from the doc's layer list.

    Each line of the list reads `N. label: unit, unit, ...` (`N` a number, or the word
    `beside` for units that stand beside the stack).
    """
    block = doc.split(LAYERS_BEGIN, 1)[1].split(LAYERS_END, 1)[0]
    layers: dict[str, str] = {}
    for line in block.splitlines():
        found = re.match(r"^\s*[-*]?\s*(\d+|beside)\.?\s+[^:]*:\s*(.+)$", line)
        if not found:
            continue
        for unit in found.group(2).split(","):
            name = unit.strip().strip("`").rstrip("/")
            if name:
                layers[name] = found.group(1)
    return layers


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text()))
    if not doc:
        where = path.relative_to(ROOT)
        raise SystemExit(f"{where} has no docstring: write one line saying what it is")
    first = " ".join(doc.split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=[.])\s", first, maxsplit=1)[0]
    return sentence.rstrip(".").replace("|", "\\|")


def render_map(layers: dict[str, str]) -> str:
    rows = ["| module | layer | what it is |", "| --- | --- | --- |"]
    files = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__main__.py")
    for path in files:
        rel = path.relative_to(PACKAGE)
        parts = rel.with_suffix("").parts
        if parts == ("__init__",):
            continue
        unit = parts[0]
        if unit not in layers:
            raise SystemExit(f"{rel}: `{unit}` is in no layer of {DOC.relative_to(ROOT)}")
        name = "/".join(parts[:-1]) + "/" if parts[-1] == "__init__" else "/".join(parts) + ".py"
        rows.append(f"| `{name}` | {layers[unit]} | {_summary(path)} |")
    return "\n".join(rows)


def render(doc: str) -> str:
    head, rest = doc.split(MAP_BEGIN, 1)
    _, tail = rest.split(MAP_END, 1)
    return f"{head}{MAP_BEGIN}\n{render_map(read_layers(doc))}\n{MAP_END}{tail}"


def main() -> int:
    doc = DOC.read_text()
    text = render(doc)
    if "--check" in sys.argv:
        if text != doc:
            print(
                "the module map in docs/architecture.md is out of date: "
                "run python scripts/gen_module_map.py",
                file=sys.stderr,
            )
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

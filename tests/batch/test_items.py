"""ITEMS read whole: a directory of specs, a JSONL of specs, a sweep file; every problem at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from code_runner.batch import ItemKind, load_items
from code_runner.errors import SpecError


def spec(task_id: str, **extra: object) -> dict[str, object]:
    return {"task_id": task_id, "cwd": "repo", "prompt": "p", **extra}


def test_a_directory_of_specs_gives_one_item_each_anchored_in_the_directory(tmp_path: Path) -> None:
    for name in ("b", "a"):
        (tmp_path / f"{name}.json").write_text(json.dumps(spec(name)))
    (tmp_path / "a.script.json").write_text("{}")  # a scripted backend's script: not a spec
    batch = load_items(tmp_path)
    assert [i.item_id for i in batch.items] == ["a", "b"]
    assert batch.items[0].source == str(tmp_path / "repo")
    assert batch.items[0].base_dir == str(tmp_path)
    assert not batch.sweep


def test_a_jsonl_of_specs(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(
        json.dumps(spec("x")) + "\n\n" + json.dumps(spec("y", apply_to_source=True)) + "\n"
    )
    batch = load_items(path)
    assert [(i.item_id, i.writes_source) for i in batch.items] == [("x", False), ("y", True)]


def test_a_sweep_is_one_exec_item_per_cell(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "command: python train.py --lr {lr} --seed {seed}\n"
        "grid: {lr: [0.1, 0.2], seed: [1, 2, 3]}\ntimeout: 5m\n"
    )
    batch = load_items(path)
    assert batch.sweep and len(batch.items) == 6
    first = batch.items[0]
    assert first.kind is ItemKind.EXEC
    assert first.spec["argv"] == ["python", "train.py", "--lr", "0.1", "--seed", "1"]
    assert first.spec["cwd"] == str(tmp_path)
    assert first.item_id == "000-lr=0.1,seed=1"


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(
        "\n".join([json.dumps(spec("x")), json.dumps(spec("x")), "{not json", json.dumps({})])
    )
    with pytest.raises(SpecError) as caught:
        load_items(path)
    text = caught.value.render()
    assert "line 3: not JSON" in text
    assert "line 4: no task_id" in text
    assert "'x' is used 2 times" in text


def test_a_sweep_template_naming_an_unknown_parameter(tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"command": "run --x {x} --y {y}", "grid": {"x": [1]}}))
    with pytest.raises(SpecError, match="'y'"):
        load_items(path)


def test_import_code_runner_never_imports_ray() -> None:
    probe = (
        "import sys, code_runner, code_runner.batch, code_runner.cli.batch_cmd\n"
        "print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"

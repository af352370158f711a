"""A generated plan corpus through the real CLI: an answer and an exit code, never a traceback."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.plans.helpers import cli, plan_data

pytestmark = pytest.mark.integration

tricky: st.SearchStrategy[str] = st.sampled_from(
    ["", " ", "P0", "P1", "P31", "P1000", "edit", "add", "rename", "cmd", "check", ".git/x",
     "src/.GIT", "a//b", "../x", "/abs", "src/app.py", "x" * 400, "\u202e", "echo 'a", "a;b",
     "&a", "*a", "!!str", "<<", "yes", "0x1", ".nan", None, True, 3, -1, 1.5, [], {}]
)  # fmt: skip
values = st.recursive(
    tricky | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6,
)  # fmt: skip


def mutate(data: Any, rng: random.Random, value: Any) -> Any:
    """Replace one node of the plan (at a random depth) by `value`."""
    if isinstance(data, dict) and data and rng.random() < 0.8:
        key = rng.choice(list(data))
        data[key] = mutate(data[key], rng, value)
        return data
    if isinstance(data, list) and data and rng.random() < 0.8:
        index = rng.randrange(len(data))
        data[index] = mutate(data[index], rng, value)
        return data
    return value


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32), values, st.sampled_from([".json", ".yaml", ".txt"]),
       st.sampled_from(["", "&a ", "!!python/object:os.system ", "*x ", "<<: "]))  # fmt: skip
def test_generated_plans_never_give_a_traceback(seed: int, value: Any, suffix: str,
                                                noise: str) -> None:  # fmt: skip
    data = mutate(plan_data(), random.Random(seed), value)
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data)
    if noise and suffix != ".json":
        lines = text.splitlines()
        at = random.Random(seed).randrange(len(lines))
        lines[at] = lines[at].replace(": ", ": " + noise, 1)
        text = "\n".join(lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"plan{suffix}"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        done = cli("plan", "validate", str(path), "--json", cwd=Path(tmp))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 2), done.stderr
    if done.stdout:
        assert json.loads(done.stdout)["valid"] is (done.returncode == 0)

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

from tests.helpers.git import make_repo
from tests.helpers.plan_data import BASE_FILES, cli, file, item, plan_data

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


# --- one defect at a time: exactly one clear message ------------------------------------

GIT_NAMES = [".git", "git~1"]
YAML_FEATURES = {
    "anchor": ("title: &a Item", "anchors are not allowed"),
    "alias": ("title: *a", "aliases are not allowed"),
    "tag": ("title: !!str Item", "tags are not allowed"),
    "merge": ("<<: {title: x}", "a merge key"),
    "document": ("---", "a second YAML document"),
    "duplicate": ("id: P9", "duplicate key"),
}


@st.composite
def git_spellings(draw: st.DrawFn) -> str:
    """`.git` (or its 8.3 name) in any case, with the dots, spaces and NTFS stream suffixes
    that Windows and macOS strip, at any depth."""
    name = draw(st.sampled_from(GIT_NAMES))
    cased = "".join(c.upper() if draw(st.booleans()) else c for c in name)
    tail = draw(st.sampled_from(["", ".", " ", ". .", "..", "::$INDEX_ALLOCATION"]))
    depth = draw(st.lists(st.sampled_from(["src", "a b", "docs", "x.y"]), max_size=2))
    below = draw(st.sampled_from(["", "/config", "/hooks/pre-commit", "/x"]))
    return "/".join([*depth, cased + tail]) + below


@st.composite
def defects(draw: st.DrawFn) -> tuple[str, Any, str]:
    """(kind, the defect's parameters, the phrase its one message must contain)."""
    kind = draw(st.sampled_from(["cycle", "git", "yaml", "argv"]))
    if kind == "cycle":
        size = draw(st.integers(3, 6))
        low = draw(st.integers(1, size - 1))
        high = draw(st.integers(low + 1, size))
        return kind, (size, low, high), f"P{high} runs later"
    if kind == "git":
        return (
            kind,
            (draw(git_spellings()), draw(st.sampled_from(["edit", "add", "delete", "rename"]))),
            "git's own",
        )
    if kind == "yaml":
        feature = draw(st.sampled_from(sorted(YAML_FEATURES)))
        return kind, (feature, draw(st.integers(0, 2))), YAML_FEATURES[feature][1]
    words = draw(
        st.lists(st.text("abcxyz019-_./=", min_size=1, max_size=8), min_size=1, max_size=4)
    )
    quoted = draw(st.sampled_from(["", "a;b", "$(id)", "x > y", "*", "`id`"]))
    return kind, ["prog", *words, *([quoted] if quoted else [])], "not approved"


def _with_cycle(size: int, low: int, high: int) -> dict[str, Any]:
    """P`low` depends on P`high` (a later item), which depends back down to P`low`."""
    items = [item(n, [file("src/app.py")]) for n in range(1, size + 1)]
    for n in range(low + 1, high + 1):
        items[n - 1]["depends_on"] = [f"P{n - 1}"]
    items[low - 1]["depends_on"] = [f"P{high}"]
    return plan_data(*items)


def _with_git_path(path: str, kind: str) -> dict[str, Any]:
    if kind == "rename":
        return plan_data(item(1, [file("src/new.py", "rename", path)]))
    return plan_data(item(1, [file(path, kind)]))


def _with_yaml(feature: str, at: int) -> str:
    text = yaml.safe_dump(plan_data(), sort_keys=False)
    line, _ = YAML_FEATURES[feature]
    lines = text.splitlines()
    starts = [i for i, text_line in enumerate(lines) if text_line.startswith("- id: P")]
    where = starts[at] + 1
    indent = "" if feature == "document" else "  "
    lines.insert(where, indent + line)
    return "\n".join(lines) + "\n"


def _show(argv: list[str]) -> str:
    return " ".join(f"'{w}'" if any(c in w for c in ";$>*`") else w for w in argv)


@pytest.fixture(scope="module")
def base_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("fuzz") / "repo", BASE_FILES)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(defects())
def test_each_kind_of_defect_gets_exactly_one_clear_message(
    base_repo: Path, defect: tuple[str, Any, str]
) -> None:
    kind, params, phrase = defect
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("plan.yaml" if kind == "yaml" else "plan.json")
        if kind == "argv":
            data = plan_data(item(1, [file("src/app.py")], cmd=_show(params)))
            path.write_text(json.dumps(data))
            approved = json.dumps(["python", "-m", "pytest", "-q"])
            done = cli("plan", "run", str(path), "--source", str(base_repo), "--backend",
                       "scripted:none.json", "--allow-cmd", approved, cwd=Path(tmp))  # fmt: skip
            assert done.returncode == 2, done.stderr
            assert "Traceback" not in done.stderr
            assert phrase in done.stderr and "--allow-cmd" in done.stderr
            assert json.dumps(params) in done.stderr  # the exact argv, as it is approved
            return
        if kind == "cycle":
            path.write_text(json.dumps(_with_cycle(*params)))
        elif kind == "git":
            path.write_text(json.dumps(_with_git_path(*params)))
        else:
            path.write_text(_with_yaml(*params))
        done = cli("plan", "validate", str(path), "--source", str(base_repo), "--json",
                   cwd=Path(tmp))  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stdout + done.stderr
    found = json.loads(done.stdout)["problems"]
    assert len(found) == 1 and phrase in found[0], found

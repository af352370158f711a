"""The plan subset of YAML and JSON: the same data either way, every risky feature refused."""

from __future__ import annotations

import json

import pytest
import yaml

from code_runner.plans.document import MAX_DEPTH, MAX_PLAN_BYTES, parse_plan_text
from tests.helpers.plan_data import plan_data


def test_equivalent_json_and_yaml_give_the_same_data() -> None:
    data = plan_data()
    from_json, problems_json = parse_plan_text(json.dumps(data), ".json")
    from_yaml, problems_yaml = parse_plan_text(yaml.safe_dump(data), ".yaml")
    assert problems_json == problems_yaml == []
    assert from_json == from_yaml == data


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &x 1\nb: 2\n", "anchor"),
        ("a: &x [1]\nb: *x\n", "anchor"),
        ("b: *x\n", "alias"),
        ("a: {x: 1}\nb:\n  <<: {x: 1}\n", "merge key"),
        ("a: !!str 1\n", "tag"),
        ("a: !custom 1\n", "tag"),
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("a: 1\n'a': 2\n", "duplicate key 'a'"),
        ("a: 1\n---\nb: 2\n", "second YAML document"),
        ("a:\n", "empty value"),
        ("a: .nan\n", "would be read as a number"),
        ("a: .inf\n", "would be read as a number"),
        ("a: 0x1F\n", "would be read as a number"),
        ("a: 1_000\n", "would be read as a number"),
        ("a: yes\n", "would be read as true or false"),
        ("a: ~\n", "would be read as null"),
        ("? [a]\n: 1\n", "complex key"),
        ("1: a\n", "is not a string"),
        ("a: [1, 2\n", "YAML syntax error"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": NaN}', "NaN is not a number"),
        ('{"a": 1e999}', "finite number"),
        ('{"a": ', "JSON syntax error"),
    ],
)
def test_each_risky_feature_gets_one_clear_problem(text: str, expected: str) -> None:
    data, problems = parse_plan_text(text, ".json" if text.startswith("{") else ".yaml")
    assert data is None
    assert len(problems) == 1
    assert expected in problems[0]


def test_quoted_punctuation_and_plain_dates_stay_text() -> None:
    data, problems = parse_plan_text("a: '<<'\nb: 'x &y *z'\nc: 2024-01-01\nd: 'yes'\n", ".yaml")
    assert problems == []
    assert data == {"a": "<<", "b": "x &y *z", "c": "2024-01-01", "d": "yes"}


def test_depth_and_size_limits() -> None:
    deep_yaml = "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n"
    deep_json = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    for text, suffix in ((deep_yaml, ".yaml"), (deep_json, ".json")):
        data, problems = parse_plan_text(text, suffix)
        assert data is None and "deeper than 50" in problems[0]
    data, problems = parse_plan_text("a: " + "x" * MAX_PLAN_BYTES, ".yaml")
    assert data is None and "split the plan" in problems[0]

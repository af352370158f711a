"""The shared reader of input files and wording of problems, as each consumer relies on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from code_runner import config, problems
from code_runner.errors import SpecError


class _Flat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(1.0, validation_alias=AliasChoices("timeout", "timeout_s"))
    model: str = "m"


def _lines(data: dict[str, object], at: tuple[int | str, ...] = ()) -> list[str]:
    with pytest.raises(ValidationError) as info:
        _Flat.model_validate(data)
    return problems.describe_all(info.value, model_at=problems.single_model(_Flat), at=at)


def test_unknown_fields_are_named_as_written_with_did_you_mean() -> None:
    assert _lines({"timout": 1}) == ["unknown field 'timout'; did you mean 'timeout'?"]
    assert _lines({"zzz": 1}) == ["unknown field 'zzz'; remove it (valid fields: timeout, model)"]


def test_at_places_every_field_in_its_file() -> None:
    assert _lines({"modle": "x", "model": 3}, at=("backends", "local")) == [
        "backends.local.model: expected a string, got a whole number 3; put it in quotes",
        "unknown field 'backends.local.modle'; did you mean 'backends.local.model'?",
    ]


def test_unknown_names_of_other_kinds_read_the_same() -> None:
    assert problems.unknown("kind", "codex", ["codex-cli"], otherwise="x") == (
        "unknown kind 'codex'; did you mean 'codex-cli'?"
    )
    assert problems.unknown("kind", "z" * 100, ["a"], otherwise="use a") == (
        f"unknown kind '{'z' * 57}...'; use a"
    )


@pytest.mark.parametrize(
    ("text", "limit", "marker", "clipped"),
    [("abcdef", 6, "...", "abcdef"), ("abcdefg", 6, "...", "abc..."), ("abcdefg", 3, "", "abc")],
)
def test_clip_fits_the_marker_in_the_limit(
    text: str, limit: int, marker: str, clipped: str
) -> None:
    assert problems.clip(text, limit, marker=marker) == clipped


def test_anchored_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert problems.anchored_path("a/../b", tmp_path) == tmp_path / "b"
    assert problems.anchored_path("/x/y", tmp_path) == Path("/x/y")
    assert problems.anchored_path("~/s.json", tmp_path) == tmp_path / "home/s.json"
    monkeypatch.chdir(tmp_path)
    assert problems.anchored_path("c", None) == tmp_path / "c"
    for bad, needle in (("  ", "is empty; give a path"), ("a\0b", "NUL byte")):
        with pytest.raises(ValueError, match=needle):
            problems.anchored_path(bad, tmp_path)


def test_read_mapping_file_format_and_empty(tmp_path: Path) -> None:
    named = tmp_path / "settings"  # no suffix: the caller names the format
    named.write_text("[budget]\nturns_per_round = 3\n")
    assert problems.read_mapping_file(named, what="x", max_bytes=100, fmt="toml") == (
        {"budget": {"turns_per_round": 3}},
        [],
    )
    empty = tmp_path / "e.yaml"
    empty.write_text("# nothing yet\n")
    assert problems.read_mapping_file(empty, what="x", max_bytes=100, empty_ok=True) == ({}, [])
    data, found = problems.read_mapping_file(empty, what="x", max_bytes=100)
    assert data is None and found == ["the file is empty; write x"]


def test_config_file_problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "code-runner.toml").write_text("")
    assert config.load_config(tmp_path).source == tmp_path / "code-runner.toml"
    monkeypatch.setenv(config.CONFIG_ENV, str(tmp_path / "absent.toml"))
    with pytest.raises(SpecError, match="the file does not exist") as info:
        config.load_config(tmp_path)
    assert config.CONFIG_ENV in (info.value.fix or "")
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * config.MAX_CONFIG_BYTES)
    monkeypatch.setenv(config.CONFIG_ENV, str(big))
    with pytest.raises(SpecError, match=f"is at most {config.MAX_CONFIG_BYTES} bytes"):
        config.load_config(tmp_path)

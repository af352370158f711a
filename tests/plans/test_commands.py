"""The cmd tokenizer (no shell, no escapes) and who may approve an argv: only the user."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_runner.plans.commands import CommandSyntax, tokenize, user_approvals


@pytest.mark.parametrize(
    ("text", "argv"),
    [
        ("python -m pytest -q", ["python", "-m", "pytest", "-q"]),
        ('echo ""', ["echo", ""]),
        ("echo 'a b'", ["echo", "a b"]),
        ('ab" cd"', ["ab cd"]),
        ("echo 'a;b|c>d'", ["echo", "a;b|c>d"]),
        ('echo "$HOME"', ["echo", "$HOME"]),
        ("  pytest   -q ", ["pytest", "-q"]),
    ],
)
def test_tokenizer_fixtures(text: str, argv: list[str]) -> None:
    assert tokenize(text) == argv


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("echo a\\ b", "backslash"),
        ("echo 'open", "unclosed"),
        ("echo a\tb", "tab"),
        ("echo a\nb", "newline"),
        ("pytest; rm -rf /", "';' outside quotes"),
        ("echo $HOME", "'$' outside quotes"),
        ("ls *.py", "'*' outside quotes"),
        ("cat ~/x", "'~' outside quotes"),
        ("", "is empty"),
        ("''", "empty program"),
        ("echo \x00", "control"),
    ],
)
def test_tokenizer_refusals(text: str, expected: str) -> None:
    with pytest.raises(CommandSyntax, match=None) as caught:
        tokenize(text)
    assert expected in str(caught.value)


def test_approvals_come_from_flags_and_the_user_config_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Path(str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    (config / "code-runner").mkdir(parents=True)
    (config / "code-runner" / "config.toml").write_text(
        '[plans]\nallowed_commands = [["python", "-m", "pytest", "-q"]]\n'
    )
    approvals = user_approvals(['["make", "test"]'])
    assert approvals.approves(["python", "-m", "pytest", "-q"])
    assert approvals.approves(["make", "test"])
    assert not approvals.approves(["python", "-m", "pytest"])  # no prefix match
    assert not approvals.approves(["python", "-m", "pytest", "-q", "-x"])  # no extra flags

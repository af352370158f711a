"""`trust`: let a source repo's `code-runner.toml` choose programs, endpoints and keys.

The user's config records the file's sha256 under [trust]; a changed file is untrusted
again (code_runner.config). The entry is added by editing the user's file as text, so its
comments and layout stay as they were, and the result is parsed back before it is written.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import click

from code_runner import config, files
from code_runner.cli import render
from code_runner.errors import SpecError

_HEADER = re.compile(r"^\s*\[\s*trust\s*\]\s*(#.*)?$")


def trust_repo_config(source: Path) -> config.RepoConfig:
    """Record the sha256 of `source`'s config (a repo dir or the file) in the user's file."""
    path = source / config.REPO_CONFIG_NAME if source.is_dir() else source
    if not path.is_file():
        raise SpecError(
            str(path),
            ["there is no such file to trust"],
            fix="name a repo that has a code-runner.toml, or the file itself.",
        )
    data, content = config.read_toml(path)
    key, value = config.trust_key(path), config.digest(content)
    user = config.user_config_file()
    text = user.read_text(encoding="utf-8") if user.is_file() else ""
    quoted = json.dumps(key, ensure_ascii=False)
    entry = f"{quoted} = {json.dumps(value)}"
    lines = [line for line in text.splitlines() if not line.startswith(f"{quoted} =")]
    header = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if header is None:
        lines += [
            "",
            f"[{config.TRUST_TABLE}]  # repo configs trusted by `code-runner trust`",
            entry,
        ]
    else:
        lines.insert(header + 1, entry)
    new_text = "\n".join(lines).lstrip("\n") + "\n"
    try:
        recorded = config.trusted_digests(tomllib.loads(new_text)).get(key)
    except tomllib.TOMLDecodeError:
        recorded = None
    if recorded != value:
        raise SpecError(
            str(user),
            [f"cannot add {key!r} to its [{config.TRUST_TABLE}] table"],
            fix=f"add the line {entry} under [{config.TRUST_TABLE}] yourself.",
        )
    user.parent.mkdir(parents=True, exist_ok=True)
    files.atomic_write_text(user, new_text)
    return config.RepoConfig(path, value, True, tuple(config.asks(data)))


@click.command("trust")
@click.argument(
    "source", required=False, type=click.Path(path_type=Path, exists=True), default=Path(".")
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def trust_command(source: Path, as_json: bool) -> int:
    """Trust SOURCE's code-runner.toml (default: the current directory's) as it is now."""
    trusted = trust_repo_config(source.resolve())
    if as_json:
        render.print_json(
            {"path": str(trusted.path), "sha256": trusted.sha256, "asks": list(trusted.asks)}
        )
        return 0
    out = render.console()
    out.print(f"trusted {trusted.describe()}")
    out.print(f"recorded in {config.user_config_file()}; a changed file needs trusting again.")
    return 0

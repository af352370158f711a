"""The plan tests' fixtures: the real Codex CLI, as the agent-CLI tests have it."""

from tests.agents.cli_agents.conftest import codex

__all__ = ["codex"]

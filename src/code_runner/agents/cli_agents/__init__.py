"""External agent CLIs as backends: `codex-cli`, `claude-cli` and `command`.

Each runs a program in the workspace under the same guarantees as the built-in loop: the
runner audits real git state after the round and the DoD judges. What is particular to a
CLI lives here:

- `contract`: the prompt a worker gets (objective, owned paths, non-goals, acceptance,
  the final RESULT_STATUS block) and the parser that reads the block back;
- `supervisor`: an outer wall-clock timeout and an idle timeout on output growth, both
  killing the whole tree, a stop request, and known failure texts (`blockers`) that end
  the round as BLOCKED_NEEDS_DECISION instead of waiting for a timeout;
- `translate`: the CLIs' JSON event streams turned into code-runner events, and the
  final event (`turn.completed`, `result`) without which a round is a failure;
- `tmux`: `--tmux` runs the CLI in a pane of its own tmux server, piped to terminal.log;
- `codex`, `claude`, `command`: the hermetic command line and environment of each.
"""

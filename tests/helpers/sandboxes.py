"""A sandbox session over a workspace, as a run opens one, for tests that need no limits of
their own: no network, the default limits, a minute of CPU, as the workspace's owner."""

from __future__ import annotations

from code_runner import sandbox, workspace


def owned_session(ws: workspace.Workspace, name: str, owner: tuple[int, int]) -> sandbox.Session:
    """The session a run would open on `ws` for a command run as `owner` (uid, gid)."""
    return sandbox.open_session(
        ws,
        env=ws.env(),
        network=False,
        limits=sandbox.DEFAULT_LIMITS,
        cpu_s=60,
        name=name,
        identity=sandbox.SandboxUser(*owner),
    )

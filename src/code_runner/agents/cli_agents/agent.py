"""`CliAgent`: one round of an agent CLI, as the runner's `Agent` protocol sees it.

A round writes the contract prompt to the record, builds the CLI's hermetic command
line and environment (a `Flavor` per CLI), supervises the process, and turns what
happened into an `AgentOutcome`. The toolbox the runner offers is not used: the CLI
brings its own tools, and the runner audits what they did from real git state.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import code_runner.agents.cli_agents.interactive as interactive
import code_runner.agents.cli_agents.login as login
import code_runner.agents.cli_agents.skill_guard as skill_guard
import code_runner.agents.cli_agents.supervisor as supervisor
import code_runner.agents.cli_agents.tmux as tmux
import code_runner.agents.cli_agents.watch as watch
from code_runner import proc
from code_runner.agents.base import AgentOutcome, AgentStop, RoundContext
from code_runner.agents.cli_agents.preflight import find_program, preflight_key, preflight_program
from code_runner.agents.cli_agents.settings import CliKind, CliSettings, resolve
from code_runner.agents.cli_agents.skill_guard import SkillsGuard
from code_runner.agents.cli_agents.translate import Translator
from code_runner.agents.cli_agents.usage import RunTally
from code_runner.agents.redact import redact
from code_runner.errors import PreflightError, UsageError
from code_runner.events import EventKind, EventSink
from code_runner.files import atomic_write_text
from code_runner.record import RecordPaths
from code_runner.task import contract, skills
from code_runner.task.skills import Skill
from code_runner.tools.base import ToolRunner

PROMPT_PLACEHOLDER = "<prompt: see {path}>"
# the CLIs that report their token usage, by the name their usage is recorded under
_REPORTED_BY = {CliKind.CODEX: "codex", CliKind.CLAUDE: "claude-code"}
_MAX_ROUND_S = 7 * 86_400.0


@dataclass(frozen=True)
class LaunchRequest:
    """One round as a flavor sees it: the program and prompt, where, and with what."""

    program: str  # absolute when found on the command environment's PATH
    prompt: str
    prompt_file: Path
    workspace: Path
    round_index: int
    env: Mapping[str, str]
    home: Path  # the CLI's own HOME: config dirs go under it
    skills: tuple[Skill, ...] = ()  # named skills: the flavor installs them in its home
    result_file: Path | None = None  # interactive: where the worker writes its final block


@dataclass(frozen=True)
class Invocation:
    """One CLI run: argv and environment as started, and what is safe to record."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    secret_names: tuple[str, ...] = ()  # variables whose values are secrets
    skills_dir: Path | None = None  # where the flavor installed the named skills
    login_copy: Path | None = None  # auth=inherit: the login file's copy, removed after
    read_only: tuple[Path, ...] = ()  # mounted read-only for the CLI (the skills' copies)

    def shown(self, prompt: str, prompt_file: Path) -> list[str]:
        secrets = [self.env[name] for name in self.secret_names if self.env.get(name)]
        placeholder = PROMPT_PLACEHOLDER.format(path=prompt_file)
        return [placeholder if part == prompt else redact(part, secrets) for part in self.argv]


class Flavor(Protocol):
    """What differs between CLIs: the command line, the environment, the event stream."""

    kind: CliKind

    def invocation(self, settings: CliSettings, request: LaunchRequest) -> Invocation: ...

    def translator(self, settings: CliSettings, events: EventSink) -> Translator: ...

    def posture(self, settings: CliSettings) -> dict[str, Any]: ...

    def skills_guard(self, settings: CliSettings) -> SkillsGuard: ...


def named_settings(
    kind: CliKind, arg: str | None, *, source_dir: Path | None, name: str
) -> CliSettings:
    """Settings for `kind` from its argument, or from the config entry `name` names."""
    return resolve(
        kind, arg, source_dir=source_dir, config_name=name if name != kind.value else None
    )


def vendor_agent(
    kind: CliKind, flavor: Flavor, arg: str | None, *, source_dir: Path | None, name: str
) -> CliAgent:
    """A Codex or Claude Code backend, after its program and key pass preflight."""
    settings = named_settings(kind, arg, source_dir=source_dir, name=name)
    program = preflight_program(settings)
    if settings.auth == login.AuthMode.INHERIT:
        login.preflight_login(kind)
    else:
        preflight_key(settings)
    return CliAgent(flavor, settings, program=program)


class CliAgent:
    """An external agent CLI, supervised, as a code-runner backend."""

    edits_as_runner = True  # it runs as the runner's uid, not the sandbox's

    def __init__(self, flavor: Flavor, settings: CliSettings, *, program: str) -> None:
        self.flavor = flavor
        self.settings = settings
        self.program = program
        self.name = settings.kind.value
        self._key = uuid.uuid4().hex  # one tmux socket per run, whatever its output dir
        self._last_command: list[str] | None = None
        # the token usage (and cost) the CLI reports, summed over the run's rounds
        self._usage = RunTally(_REPORTED_BY.get(settings.kind, settings.kind.value))
        if settings.tmux and tmux.tmux_program() is None:
            raise PreflightError(
                f"backend {self.name} is to run in tmux, but tmux is not installed.",
                fix="install tmux (`apt-get install tmux`), or run without --tmux (and "
                "without tmux=true or CODE_RUNNER_TMUX=1).",
            )

    @property
    def loads_skills(self) -> bool:
        """Named skills are installed for this CLI (Codex and Claude Code load them)."""
        return self.settings.kind in (CliKind.CODEX, CliKind.CLAUDE)

    def skills_problem(self) -> str | None:
        """Why this CLI's tools could change a named skill here (None: they cannot)."""
        return skill_guard.problem(self.flavor.skills_guard(self.settings), self.name)

    def with_tmux(self, enabled: bool, *, interactive: bool = False) -> CliAgent:
        """The same agent, supervised in tmux (or not); `interactive`: Claude Code's UI."""
        if interactive and (not enabled or self.settings.kind is not CliKind.CLAUDE):
            raise UsageError(
                "--interactive runs Claude Code's interactive UI in a tmux pane: it needs "
                f"--tmux and a claude-cli backend (this one is {self.name}).",
                fix="add --tmux and use a claude-cli backend, or drop --interactive.",
            )
        changed = replace(self.settings, tmux=enabled, interactive=interactive)
        return CliAgent(self.flavor, changed, program=self.program)

    def describe(self) -> dict[str, Any]:
        """For run.json: what runs, how it is confined, where a person can watch it."""
        return {
            "backend": self.name,
            "program": self.program,
            "command_line": self._last_command,
            "settings": self.settings.public(),
            "sandbox": self.flavor.posture(self.settings),
            "auth": login.describe(
                self.settings.kind, login.AuthMode(self.settings.auth), self.settings.api_key_env
            ),
            "supervision": {
                "tmux": self.settings.tmux,
                "idle_timeout_s": self.settings.idle_timeout_s,
                "timeout_s": self.settings.timeout_s,
                "stdin": "/dev/null",
            },
        }

    def run_round(self, ctx: RoundContext, tools: ToolRunner, events: EventSink) -> AgentOutcome:
        if ctx.deadline is not None and ctx.deadline <= time.monotonic():
            return AgentOutcome(
                AgentStop.TIMEOUT, error="not started: the run's timeout had passed"
            )
        paths = ctx.record_paths or _scratch_paths(ctx)
        agent_dir = proc.real_dir(paths.agent_dir)  # a link planted at its name is replaced
        index = ctx.round_index
        prompt = contract.build_prompt(
            ctx.task,
            round_index=index,
            max_rounds=ctx.max_rounds,
            previous=ctx.previous_verdict,
            skills=[(skill.name, skill.description) for skill in ctx.skills],
        )
        result_file = self._result_file(agent_dir, index)
        if result_file is not None:
            prompt = prompt.rstrip("\n") + "\n\n" + interactive.prompt_section(result_file) + "\n"
        prompt_file = agent_dir / f"round-{index}.prompt.md"
        atomic_write_text(prompt_file, prompt, durable=False)
        env = _base_env(ctx, agent_dir)
        home = Path(env["HOME"])
        program = find_program(self.program, env.get("PATH")) or self.program
        request = LaunchRequest(
            program=program,
            prompt=prompt,
            prompt_file=prompt_file,
            workspace=ctx.workspace_dir,
            round_index=index,
            env=env,
            home=home,
            skills=ctx.skills,
            result_file=result_file,
        )
        invocation = self.flavor.invocation(self.settings, request)
        guard = self.flavor.skills_guard(self.settings)
        if invocation.skills_dir is not None and guard is SkillsGuard.READ_ONLY_MOUNT:
            argv, frozen = skill_guard.read_only(invocation.argv, invocation.skills_dir, ctx.skills)
            invocation = replace(invocation, argv=argv, read_only=frozen)
        if invocation.skills_dir is not None:
            events.emit(
                EventKind.SKILLS_INSTALLED,
                backend=self.name,
                skills_dir=str(invocation.skills_dir),
                skills=[{"name": s.name, "sha256": s.sha256} for s in ctx.skills],
                read_only=[str(path) for path in invocation.read_only],
            )
        shown = invocation.shown(prompt, prompt_file)
        self._last_command = shown
        _reclaim_work_tree(ctx.workspace_dir)
        command = supervisor.SupervisedCommand(
            argv=invocation.argv,
            cwd=ctx.workspace_dir,
            env=invocation.env,
            # interactive: the UI's screen (the pane's log) is the output that grows
            stdout_path=paths.terminal_log
            if result_file
            else agent_dir / f"round-{index}.stdout.jsonl",
            stderr_path=agent_dir / f"round-{index}.stderr.log",
        )
        plan = (
            self._tmux_plan(paths, index, shown, result_file, prompt_file)
            if self.settings.tmux
            else None
        )
        events.emit(
            EventKind.CLI_STARTED,
            backend=self.name,
            argv=shown,
            cwd=str(ctx.workspace_dir),
            tmux=plan.info if plan else None,
            stdout=str(command.stdout_path),
            stderr=str(command.stderr_path),
            env_names=sorted(invocation.env),
        )
        counted = watch.FailureCounter(events, self.settings.repeat_failures)
        translator: Translator = (
            interactive.InteractiveTranslator(counted, result_file)
            if result_file
            else self.flavor.translator(self.settings, counted)
        )
        watcher = self._watcher(ctx, events)
        started = time.monotonic()
        try:
            done = supervisor.supervise(
                command,
                self._limits(ctx),
                translator,
                stop_requested=paths.stop_request.exists,
                tmux=plan,
                watchers=(watcher, *_budget(ctx)),
            )
        finally:
            login.remove_login(invocation.login_copy)
        watcher.finish(time.monotonic() - started)
        state = translator.state
        events.emit(
            EventKind.CLI_FINISHED,
            backend=self.name,
            **done.to_dict(),
            stream=state.to_dict(),
            tree_watch=watcher.summary(),
        )
        if invocation.skills_dir is not None:
            changed = skills.changed_files(ctx.skills, invocation.skills_dir)
            if changed:
                events.emit(
                    EventKind.SKILL_CHANGED,
                    backend=self.name,
                    files=changed,
                    where="installed copy",
                    skills_dir=str(invocation.skills_dir),
                )
        outcome = self._with_usage(_outcome(done, translator), translator)
        if outcome.stop is AgentStop.BLOCKED and done.blocker is not None:
            events.emit(EventKind.AGENT_BLOCKED, backend=self.name, **done.blocker.to_dict())
        return outcome

    def _with_usage(self, outcome: AgentOutcome, translator: Translator) -> AgentOutcome:
        """The outcome with the run's usage so far, for a CLI that reports usage."""
        if self.settings.kind not in _REPORTED_BY:
            return outcome
        self._usage.add_round(translator.state.reported)
        return replace(outcome, usage=self._usage.summary())

    def _watcher(self, ctx: RoundContext, events: EventSink) -> watch.TreeWatch:
        """The live watch of the work tree for one round (see `watch`)."""
        limits = watch.WatchLimits(
            no_progress_s=self.settings.no_progress_s,
            repeat_failures=self.settings.repeat_failures,
            stop_on_scope=ctx.task.on_scope == "stop",
        )
        watcher = watch.TreeWatch(
            ctx.workspace_dir,
            ctx.task.allowlist_policy,
            events,
            limits,
            ignored=watch.git_ignored(ctx.workspace_dir),
        )
        watcher.start()
        return watcher

    def _limits(self, ctx: RoundContext) -> supervisor.SupervisionLimits:
        timeout = self.settings.timeout_s or _MAX_ROUND_S
        if ctx.deadline is not None:  # the run's timeout bounds the round exactly
            timeout = min(timeout, max(0.0, ctx.deadline - time.monotonic()))
        return supervisor.SupervisionLimits(
            timeout_s=timeout,
            idle_timeout_s=self.settings.idle_timeout_s,
            grace_s=self.settings.grace_s,
        )

    def _result_file(self, agent_dir: Path, index: int) -> Path | None:
        """Interactive rounds: the sentinel file the worker's final block goes to (fresh)."""
        if not (self.settings.interactive and self.settings.tmux):
            return None
        path = agent_dir / f"round-{index}.result.txt"
        path.unlink(missing_ok=True)
        return path

    def _tmux_plan(
        self,
        paths: RecordPaths,
        index: int,
        shown: list[str],
        result_file: Path | None,
        prompt_file: Path,
    ) -> supervisor.TmuxPlan:
        """The pane for one round; interactive (`result_file`): it pastes `prompt_file`."""
        agent_dir = paths.agent_dir
        socket = tmux.socket_path(self._key)
        run_dir = paths.output_dir
        files = tmux.PaneFiles(
            script=agent_dir / f"round-{index}.launch.sh",
            go=agent_dir / f"round-{index}.go",
            exit_code=agent_dir / f"round-{index}.exit",
            stdout=agent_dir / f"round-{index}.stdout.jsonl",
            stderr=agent_dir / f"round-{index}.stderr.log",
            terminal_log=paths.terminal_log,
            info=paths.tmux_info,
            result_file=result_file,
            prompt=prompt_file if result_file else None,
        )
        how = "attach to steer" if result_file else "watching only"
        banner = (
            f"code-runner: {self.name}, round {index} -- {how}; "
            f"stop the run with: code-runner stop {run_dir}"
        )
        info = {"round": index, "backend": self.name, "command_line": shown}
        return supervisor.TmuxPlan(socket=socket, files=files, banner=banner, info=info)


def install_skills(request: LaunchRequest, cli_home: Path) -> Path | None:
    """The named skills, read-only in `cli_home/skills/`, freshly each round (a copy a
    worker changed never reaches the next round); None when the task names none."""
    if not request.skills:
        return None
    target = cli_home / "skills"
    skills.materialize(request.skills, target)
    return target


def supervise_in_tmux(agent: Any, *, enabled: bool, interactive: bool = False) -> Any:
    """`agent` with tmux supervision switched on or off (`code-runner run --tmux`)."""
    if isinstance(agent, CliAgent):
        return agent.with_tmux(enabled, interactive=interactive)
    if enabled or interactive:
        raise UsageError(
            f"--tmux runs an agent CLI in a tmux pane, and backend {getattr(agent, 'name', '?')!r} "
            "is not one (it runs inside code-runner).",
            fix="use a codex-cli, claude-cli or command backend, or drop --tmux "
            "(`code-runner watch OUTPUT_DIR` follows any run).",
        )
    return agent


def _reclaim_work_tree(work_tree: Path) -> None:
    """Own the work tree while the CLI works in it.

    With code-runner's OS sandbox on, a root runner gives the work tree to the sandbox's
    uid for its own tools and the DoD. The CLI runs as the runner (under its own
    confinement: Codex's sandbox maps it into a user namespace, where a tree owned by an
    unmapped uid is read-only), so the tree comes back for the round; the runner hands it
    over again after its audit, before the DoD.
    """
    if os.geteuid() != 0:
        return  # a non-root runner never hands the tree over
    from code_runner.sandbox import SandboxUser, hand_over

    hand_over(work_tree, SandboxUser(uid=os.getuid(), gid=os.getgid()))


def _budget(ctx: RoundContext) -> tuple[supervisor.DiskBudget, ...]:
    """The run's disk budget, asked while the CLI runs (none without a runner)."""
    return (supervisor.DiskBudget(ctx.over_budget),) if ctx.over_budget is not None else ()


def _scratch_paths(ctx: RoundContext) -> RecordPaths:
    """Where artifacts go when the agent runs without a run record (library use)."""
    return RecordPaths(Path(tempfile.mkdtemp(prefix="code-runner-cli-")), ctx.task.task_id)


def _base_env(ctx: RoundContext, agent_dir: Path) -> dict[str, str]:
    env = dict(ctx.env)
    if "PATH" not in env:
        env["PATH"] = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    for name in ("HOME", "TMPDIR"):
        if not env.get(name):
            path = agent_dir / name.lower()
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
    return env


def _outcome(done: supervisor.Supervised, translator: Translator) -> AgentOutcome:
    state = translator.state
    response = state.final_text
    turns = state.steps
    ending = done.ending
    killed = f" (killed {done.killed} leftover process(es))" if done.killed else ""
    if ending is supervisor.Ending.BLOCKED and done.blocker is not None:
        return AgentOutcome(
            AgentStop.BLOCKED,
            response,
            turns,
            error=f"{done.blocker.reason}. Fix: {done.blocker.fix}",
        )
    if ending in (supervisor.Ending.IDLE_TIMEOUT, supervisor.Ending.TIMEOUT):
        return AgentOutcome(AgentStop.TIMEOUT, response, turns, error=f"{done.detail}{killed}")
    if ending is not supervisor.Ending.EXITED:
        return AgentOutcome(AgentStop.ERROR, response, turns, error=done.detail or ending.value)
    if state.final_seen and state.final_ok:
        return AgentOutcome(AgentStop.DONE, response, turns)
    if state.turn_limit:
        return AgentOutcome(AgentStop.TURN_LIMIT, response, turns, error=state.error)
    if state.final_seen:
        return AgentOutcome(
            AgentStop.ERROR,
            response,
            turns,
            error=f"the CLI reported a failure (exit {done.exit_code}): {state.error or '?'}",
        )
    said = f"; its last error: {state.error}" if state.error else ""
    return AgentOutcome(
        AgentStop.ERROR,
        response,
        turns,
        error=f"the CLI exited (exit {done.exit_code}) without its final event "
        f"`{state.final_event}`, so the round counts as failed{said}{killed}",
    )


__all__ = [
    "CliAgent",
    "Flavor",
    "Invocation",
    "LaunchRequest",
    "install_skills",
    "supervise_in_tmux",
]

"""The agent loop: sample a reply, run its one command in the sandbox, show the result, repeat.

Every id the policy sampled is appended verbatim with its log-prob; everything else (end of
turn, observation, next generation prompt) is appended as a tokenized suffix with
action_mask 0. A trajectory always ends in a well-defined ExitReason and keeps its ids so
far, whatever went wrong.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import time
import uuid
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from swerl.agent.actions import FormatError, parse_action
from swerl.agent.chat_format import ChatFormat
from swerl.agent.prompts import Prompts
from swerl.agent.tools import TOOLS_STATE, in_sandbox
from swerl.agent.trajectory import ExitReason, Trajectory, Turn
from swerl.data.task import Task
from swerl.envs.sandbox import HostLost, Sandbox, SandboxError
from swerl.inference.base import EngineError, Generation, GenerationRequest, InferenceEngine


class AgentConfig(BaseModel):
    """Limits and presentation of one agent run (the paper: 40 turns / 65k, then 80 / 131k)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(40, ge=1, le=1000, description="Replies the policy may give (T_max).")
    max_new_tokens: int = Field(1024, ge=1, le=262_144, description="Cap on one reply's tokens (the trajectory's token "
                                "budget is the engine's max_context).")
    min_turn_tokens: int = Field(16, ge=1, le=65_536, description="A turn needs room for this many new tokens, else context_exceeded.")
    command_timeout_s: float = Field(60.0, gt=0, le=3600, description="Wall-clock limit of one command in the sandbox.")
    deadline_s: float = Field(1800.0, gt=0, le=86_400, description="Wall-clock limit of the whole trajectory.")
    observation_max_chars: int = Field(8000, ge=200, le=1_000_000, description="Observations longer than this keep head and tail.")
    max_format_errors: int = Field(3, ge=1, le=100, description="Consecutive replies without exactly one command that end the run.")
    prompt_dir: Path | None = Field(None, description="Folder overriding the shipped prompt templates (`<name>.j2`).")
    end_reply_at_command: bool = Field(
        False, description="End each reply where its first fenced block closes (an end-of-turn sampled right after is kept), "
        "as a stop sequence would: what was sampled after it is dropped, never shown to the model nor trained on, so "
        "'more than one command' cannot happen. Off: the paper's scaffold, where a second block is a format error. "
        "Measured on a tiny policy whose DAPO update had stopped it ending its turns, it did not help (its fences broke "
        "too); dapo.loss.neg_prob_cap is what did."
    )
    collect_patch_on_exit: bool = Field(
        True, description="Record `git diff` also when the run ends without submit (SWE-agent's autosubmission)."
    )


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and tail of ``text`` within ``limit`` characters, with a marker between."""
    if len(text) <= limit:
        return text
    half = (limit - 80) // 2
    dropped = len(text) - 2 * half
    return f"{text[:half]}\n[... {dropped} characters truncated ...]\n{text[-half:]}"


def turn_seed(seed: int | None, trajectory_id: str, turn: int) -> int | None:
    """A per-turn seed that depends only on (seed, trajectory, turn): reruns replay exactly."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}/{trajectory_id}/{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class _ShellState:
    """Working directory and open file, carried between commands that each run in a fresh shell."""

    def __init__(self, workdir: str, state: str = TOOLS_STATE) -> None:
        self.cwd = workdir
        self.state = state  # the tools' state file, as the sandbox's commands see it
        self.open_file: str | None = None
        self.mark = f"__SWERL_{uuid.uuid4().hex}__"

    def wrap(self, command: str) -> str:
        quoted = self.cwd.replace("'", "'\\''")
        return (
            f"cd -- '{quoted}' 2>/dev/null\n{command}\n__swerl_rc=$?\n"
            f"printf '\\n{self.mark}%s{self.mark}' \"$PWD\"; cat {shlex.quote(self.state)} 2>/dev/null; exit $__swerl_rc"
        )

    def absorb(self, output: str) -> str:
        """Strip the epilogue from ``output`` and update cwd / open file from it."""
        head, sep, rest = output.rpartition("\n" + self.mark)
        if not sep:
            return output
        cwd, sep, state = rest.partition(self.mark)
        if sep and cwd.startswith("/"):
            self.cwd = cwd
        try:
            self.open_file = json.loads(state).get("file") or None
        except (ValueError, AttributeError):
            pass
        return head


class Agent:
    """Runs one task in one sandbox with one engine; see the module docstring."""

    def __init__(self, engine: InferenceEngine, chat: ChatFormat, config: AgentConfig | None = None) -> None:
        self.engine = engine
        self.chat = chat
        self.config = config or AgentConfig()
        self.prompts = Prompts(self.config.prompt_dir)
        self.max_context = engine.max_context  # the trajectory's token budget

    def _prompt_line(self, shell: _ShellState) -> str:
        return self.prompts.render("prompt_line", open_file=shell.open_file, cwd=shell.cwd)

    async def run(self, task: Task, sandbox: Sandbox, *, sample_index: int = 0, seed: int | None = None) -> Trajectory:
        cfg = self.config
        start = time.monotonic()
        deadline = start + cfg.deadline_s
        workdir = sandbox.workdir  # the repository: the sandbox says where (/testbed in the images swerl builds)
        shell = _ShellState(workdir, in_sandbox(sandbox, TOOLS_STATE))
        trajectory_id = f"{task.instance_id}/{sample_index}"
        system = self.prompts.render("system", workdir=workdir, command_timeout_s=cfg.command_timeout_s, window=100)
        user = self.prompts.render(
            "instance", repo=task.repo, workdir=workdir, problem_statement=task.problem_statement, prompt_line=self._prompt_line(shell)
        )
        traj = Trajectory(
            instance_id=task.instance_id,
            sample_index=sample_index,
            trajectory_id=trajectory_id,
            policy_version=self.engine.policy_version,
            engine=self.engine.name,
            seed=seed,
            prompt_ids=self.chat.prompt_ids(system, user),
            messages=[{"role": "system", "content": self.chat.sanitize(system)}, {"role": "user", "content": self.chat.sanitize(user)}],
            exit_reason=ExitReason.error,
        )
        try:
            traj.exit_reason = await self._turns(task, sandbox, traj, shell, deadline, seed)
        except HostLost as e:  # the sandbox's machine is gone: no fair run, redone by a rerun, never scored
            traj.exit_reason, traj.error = ExitReason.infra_error, f"{type(e).__name__}: {e}"
        except (EngineError, SandboxError) as e:
            traj.exit_reason, traj.error = ExitReason.error, f"{type(e).__name__}: {e}"
        except Exception as e:  # a bug must not take the batch down; it is recorded and visible
            traj.exit_reason, traj.error = ExitReason.error, f"unexpected {type(e).__name__}: {e}"
        if traj.exit_reason is ExitReason.submitted or (cfg.collect_patch_on_exit and traj.exit_reason not in (
                ExitReason.error, ExitReason.infra_error, ExitReason.sandbox_broken)):
            try:
                traj.patch = await asyncio.to_thread(sandbox.diff)
            except SandboxError as e:
                traj.exit_reason = ExitReason.infra_error if isinstance(e, HostLost) else ExitReason.error
                traj.error = f"diff failed: {e}"
        traj.num_turns = len(traj.turns)
        traj.generation_s = sum(t.generation_s for t in traj.turns)
        traj.environment_s = sum(t.environment_s for t in traj.turns)
        traj.wall_s = time.monotonic() - start
        return traj

    async def _turns(self, task: Task, sandbox: Sandbox, traj: Trajectory, shell: _ShellState, deadline: float, seed: int | None) -> ExitReason:
        """The turns: query the policy, parse its reply, execute the command, account the observation's tokens."""
        cfg = self.config
        format_errors = 0
        for index in range(cfg.max_turns):
            room = self.max_context - len(traj.prompt_ids) - len(traj.response_ids)
            if room < cfg.min_turn_tokens:
                return ExitReason.context_exceeded
            if time.monotonic() >= deadline:
                return ExitReason.timeout
            replied = await self._query(traj, index, room, deadline, seed)
            if replied is None:
                return ExitReason.timeout
            turn, ids = replied
            try:
                action = parse_action(turn.reply)
            except FormatError as e:
                format_errors += 1
                turn.format_error = str(e)
                if format_errors >= cfg.max_format_errors:
                    return ExitReason.format_errors
                observation = self.prompts.render("format_error", error=str(e), prompt_line=self._prompt_line(shell))
            else:
                format_errors = 0
                turn.command = action.command
                if action.is_submit:
                    return ExitReason.submitted
                observation = await self._run_command(sandbox, shell, traj, turn, deadline)
                if isinstance(observation, ExitReason):
                    return observation
            turn.observation = observation
            if index == cfg.max_turns - 1:
                break
            if not self._account_observation(traj, turn, ids, observation):
                return ExitReason.context_exceeded
        return ExitReason.max_turns

    async def _query(self, traj: Trajectory, index: int, room: int, deadline: float,
                     seed: int | None) -> tuple[Turn, list[int]] | None:
        """Ask the policy for turn ``index`` within ``room`` tokens; the recorded turn and its kept reply tokens, or
        None when the trajectory's deadline passed first."""
        cfg = self.config
        request = GenerationRequest(
            request_id=f"{traj.trajectory_id}#{index}",
            prompt_ids=traj.prompt_ids + traj.response_ids,
            max_new_tokens=min(cfg.max_new_tokens, room),
            stop_token_ids=self.chat.stop_token_ids,
            seed=turn_seed(seed, traj.trajectory_id, index),
            trajectory_id=traj.trajectory_id,
            turn=index,
        )
        t0 = time.monotonic()
        try:
            gen = await asyncio.wait_for(self.engine.generate(request), timeout=deadline - t0)
        except asyncio.TimeoutError:
            return None
        return self._record_reply(traj, gen, index, time.monotonic() - t0)

    def _record_reply(self, traj: Trajectory, gen: Generation, index: int, gen_s: float) -> tuple[Turn, list[int]]:
        """Append the policy's reply to the trajectory (cut after its first command when configured so); the new
        turn and the reply tokens kept."""
        ids, finish, dropped = gen.token_ids, gen.finish_reason, 0
        if self.config.end_reply_at_command:
            keep = self.chat.command_end(ids)
            if keep < len(ids):
                ids, finish, dropped = ids[:keep], "stop", len(ids) - keep
        traj.response_ids += ids
        traj.action_mask += [1] * len(ids)
        traj.logprobs += gen.logprobs[:len(ids)]
        traj.exact_ids = traj.exact_ids and gen.exact_ids
        reply = self.chat.reply_text(ids)
        traj.messages.append({"role": "assistant", "content": reply})
        turn = Turn(index=index, reply=reply, n_action_tokens=len(ids), finish_reason=finish, dropped_tokens=dropped,
                    generation_s=gen_s, policy_version=gen.policy_version or self.engine.policy_version)
        traj.turns.append(turn)
        return turn, ids

    async def _run_command(self, sandbox: Sandbox, shell: _ShellState, traj: Trajectory, turn: Turn,
                           deadline: float) -> str | ExitReason:
        """The observation of ``turn.command`` run in the sandbox, or why the trajectory ends instead."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return ExitReason.timeout
        try:
            return await self._execute(sandbox, shell, turn, turn.command, min(self.config.command_timeout_s, remaining))
        except HostLost:
            raise
        except SandboxError as e:  # its own command broke it (killed the runner, ...): no way out of a score
            traj.error = f"{type(e).__name__}: {e}"
            return ExitReason.sandbox_broken

    def _account_observation(self, traj: Trajectory, turn: Turn, ids: list[int], observation: str) -> bool:
        """Append the observation's tokens (masked out of the loss); False when they would leave no room for a turn."""
        suffix = self.chat.turn_suffix(ids, observation)
        if len(traj.prompt_ids) + len(traj.response_ids) + len(suffix.ids) + self.config.min_turn_tokens > self.max_context:
            return False
        traj.response_ids += suffix.ids
        traj.action_mask += [0] * len(suffix.ids)
        traj.logprobs += [0.0] * len(suffix.ids)
        turn.n_observation_tokens = len(suffix.ids)
        traj.messages.append({"role": "user", "content": self.chat.sanitize(observation)})
        return True

    async def _execute(self, sandbox: Sandbox, shell: _ShellState, turn: Turn, command: str, timeout: float) -> str:
        t0 = time.monotonic()
        result = await asyncio.to_thread(sandbox.exec, shell.wrap(command), timeout)
        turn.environment_s = time.monotonic() - t0
        turn.exit_code, turn.timed_out = result.exit_code, result.timed_out
        output = truncate_middle(shell.absorb(result.output).strip("\n"), self.config.observation_max_chars)
        return self.prompts.render(
            "observation", output=output, timed_out=result.timed_out, command_timeout_s=round(timeout),
            prompt_line=self._prompt_line(shell),
        )

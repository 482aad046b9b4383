"""What a training iteration optimises: rejection fine-tuning or one DAPO update.

One flow (``flows/train_iteration.py``) samples the policy, trains and registers the result
for both; everything in which RFT and DAPO differ is here, as a tagged union: the MLflow
run's name and params, the seed, the rollout's size and sampler, the reward the rollout is
scored with, the training stage's config and the new policy's version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from swerl.orchestration.params import DAPOParams, RFTParams, SamplerParams, TrainParams
from swerl.rl.rewards import RewardConfig, check_turn_window
from swerl.rl.rft import RFTConfig
from swerl.stages.config import changed, part
from swerl.stages.train import DAPOObjective, DAPOStage, RFTStage


class RFTIteration(BaseModel):
    """Rejection fine-tuning: sample, keep the resolved runs, fine-tune on their replies."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["rft"] = "rft"
    rft: RFTParams = Field(default_factory=RFTParams, description="Selection, samples, sampler and training of the stage.")
    stage: Literal["rft", "warm-start"] = Field("rft", description="Names the MLflow run and the new policy version: "
                                                "`rft`, or `warm-start` for supervised warm-up before the measured curve.")
    grade: bool = Field(True, description="Grade the rollout. False only for demonstrations trained on whatever their "
                        "verdict (a warm start's noisy demonstrator, `WarmStartParams.grade`).")

    @property
    def name(self) -> str:
        return self.stage

    @property
    def new_version(self) -> str:
        return self.stage

    @property
    def samples(self) -> int:
        return self.rft.attempts

    @property
    def train(self) -> TrainParams:
        return self.rft.train

    @property
    def reward(self) -> RewardConfig | None:
        return None  # the rollout is scored with the default rewards: RFT keeps resolved runs whatever they score

    def sampler_of(self, default: SamplerParams) -> SamplerParams:
        return self.rft.sampler or default

    def seed_of(self, seed: int) -> int:
        return seed

    def check(self, sampler: SamplerParams) -> None:
        """Nothing to refuse before the rollout."""

    def run_params(self, sampler: SamplerParams, start_version: str) -> dict[str, Any]:
        # MLflow params keep the keys every run logged (a resumed run logs them again): `samples` is the attempts
        return {"samples": self.rft.attempts, "engine": sampler.engine.kind, "lr": self.train.optimizer.lr, "epochs": self.train.epochs}

    def stage_config(self, trajectories: Path, model: str, out: Path, seed: int, policy_version: str) -> RFTStage:
        # RFT may train on any policy's runs (demonstrations included): no policy_version check
        return RFTStage(trajectories=[trajectories], model=model, out=out, seed=seed, train=self.train.settings(),
                        **part(self.rft, RFTConfig).model_dump())


class DAPOIteration(BaseModel):
    """One DAPO iteration: G samples per task, rewards, group advantages, one clipped policy-gradient update."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["dapo"] = "dapo"
    dapo: DAPOParams = Field(default_factory=DAPOParams, description="Rewards, baseline, loss, samples and training.")
    iteration: int = Field(1, ge=0, le=10_000, description="Which iteration: names the run (`iter-k`) and the version (`dapo-k`).")

    @property
    def name(self) -> str:
        return f"iter-{self.iteration}"

    @property
    def new_version(self) -> str:
        return f"dapo-{self.iteration}"

    @property
    def samples(self) -> int:
        return self.dapo.group_size

    @property
    def train(self) -> TrainParams:
        return self.dapo.train

    @property
    def reward(self) -> RewardConfig | None:
        return self.dapo.reward

    @property
    def grade(self) -> bool:
        return True  # rewards are verdicts

    def sampler_of(self, default: SamplerParams) -> SamplerParams:
        return default

    def seed_of(self, seed: int) -> int:
        # each iteration samples afresh, also when the previous one left the policy unchanged
        return seed + 1000 * self.iteration

    def check(self, sampler: SamplerParams) -> None:
        """Refuse a reward window shorter than the agent's turn limit, before any rollout."""
        check_turn_window(sampler.agent.max_turns, self.dapo.reward)

    def run_params(self, sampler: SamplerParams, start_version: str) -> dict[str, Any]:
        d = self.dapo
        # MLflow params are immutable: a resumed run logs these again, so any loss setting beyond the keys every run
        # logged comes only when changed (a new defaulted option then adds nothing to a run logged before it)
        return {"iteration": self.iteration, "samples": d.group_size, "eps_low": d.loss.eps_low, "eps_high": d.loss.eps_high,
                "lr": d.train.optimizer.lr, "advantage": d.advantage, "start_policy": start_version, **changed(d.loss),
                **changed(d.off_policy)}

    def stage_config(self, trajectories: Path, model: str, out: Path, seed: int, policy_version: str) -> DAPOStage:
        return DAPOStage(trajectories=[trajectories], model=model, out=out, seed=seed, train=self.train.settings(),
                         require_version=policy_version, iteration=self.iteration, **dict(part(self.dapo, DAPOObjective)))


Objective = Annotated[Union[RFTIteration, DAPOIteration], Field(discriminator="kind")]

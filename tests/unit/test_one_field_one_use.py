"""A new defaulted option is one field and its use: the resume fingerprint (``run.json``) and the MLflow params of a
training stage take every setting a user changed from the configs themselves, so no compatibility branch is written
for it, and a run folder or MLflow run written before the option existed resumes with the same keys."""

from __future__ import annotations

from pydantic import Field

from swerl.orchestration.objectives import DAPOIteration
from swerl.orchestration.params import DAPOParams
from swerl.rl.rewards import RewardConfig
from swerl.stages.train import DAPOStage, RFTStage, dapo_spec, rft_spec
from swerl.train.config import LossConfig

REWARD = RewardConfig().model_dump(mode="json")


def dapo(**loss) -> DAPOStage:
    return DAPOStage(trajectories=[], model="m", out="o", loss=LossConfig(**loss))


def test_a_default_dapo_run_records_the_keys_every_dapo_run_has_recorded():
    assert dapo_spec(dapo()) == {"objective": "dapo", "reward": REWARD, "advantage": "mean_std", "eps_low": 0.2, "eps_high": 0.3,
                                 "drop_zero_advantage": True, "loss_aggregation": "token"}


def test_the_options_added_later_appear_only_when_set_under_the_keys_they_always_had():
    spec = dapo_spec(dapo(neg_prob_cap=0.5, kl_coef=0.01))
    assert (spec["neg_prob_cap"], spec["kl_coef"]) == (0.5, 0.01)
    assert set(spec) - set(dapo_spec(dapo())) == {"neg_prob_cap", "kl_coef"}


def test_an_rft_run_records_require_graded_only_when_it_is_off():
    base = {"objective": "rft", "require_submitted": False, "require_resolved": True, "mask_format_errors": True,
            "max_per_task": None}
    assert rft_spec(RFTStage(trajectories=[], model="m", out="o")) == base
    assert rft_spec(RFTStage(trajectories=[], model="m", out="o", require_graded=False, require_resolved=False)) == {
        **base, "require_resolved": False, "require_graded": False}


class LossWithANewOption(LossConfig):
    """What a developer adds: one defaulted field (and its use in the loss, elsewhere)."""

    entropy_bonus: float = Field(0.0, ge=0.0, description="A new option.")


def test_a_new_defaulted_loss_option_needs_no_other_line_to_reach_the_fingerprint_and_the_mlflow_params():
    stage = DAPOStage(trajectories=[], model="m", out="o", loss=LossWithANewOption())
    # at its default: a run written before the option existed resumes, its params log again unchanged
    assert dapo_spec(stage) == dapo_spec(dapo())
    iteration = DAPOIteration(dapo=DAPOParams(loss=LossWithANewOption()))
    assert iteration.run_params(None, "0") == DAPOIteration().run_params(None, "0")
    # set: a resume under another value is refused (run.json differs), and MLflow records it
    bonus = LossWithANewOption(entropy_bonus=0.1)
    assert dapo_spec(stage.model_copy(update={"loss": bonus}))["entropy_bonus"] == 0.1
    assert DAPOIteration(dapo=DAPOParams(loss=bonus)).run_params(None, "0")["entropy_bonus"] == 0.1

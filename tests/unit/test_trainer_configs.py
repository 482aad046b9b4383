"""The trainer backend as a tagged union: `trainer: {backend: torch, device}` or
`{backend: deepspeed, zero_stage}`, each with its own fields, built by one factory; the older
flat form (backend, device, zero_stage beside the other settings) still reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swerl.orchestration.params import PipelineParams, TrainParams
from swerl.stages.train import RFTStage, trainer_config
from swerl.train import BACKENDS, DeepSpeedTrainerConfig, TorchTrainerConfig, TrainerConfig, TrainerSettings, make_trainer


def test_the_default_trainer_is_torch_on_the_first_gpu_or_the_cpu():
    settings = TrainerSettings()
    assert settings.trainer == TorchTrainerConfig(device="auto")
    assert settings.backend == "torch"
    assert sorted(BACKENDS) == ["deepspeed", "torch"]


def test_the_backend_tag_picks_the_variant_and_each_has_only_its_own_fields():
    assert TrainerSettings(trainer={"backend": "deepspeed", "zero_stage": 2}).trainer == DeepSpeedTrainerConfig(zero_stage=2)
    assert TrainerSettings(trainer={"backend": "torch", "device": "cpu"}).trainer == TorchTrainerConfig(device="cpu")
    with pytest.raises(ValidationError, match=r"trainer\.torch\.zero_stage\n  Extra inputs are not permitted"):
        TrainerSettings(trainer={"backend": "torch", "zero_stage": 2})
    with pytest.raises(ValidationError, match=r"does not match any of the expected tags: 'torch', 'deepspeed'"):
        TrainerSettings(trainer={"backend": "jax"})


def test_the_older_flat_form_reads_as_the_union_dropping_what_the_backend_has_no_use_for():
    assert TrainerSettings(backend="deepspeed", zero_stage=2, device="cpu").trainer == DeepSpeedTrainerConfig(zero_stage=2)
    assert TrainParams.model_validate({"device": "cpu", "zero_stage": 2, "epochs": 2}).trainer == TorchTrainerConfig(device="cpu")
    old_yaml = {"rft": {"train": {"backend": "deepspeed", "zero_stage": 1, "epochs": 2}}}
    assert PipelineParams.model_validate(old_yaml).rft.train.trainer == DeepSpeedTrainerConfig(zero_stage=1)
    with pytest.raises(ValidationError, match=r"give the backend as trainer: \{backend: \.\.\.\} or as the flat backend, not both"):
        TrainerSettings(backend="torch", trainer={"backend": "torch"})


def test_a_stage_s_trainer_reaches_the_trainer_config_as_is_and_survives_json(tmp_path):
    stage = RFTStage(trajectories=[tmp_path], model="m", out=tmp_path / "out",
                     train={"trainer": {"backend": "deepspeed", "zero_stage": 2}, "optimizer": {"lr": 1e-3}})
    config = trainer_config(stage, "sft", total_steps=4)
    assert config.trainer == DeepSpeedTrainerConfig(zero_stage=2)
    # what the DeepSpeed worker processes read back
    assert TrainerConfig.model_validate_json(config.model_dump_json()) == config


def test_the_factory_builds_the_backend_the_config_names(tiny_model_dir):
    from swerl.train.torch_trainer import TorchTrainer

    trainer = make_trainer(tiny_model_dir, TrainerConfig(trainer=TorchTrainerConfig(device="cpu")))
    assert isinstance(trainer, TorchTrainer)
    assert str(trainer.device) == "cpu"


def test_compiled_layers_are_a_torch_backend_option_refused_for_deepspeed(tmp_path):
    cfg = TrainerConfig(trainer={"backend": "deepspeed", "zero_stage": 3}, compile_layers=True)
    with pytest.raises(ValueError, match="compile_layers is a torch-backend option.*turn it off for backend 'deepspeed'"):
        make_trainer(tmp_path, cfg)


def test_keeping_attention_in_checkpoints_is_a_torch_backend_option_refused_for_deepspeed(tmp_path):
    cfg = TrainerConfig(trainer={"backend": "deepspeed", "zero_stage": 3}, gradient_checkpointing=True,
                        checkpoint_keep_attention=True)
    with pytest.raises(ValueError, match="checkpoint_keep_attention is a torch-backend option; turn it off for backend "
                                         "'deepspeed'"):
        make_trainer(tmp_path, cfg)


def test_a_trainer_with_cudnn_attention_loads_its_policy_with_repeated_key_value_heads(tiny_model_dir):
    from swerl.train.attention import REPEATED_KV_SDPA

    trainer = make_trainer(tiny_model_dir, TrainerConfig(trainer=TorchTrainerConfig(device="cpu"), cudnn_attention=True))
    assert trainer.policy.config._attn_implementation == REPEATED_KV_SDPA
    plain = make_trainer(tiny_model_dir, TrainerConfig(trainer=TorchTrainerConfig(device="cpu")))
    assert plain.policy.config._attn_implementation == "sdpa"

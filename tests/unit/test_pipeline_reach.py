"""Every setting of the library a pipeline runs can be set from ``PipelineParams``.

A library config (the engine's, the rollout's, the image builder's, validation's, the trainer's, ...) is either
nested in the pipeline's form, or built by a stage from the form: then each of its fields is declared by a model the
form holds (a field inherited from a shared base, ``sampler.engine.dtype`` for ``HFEngineConfig.dtype``), or is one of
the few values a stage decides itself (``PIPELINE_INPUTS``: which policy, where its logs go). A new library field
that a pipeline cannot set fails here, as the grader's test time limit once did (``tests/unit/test_grading_reach.py``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from test_config_consistency import config_models, declaring_class

from flows.rollout import rollout_stage
from swerl.grading.validate import ValidationConfig, ValidationSettings
from swerl.orchestration.params import PipelineParams
from swerl.rollout.runner import RolloutConfig
from swerl.stages.config import part
from swerl.stages.images import ImagesStage, image_config
from swerl.stages.rollout import engine_config, rollout_config
from swerl.util.config_reference import models_in, reachable

# What a stage decides, not a user: the values differ per stage of one run.
PIPELINE_INPUTS = {
    "model": "the policy a stage samples or trains: the starting model, then each stage's checkpoint",
    "model_name": "the name recorded on every trajectory: the stage's model",
    "build_logs": "the stage's own log folder (LOG_DIR/builds)",
    "cache_dir": "the machine's verdict cache of task validation (~/.cache/swerl/validation, SWERL_CACHE_DIR)",
    "objective": "the stage's objective: RFT or DAPO",
    "total_steps": "counted from the stage's data, epochs and batch size",
    "trains_from": "the version the update that trains on a rollout starts from (its trajectories' staleness)",
}

# Config models of the package that a pipeline does not run, and why.
NOT_RUN_BY_A_PIPELINE = {
    "ServicesConfig": "the `swerl up` servers (Prefect, MLflow) a pipeline runs under",
    "CurationConfig": "the curation filters that make a task set; a pipeline takes its task files as they are",
    "InstallConfig": "a task record's install recipe: data of the task, not a setting",
}

# The layers that build library configs from the form: their models are hand-offs, not library configs.
HAND_OFF_LAYERS = ("swerl.orchestration.", "swerl.stages.", "flows.")


def library_configs() -> dict[str, type[BaseModel]]:
    """The config models a user of the library instantiates: outside the hand-off layers, no other model's base."""
    models = config_models()
    bases = {base for cls in models.values() for base in cls.__mro__[1:]}
    return {name: cls for name, cls in models.items()
            if not cls.__module__.startswith(HAND_OFF_LAYERS) and cls not in bases and name not in NOT_RUN_BY_A_PIPELINE}


def unreachable_fields(form: type[BaseModel]) -> dict[str, list[str]]:
    """Library config -> its fields that ``form`` cannot set (nor a stage decides)."""
    held = reachable([form])
    covered = {base for cls in held for base in cls.__mro__}
    out = {}
    for name, cls in sorted(library_configs().items()):
        if cls in covered:
            continue
        missing = [f for f, info in cls.model_fields.items()
                   if f not in PIPELINE_INPUTS and declaring_class(cls, f) not in covered
                   and not (models_in(info.annotation) and all(m in covered for m in models_in(info.annotation)))]
        if missing:
            out[name] = missing
    return out


def test_every_field_of_every_library_config_is_a_pipeline_setting_or_a_stage_s_input():
    assert unreachable_fields(PipelineParams) == {}


def test_the_exceptions_are_still_models_of_the_package_and_fields_of_a_library_config():
    models = config_models()
    assert sorted(n for n in NOT_RUN_BY_A_PIPELINE if n not in models) == []
    fields = {f for cls in library_configs().values() for f in cls.model_fields}
    assert sorted(set(PIPELINE_INPUTS) - fields) == []


def test_the_walk_finds_the_library_configs_a_pipeline_builds():
    assert {"HFEngineConfig", "VLLMEngineConfig", "OpenAIEngineConfig", "ScriptedEngineConfig", "RolloutConfig",
            "ImageConfig", "ValidationConfig", "TrainerConfig", "GradingConfig"} <= set(library_configs())


class _FormWithoutImages(BaseModel):
    sampler: PipelineParams.model_fields["sampler"].annotation  # type: ignore[valid-type]


def test_a_form_missing_a_nested_config_is_told_which_fields_it_cannot_set():
    missing = unreachable_fields(_FormWithoutImages)
    assert {"ca_certs", "github", "builds", "force", "base"} <= set(missing["ImageConfig"])
    assert set(missing["ValidationConfig"]) == {"validate_runs", "grading_sandboxes"}


def test_engine_image_validation_and_grading_settings_set_in_a_pipeline_reach_the_configs_built_from_it(tmp_path):
    params = PipelineParams.model_validate({
        "sampler": {"engine": {"kind": "hf", "dtype": "bfloat16", "kv_keep_tokens": 4096, "weight_load_timeout_s": 60},
                    "reuse_grades": False},
        "images": {"force": True, "github": True, "builds": 3, "base": {"source": "bootstrap"}},
        "validate_runs": 2, "grading_sandboxes": 5})
    stage = rollout_stage(tasks=tmp_path / "t.jsonl", repos=None, model="m", out=tmp_path / "o", samples=1, seed=0,
                          policy_version="0", sampler=params.sampler)
    engine = engine_config(stage)
    assert (engine.model, engine.dtype, engine.kv_keep_tokens, engine.weight_load_timeout_s) == ("m", "bfloat16", 4096, 60)
    assert rollout_config(stage).sampler.reuse_grades is False and isinstance(rollout_config(stage), RolloutConfig)
    images = image_config(ImagesStage(tasks=tmp_path / "t.jsonl", manifest=tmp_path / "m.json",
                                      **params.images.model_dump()))
    assert (images.force, images.github, images.builds, images.base.source) == (True, True, 3, "bootstrap")
    # as the pipeline's validation task builds it (tasks/images.py)
    validation = ValidationConfig(**part(params, ValidationSettings).model_dump(), cache_dir=Path("c"))
    assert (validation.validate_runs, validation.grading_sandboxes) == (2, 5)

"""The image settings (``ImageSettings``: CA certificates, GitHub, builds, base images, force) reach every image build:
a pipeline's rollouts and evaluations build (or find by tag) their images with the pipeline's ``images``, so that they
find the images its images stage built (a tag depends on the CA bundle's bytes and the base images); a standalone
rollout or evaluation with its own form's ``images``."""

from __future__ import annotations

from pathlib import Path

import flows.pipeline as pipeline_flow
from flows.rollout import rollout_stage
from swerl.envs.images import ImageConfig, ImageSettings
from swerl.orchestration.params import PipelineParams, SamplerParams
from swerl.orchestration.results import PipelineInputs, TrackedRun
from swerl.stages.images import ImagesStage, image_config
from swerl.stages.rollout import RolloutStage, rollout_images_stage


def _pem(tmp_path: Path) -> Path:
    pem = tmp_path / "proxy-ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return pem


def _rollout_images(stage: RolloutStage) -> ImageConfig:
    return image_config(rollout_images_stage(stage))


def _stage(tmp_path: Path, images: ImageSettings | None) -> RolloutStage:
    return rollout_stage(tasks=tmp_path / "t.jsonl", repos=tmp_path / "repos", model="m", out=tmp_path / "o", samples=1,
                         seed=0, policy_version="0", sampler=SamplerParams(), images=images)


def test_a_rollout_builds_its_images_with_the_image_settings_it_is_given(tmp_path):
    pem = _pem(tmp_path)
    images = ImageSettings.model_validate({"ca_certs": [str(pem)], "github": True, "builds": 5, "force": True,
                                           "base": {"source": "bootstrap"}})
    config = _rollout_images(_stage(tmp_path, images))
    assert (config.ca_certs, config.github, config.builds, config.force, config.base.source) == (
        [pem], True, 5, True, "bootstrap")
    assert (config.repos, config.build_logs) == (tmp_path / "repos", Path(".swerl/logs/builds"))
    # unset: the host's bundle, as before
    default = _rollout_images(_stage(tmp_path, None))
    assert default.ca_certs is None and default.model_dump(exclude={"repos", "build_logs"}) == ImageConfig().model_dump(
        exclude={"repos", "build_logs"})


def _pipeline(tmp_path: Path) -> tuple[PipelineParams, pipeline_flow.PipelineRun, PipelineInputs]:
    params = PipelineParams.model_validate({
        "run_root": str(tmp_path / "runs"),
        "images": {"ca_certs": [str(_pem(tmp_path))], "github": True, "builds": 3, "force": True,
                   "base": {"source": "bootstrap"}}})
    inputs = PipelineInputs(tasks=tmp_path / "t.jsonl", eval_tasks=tmp_path / "t.jsonl", repos=tmp_path / "repos", model="m")
    return params, pipeline_flow.PipelineRun(params, inputs, TrackedRun(run_id="r", experiment_id="e")), inputs


def _same_images_as_the_images_stage(params: PipelineParams, images: ImageSettings, tmp_path: Path) -> None:
    """``images`` make the rollout find what the pipeline's images stage built: every setting but ``force`` alike."""
    built = image_config(ImagesStage(tasks=tmp_path / "t.jsonl", repos=tmp_path / "repos", manifest=tmp_path / "m.json",
                                     **dict(params.images)))
    rolled = _rollout_images(_stage(tmp_path, images))
    assert rolled.model_dump(exclude={"force"}) == built.model_dump(exclude={"force"})
    assert rolled.ca_certs == [tmp_path / "proxy-ca.pem"] and (built.force, rolled.force) == (True, False)


def test_a_pipeline_s_rollouts_find_the_images_its_images_stage_built(tmp_path):
    params, run, _ = _pipeline(tmp_path)
    # PipelineRun.train, .sample and .evaluate hand every rollout these settings
    _same_images_as_the_images_stage(params, run.rollout_images, tmp_path)


def test_the_rollout_cli_fills_the_image_settings(tmp_path, monkeypatch):
    import swerl.cli.rollout as cli

    monkeypatch.setattr(cli, "docker_ready", lambda: None)
    pem = _pem(tmp_path)
    components = {"sampler": {"concurrency": 6}, "engine": {}, "agent": {}, "sampling": {}, "sandbox": {}, "grading": {}}
    stage = cli._stage(tmp_path / "t.jsonl", "m", 1, tmp_path / "o", None, [pem], 0, None, True, None, False,
                       tmp_path / "logs", components)
    # --ca-cert, and as many builds at once as sandboxes (-j), as before
    assert (stage.images.ca_certs, stage.images.builds) == ([pem], 6)

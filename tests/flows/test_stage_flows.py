"""The stage flows a user triggers on their own: build_images (cached by content), rollout
(resumable), grade (chunked, one result per prediction), against the test Prefect API."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_build_images_validates_once_and_a_rerun_grades_nothing(prefect_api, docker_ready, demo, task_slice, tmp_path):
    from flows.build_images import build_images
    from swerl.orchestration.params import BuildImagesParams

    params = BuildImagesParams(tasks=task_slice, repos=demo.repos_dir, manifest=tmp_path / "images.json", validate_runs=1)
    first = build_images(params, return_state=True)
    assert first.is_completed()
    out = first.result()
    assert (out.ready, out.validation.valid, out.validation.total) == (3, 3, 3)
    manifest = json.loads((tmp_path / "images.json").read_text())
    assert sorted(manifest) == sorted(json.loads(line)["instance_id"] for line in task_slice.read_text().splitlines())
    report = json.loads((tmp_path / "validation.json").read_text())
    (tmp_path / "validation.json").unlink()  # a run folder cleaned up: the rerun must write its report again
    again = build_images(params, return_state=True).result()
    assert (again.ready, again.validation.cached) == (3, 3)  # no image built, no task graded again
    assert again.validation.model_dump(include={"valid", "total", "invalid"}) == out.validation.model_dump(
        include={"valid", "total", "invalid"})
    assert json.loads((tmp_path / "validation.json").read_text())["tasks"] == report["tasks"]


def test_rollout_flow_stores_graded_trajectories_and_resumes(prefect_api, docker_ready, demo, task_slice, tiny_model_dir,
                                                             tmp_path):
    from flows.rollout import rollout
    from swerl.orchestration.params import RolloutParams, SamplerParams, TrackingConfig
    from swerl.stages.rollout import stored_trajectories

    params = RolloutParams(model=str(tiny_model_dir), tasks=task_slice, repos=demo.repos_dir, out=tmp_path / "roll", samples=2,
                           sampler=SamplerParams(engine="scripted", agent={"max_turns": 20}, concurrency=3, chunk_size=2),
                           tracking=TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}"))
    first = rollout(params)
    assert (first.produced, first.skipped) == (6, 0)  # two chunks: 2 tasks and 1 task, 2 samples each
    stored = stored_trajectories(tmp_path / "roll" / "trajectories")
    assert len(stored) == 6 and all(t.resolved for t in stored)
    assert rollout(params).produced == 0


def test_chunked_rollout_keeps_to_the_stage_s_own_tasks(prefect_api, docker_ready, demo, task_slice, tiny_model_dir,
                                                        tmp_path):
    from prefect import flow

    from flows.rollout import rollout_stage, run_chunks
    from swerl.orchestration.params import SamplerParams
    from swerl.stages.rollout import stored_trajectories

    ids = [json.loads(line)["instance_id"] for line in task_slice.read_text().splitlines()]
    stage = rollout_stage(tasks=task_slice, repos=demo.repos_dir, model=str(tiny_model_dir), out=tmp_path / "roll",
                          samples=1, seed=0, policy_version="p0",
                          sampler=SamplerParams(engine="scripted", agent={"max_turns": 20}, concurrency=2))
    subset = stage.model_copy(update={"instance_ids": [ids[0], ids[2]]})
    out = flow(name="chunks-of-a-subset")(lambda: run_chunks(subset, chunk_size=1, timeout_s=600))()
    assert (out.produced, out.skipped) == (2, 0)  # two chunks of one task each, not three
    assert sorted(t.instance_id for t in stored_trajectories(tmp_path / "roll" / "trajectories")) == sorted([ids[0], ids[2]])


def test_grade_flow_writes_one_result_per_prediction(prefect_api, docker_ready, demo, demo_tasks, task_slice, tmp_path):
    from flows.grade import grade
    from swerl.orchestration.params import GradeParams

    ids = [json.loads(line)["instance_id"] for line in task_slice.read_text().splitlines()]
    preds = [{"instance_id": ids[0], "model_name_or_path": "gold", "model_patch": demo_tasks[ids[0]].patch},
             {"instance_id": ids[1], "model_name_or_path": "empty", "model_patch": ""},
             {"instance_id": "nobody__nothing-1", "model_name_or_path": "lost", "model_patch": "x"}]
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in preds) + "not json\n")
    with pytest.raises(ValueError, match=r"2 bad prediction line\(s\) were skipped: .*line 3: instance_id 'nobody__nothing-1' "
                       r"is not in the task file.*line 4: not valid JSON"):
        grade(GradeParams(predictions=path, tasks=task_slice, repos=demo.repos_dir, out=tmp_path / "results.jsonl",
                          chunk_size=2))
    out = grade(GradeParams(predictions=path, tasks=task_slice, repos=demo.repos_dir, out=tmp_path / "results.jsonl",
                            chunk_size=2, skip_invalid=True))
    assert (out.resolved, out.total) == (1, 2)
    results = {r["instance_id"]: r for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert results[ids[0]]["resolved"] is True and results[ids[0]]["failure_class"] is None
    assert results[ids[1]]["failure_class"] == "no_patch"
    assert "nobody__nothing-1" not in results  # a bad line is never graded as the agent's failure
    assert not list(tmp_path.glob("results.part*"))

"""The Prefect UI renders a deployment's parameter schema as its run form: only what a user
sets, each field with a description; a pipeline's internal wiring is never a form field."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = {d["name"]: d for d in yaml.safe_load((ROOT / "deployments/prefect.yaml").read_text())["deployments"]}
INTERNAL = {"parent_run_id", "stage", "step", "container_label", "policy_version"}


def _flow(entrypoint: str):
    path, name = entrypoint.split(":")
    return getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)


def _schema(entrypoint: str) -> dict:
    from prefect.utilities.callables import parameter_schema

    return parameter_schema(_flow(entrypoint).fn).model_dump()


def _fields(schema: dict) -> dict[str, dict]:
    """Every form field: the flow's parameters and each nested model's, as ``Model.field``."""
    fields = {f"<flow>.{k}": v for k, v in schema["properties"].items()}
    for model, definition in (schema.get("definitions") or {}).items():
        fields.update({f"{model}.{k}": v for k, v in (definition.get("properties") or {}).items()})
    return fields


def test_the_three_deployments_are_the_ones_a_user_runs():
    assert {n: d["entrypoint"] for n, d in DEPLOYMENTS.items()} == {
        "pipeline": "flows/pipeline.py:pipeline", "build-images": "flows/build_images.py:build_images",
        "evaluate": "flows/evaluate.py:evaluate"}


@pytest.mark.parametrize("deployment", sorted(DEPLOYMENTS))
def test_a_form_has_one_params_field_and_every_field_has_a_description(deployment):
    schema = _schema(DEPLOYMENTS[deployment]["entrypoint"])
    assert list(schema["properties"]) == ["params"]
    undescribed = sorted(name for name, field in _fields(schema).items() if not field.get("description"))
    assert undescribed == []


def test_the_evaluate_form_holds_no_pipeline_wiring():
    schema = _schema(DEPLOYMENTS["evaluate"]["entrypoint"])
    assert INTERNAL & {name.split(".", 1)[1] for name in _fields(schema)} == set()
    assert sorted(schema["definitions"]["EvaluateParams"]["properties"]) == [
        "force_promote", "images", "model", "out", "promote", "repos", "runs", "sampler", "seed", "tasks", "tracking"]
    # the pipeline's evaluations go through a flow of the same name that takes the wiring
    from flows.evaluate import evaluate, evaluate_stage

    assert evaluate.name == evaluate_stage.name == "evaluate"
    assert INTERNAL <= set(_schema("flows/evaluate.py:evaluate_stage")["properties"])


@pytest.mark.parametrize("deployment", sorted(DEPLOYMENTS))
def test_a_deployments_parameters_fill_its_form(deployment):
    """They validate as a run's would (a schedule's too)."""
    spec = DEPLOYMENTS[deployment]
    flow = _flow(spec["entrypoint"])
    assert set(flow.validate_parameters(spec.get("parameters") or {})) <= {"params"}
    for schedule in spec.get("schedules") or []:
        flow.validate_parameters(schedule["parameters"])


def test_a_deployed_evaluation_run_is_named_for_the_policy_it_scores():
    from flows.evaluate import evaluate
    from swerl.orchestration.params import EvaluateParams

    assert evaluate.flow_run_name.format(params=EvaluateParams()) == "evaluate-champion"
    assert evaluate.flow_run_name.format(params=EvaluateParams(model="version:3")) == "evaluate-version:3"


@pytest.mark.parametrize("deployment", sorted(DEPLOYMENTS))
def test_every_form_description_renders_literally(deployment):
    # `OUT/<label>-<date>/` outside a code span is HTML to a Markdown renderer, and Prefect's drops it
    from tests.support.markdown_render import rendered

    eaten = {name: foreign for name, field in _fields(_schema(DEPLOYMENTS[deployment]["entrypoint"])).items()
             if (foreign := rendered(field.get("description") or "")[1])}
    assert eaten == {}

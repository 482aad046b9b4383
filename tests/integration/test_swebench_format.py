"""SWE-bench 5 records (image, eval_script, log_parser, eval_type, no install_config) graded exactly right.

The demo tasks are turned into SWE-bench 5 records whose images have SWE-bench's layout (the
repository in /testbed, Python in the conda environment /opt/miniconda3/envs/testbed, nothing
on PATH until activation); swerl's verdict on every kept log must equal swebench's own.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from swerl.data.loaders import load_tasks
from swerl.demo.conda_layout import ENV_PREFIX
from swerl.demo.swebench_format import materialize_swebench_demo
from swerl.envs import labels
from swerl.grading.grader import GradingConfig, grade_many
from swerl.grading.validate import ValidationConfig, validate_tasks

pytestmark = pytest.mark.docker

SUBSET = ["eventbus", "ledger", "pagekit"]  # three tasks: one and two test files, small fixes
ACTIVATE = "source /opt/miniconda3/bin/activate && conda activate testbed"


@pytest.fixture(scope="module")
def swebench_sets(docker_ready, tmp_path_factory) -> dict[str, Path]:
    """One records file per eval type; the second finds the first's images by their content tags."""
    root = tmp_path_factory.mktemp("swebench")
    logs = root / "build-logs"
    return {eval_type: materialize_swebench_demo(root / eval_type, eval_type=eval_type, slugs=SUBSET, log_dir=logs)
            for eval_type in ("pass_and_fail", "fail_only")}


@pytest.fixture(scope="module")
def records(swebench_sets) -> dict[str, list[dict]]:
    return {k: [json.loads(line) for line in path.read_text().splitlines()] for k, path in swebench_sets.items()}


@pytest.fixture(scope="module")
def tasks(swebench_sets):
    return {k: load_tasks(path).tasks for k, path in swebench_sets.items()}


def docker_run(image: str, script: str, run_id: str) -> subprocess.CompletedProcess:
    """``bash -c script`` in a throw-away container of ``image``, without network, labelled as ours."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--label", f"{labels.MANAGED}=1",
         "--label", f"{labels.RUN_ID}={run_id}", "--label", f"{labels.KIND}=test", image, "bash", "-c", script],
        capture_output=True, text=True, timeout=300,
    )


def test_records_are_swebench_5_records_and_load_without_install_config(records, tasks):
    from swebench.harness.utils import make_test_spec
    from swebench.utils import get_modified_files

    for eval_type, rows in records.items():
        assert [r["instance_id"] for r in rows] == [f"swerl-demo__{s}-1" for s in SUBSET]
        for r in rows:
            assert "install_config" not in r
            assert (r["eval_type"], r["log_parser"], r["image_assets"]) == (eval_type, "parse_log_pytest", "{}")
            assert isinstance(r["FAIL_TO_PASS"], str) and json.loads(r["FAIL_TO_PASS"])
            assert isinstance(r["PASS_TO_PASS"], str)
            script = r["eval_script"]
            assert script.startswith("#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\n"
                                     "conda activate testbed\ncd /testbed\n")
            assert f"git -c core.fileMode=false diff {r['base_commit']}\n" in script
            assert f"git apply -v - <<'EOF_114329324912'\n{r['test_patch']}\nEOF_114329324912\n" in script
            reset = f"git checkout {r['base_commit']} " + " ".join(get_modified_files(r["test_patch"]))
            directives = " ".join(p for p in get_modified_files(r["test_patch"]))
            assert f"\n{reset}\ngit apply -v - <<'EOF_114329324912'\n" in script
            assert script.endswith(f"\n: '>>>>> Start Test Output'\npytest -rA {directives}\n"
                                   f": '>>>>> End Test Output'\n{reset}\n")
            spec = make_test_spec(r)  # swebench reads the record as is, and finds where to record the exit code
            assert "SWEBENCH_TEST_EXIT_CODE=$?" in spec.eval_script_list
        # same images whatever the eval type: they are found by content
        assert [r["image"] for r in rows] == [r["image"] for r in records["pass_and_fail"]]
    for eval_type, loaded in tasks.items():
        assert len(loaded) == len(SUBSET)
        for task in loaded:
            assert "install_config" not in task.model_fields_set
            assert task.eval_script and task.image and task.prebuilt_image == task.image
            assert (task.eval_type, task.parser_name, task.image_assets) == (eval_type, "parse_log_pytest", {})
            assert task.FAIL_TO_PASS and isinstance(task.FAIL_TO_PASS, list)


def test_the_image_needs_activation_like_swebench_images(records, run_id):
    image = records["pass_and_fail"][0]["image"]
    bare = docker_run(image, "python3 -c 'import pytest'", run_id)
    assert bare.returncode != 0 and "No module named 'pytest'" in bare.stderr
    assert docker_run(image, "python -m pytest --version", run_id).returncode != 0
    # what the eval script does, under its own `set -u`
    got = docker_run(image, "set -uxo pipefail; source /opt/miniconda3/bin/activate; conda activate testbed; "
                            "cd /; python3 -c 'import pytest, sys, eventbus; print(sys.prefix, eventbus.__file__)'; "
                            "echo \"env=$CONDA_DEFAULT_ENV prefix=$CONDA_PREFIX\"; conda deactivate; conda deactivate; "
                            "python3 -c 'import pytest' || echo deactivated", run_id)
    assert got.returncode == 0, got.stderr[-2000:]
    lines = got.stdout.splitlines()
    assert lines[0] == f"{ENV_PREFIX} /testbed/eventbus/__init__.py"  # installed editable from /testbed
    assert lines[1] == f"env=testbed prefix={ENV_PREFIX}"
    assert lines[-1] == "deactivated"
    # a shell that inherited an activation (no `conda` function) can source and activate again
    again = docker_run(image, f"{ACTIVATE} && bash -c '{ACTIVATE} && conda info --envs && command -v python'", run_id)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{ENV_PREFIX}/bin/python" in again.stdout.splitlines()[-1]
    assert f"{'testbed':<25} * {ENV_PREFIX}" in again.stdout
    unknown = docker_run(image, "source /opt/miniconda3/bin/activate && conda activate nowhere", run_id)
    assert unknown.returncode != 0 and "Could not find conda environment: nowhere" in unknown.stderr
    # the installation's leftovers are no change of the agent's
    clean = docker_run(image, "cd /testbed && git status --porcelain && git log --oneline | wc -l", run_id)
    assert clean.stdout == "1\n", clean.stdout + clean.stderr


@pytest.mark.parametrize("eval_type", ["pass_and_fail", "fail_only"])
def test_gold_resolves_empty_does_not_and_every_verdict_is_swebenchs(eval_type, records, tasks, tmp_path):
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    by_id = {r["instance_id"]: r for r in records[eval_type]}
    jobs = [(t, patch, t.image, kind) for t in tasks[eval_type] for kind, patch in (("gold", t.patch), ("empty", ""))]
    results = grade_many(jobs, GradingConfig(grading_logs=tmp_path, run_tests_without_patch=True), concurrency=2)
    for (task, patch, _, kind), res in zip(jobs, results):
        assert res.failure_class is None or res.failure_class.value != "infra_error", res.reason
        assert res.resolved is (kind == "gold"), (task.instance_id, kind, res.reason)
        log = Path(res.log_dir) / "test_output.txt"
        assert log.is_file() and Path(res.log_dir).parent == tmp_path / task.instance_id
        record = by_id[task.instance_id]
        prediction = {"instance_id": task.instance_id, "model_name_or_path": kind, "model_patch": patch}
        report = get_eval_report(make_test_spec(record), prediction, str(log), include_tests_status=True)
        assert report[task.instance_id]["resolved"] is res.resolved, (task.instance_id, kind, report)


def test_swerl_grade_takes_the_records_as_published_and_uses_their_images(swebench_sets, tasks, tmp_path):
    import sys

    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"instance_id": t.instance_id, "model_name_or_path": "gold", "model_patch": t.patch}) + "\n"
                             for t in tasks["pass_and_fail"]))
    out = tmp_path / "results.jsonl"
    proc = subprocess.run([sys.executable, "-m", "swerl.cli", "grade", "--tasks", str(swebench_sets["pass_and_fail"]),
                           "--predictions", str(preds), "--out", str(out), "--log-dir", str(tmp_path / "logs")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["instance_id"], r["resolved"], r["image"]) for r in rows] == [
        (t.instance_id, True, t.image) for t in tasks["pass_and_fail"]]
    assert not list((tmp_path / "logs").glob("builds/swerl-env*"))  # nothing was built: the records' images are used


def test_validation_marks_every_task_valid(tasks):
    loaded = tasks["pass_and_fail"]
    report = validate_tasks(loaded, {t.instance_id: t.image for t in loaded}, ValidationConfig(validate_runs=1))
    assert (report.total, report.valid, report.invalid) == (len(SUBSET), len(SUBSET), 0), \
        [(v.instance_id, v.reason) for v in report.tasks if not v.valid]


@pytest.mark.slow
def test_scripted_rollouts_resolve_every_task_in_an_activated_sandbox(tasks, tok, chat, tmp_path):
    from swerl.inference.scripted import ScriptedEngine, script_from_patch
    from swerl.rollout.runner import RolloutConfig, rollout
    from swerl.rollout.sampler import SamplerConfig
    from swerl.rollout.store import TrajectoryStore

    loaded = tasks["pass_and_fail"]
    probe = "Which Python is this?\n```\npython -c 'import sys; print(sys.prefix)'\n```"
    engine = ScriptedEngine(tok, {t.instance_id: [probe, *script_from_patch(t.patch)] for t in loaded})
    config = RolloutConfig(samples=1, sampler=SamplerConfig(concurrency=2, grading=GradingConfig(grading_logs=tmp_path / "grading")))
    config.sampler.sandbox.run_id = f"test-{uuid.uuid4().hex[:8]}"
    summary = rollout(loaded, {t.instance_id: t.image for t in loaded}, engine, chat, config, tmp_path / "traj")
    assert summary.exit_reasons == {"submitted": len(loaded)}
    assert summary.resolved == summary.graded == len(loaded)
    for traj in TrajectoryStore(tmp_path / "traj").trajectories():
        assert traj.resolved and traj.grade_failure is None
        assert traj.turns[0].exit_code == 0 and traj.turns[0].observation.startswith(f"{ENV_PREFIX}\n"), traj.turns[0]

"""Verdicts kept on disk by content (swerl.grading.verdict_store), as the rollouts' grade cache uses them."""

import hashlib

from swerl.data.task import Task
from swerl.grading.grader import GradingConfig
from swerl.grading.results import FailureClass, GradeResult
from swerl.grading.verdict_store import JsonVerdictStore, content_key, grading_settings

TASK = Task(instance_id="o__r-1", repo="o/r", base_commit="b" * 40, install_config={}, FAIL_TO_PASS=["t.py::fix"], PASS_TO_PASS=[])
PATCH = hashlib.sha256(b"diff --git a/x b/x").hexdigest()


def key(task: Task = TASK, image: str = "img:1", patch: str = PATCH, grading: GradingConfig = GradingConfig()) -> str:
    return content_key("swerl-grade-v1", task, image, patch, grading_settings(grading))


def test_the_key_covers_the_task_record_image_patch_and_grading_settings():
    assert key() == key()
    others = [key(task=TASK.model_copy(update={"PASS_TO_PASS": ["t.py::old"]})), key(image="img:2"),
              key(patch=hashlib.sha256(b"other").hexdigest()), key(grading=GradingConfig(test_timeout_s=60.0)),
              key(grading=GradingConfig(canaries=False))]
    assert len({key(), *others}) == 6


def test_where_logs_go_and_which_run_labels_the_sandboxes_leave_the_key_alone(tmp_path):
    relabelled = GradingConfig(grading_logs=tmp_path / "logs")
    relabelled.sandbox.run_id = "run-42"
    assert key(grading=relabelled) == key()


def test_a_kept_verdict_reads_back_equal_and_a_damaged_or_absent_one_reads_as_none(tmp_path):
    store = JsonVerdictStore(tmp_path, GradeResult)
    result = GradeResult(instance_id="o__r-1", resolved=False, failure_class=FailureClass.TESTS_FAILED, reason="t.py::fix failed")
    store.put(key(), result)
    assert store.get(key()) == result
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [key()[:2], f"{key()[:2]}/{key()}.json"]
    (tmp_path / key()[:2] / f"{key()}.json").write_text('{"instance_id": 3', encoding="utf-8")
    assert store.get(key()) is None and store.get("0" * 64) is None

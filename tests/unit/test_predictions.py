"""Reading SWE-bench predictions: a bad line is reported by number and never graded."""

import json

from swerl.grading.predictions import read_predictions


def test_bad_lines_are_reported_in_file_order_and_left_out(tmp_path):
    path = tmp_path / "preds.jsonl"
    rows = [
        {"instance_id": "a__b-1", "model_name_or_path": "m", "model_patch": "diff"},
        {"instance_id": "a__b-1", "model_name_or_path": "m", "patch": "diff"},
        {"model_name_or_path": "m", "model_patch": ""},
        {"instance_id": "c__d-9", "model_name_or_path": "m", "model_patch": ""},
        {"instance_id": "a__b-1", "model_name_or_path": None, "model_patch": None},
        {"instance_id": "a__b-1", "model_name_or_path": "m"},
        {"instance_id": "a__b-1", "model_name_or_path": "m", "model_patch": 7},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n{oops\n" + "\n".join(json.dumps(r) for r in rows[2:]) + "\n")
    preds, bad = read_predictions(path, known_ids={"a__b-1"})
    assert [(p.instance_id, p.model_name_or_path, p.model_patch) for p in preds] == [("a__b-1", "m", "diff"), ("a__b-1", "", None)]
    assert bad == [
        f"{path} line 2: has 'patch' but no 'model_patch': SWE-bench predictions carry the diff as model_patch "
        "('patch' is a task's gold patch); rename the key",
        f"{path} line 3: not valid JSON (Expecting property name enclosed in double quotes)",
        f"{path} line 4: bad or missing field(s) instance_id (each prediction names the task it answers)",
        f"{path} line 5: instance_id 'c__d-9' is not in the task file (check the --tasks file or the id)",
        f"{path} line 7: bad or missing field(s) model_patch (the diff to grade; null for no patch)",
        f"{path} line 8: model_patch must be a diff string or null, got int",
    ]


def test_without_known_ids_any_instance_is_accepted(tmp_path):
    path = tmp_path / "preds.json"
    path.write_text(json.dumps({"x__y-1": {"instance_id": "x__y-1", "model_patch": ""}}))
    preds, bad = read_predictions(path)
    assert ([p.instance_id for p in preds], bad) == (["x__y-1"], [])


def test_a_failed_image_build_names_its_cause_not_only_the_daemons_exit_code(tmp_path):
    from swerl.envs.docker_build import ImageBuildError

    tail = ["Obtaining file:///testbed\n", "  error: subprocess-exited-with-error\n",
            "    ModuleNotFoundError: No module named 'setuptools'\n", "  note: This error originates from a subprocess\n",
            "ERROR: The command '/bin/sh -c pip install -e .' returned a non-zero code: 1\n"]
    err = ImageBuildError("swerl-instance:x", "The command '/bin/sh -c pip install -e .' returned a non-zero code: 1",
                          tmp_path / "build.log", tail)
    assert str(err).splitlines()[0] == (
        "building swerl-instance:x failed: ModuleNotFoundError: No module named 'setuptools' (The command '/bin/sh -c "
        f"pip install -e .' returned a non-zero code: 1) (full log: {tmp_path / 'build.log'})")

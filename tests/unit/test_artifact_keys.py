"""Prefect artifact keys from pipeline names and model labels: only lowercase letters, digits and dashes."""

from prefect.artifacts import Artifact

from swerl.orchestration.artifact_keys import artifact_key


def test_capitals_dots_and_underscores_become_dashes():
    assert artifact_key("summary", "My_Run.v2") == "summary-my-run-v2"
    assert artifact_key("eval", "Qwen2.5-0.5B__step_3") == "eval-qwen2-5-0-5b-step-3"


def test_a_long_name_is_cut_to_sixty_characters_without_a_trailing_dash():
    key = artifact_key("metrics", "a" * 52 + "_b" * 10)
    assert key == "metrics-" + "a" * 52 and len(key) == 60


def test_every_key_is_one_prefect_accepts():
    for name in ("demo", "My_Run.v2", "x" * 100, "learning-s0", "A.B_C"):
        Artifact(key=artifact_key("lineage", name), type="markdown", data="d")  # raises on a bad key

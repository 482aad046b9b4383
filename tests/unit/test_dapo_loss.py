"""The DAPO loss: clipped per-token objective, token-level normalisation, masks and metrics."""

from __future__ import annotations

import math

import pytest
import torch

from swerl.rl.loss import clipped_objective, dapo_loss, neg_capped

EPS_LOW, EPS_HIGH = 0.2, 0.3  # the paper's stage 1: rho is clipped to [0.8, 1.3]

# one action token per row, at column 1; columns 0 and 2 are observation tokens
RATIOS = [0.5, 0.5, 2.0, 2.0, 1.1]
ADVANTAGES = [-1.0, 1.0, 1.0, -1.0, 1.0]


def five_cases():
    """(logprobs [5, 3] leaf, old_logprobs, advantages [5], action_mask) with rho = RATIOS on the action tokens."""
    old = torch.full((5, 3), -1.0, dtype=torch.float64)
    new = old.clone()
    new[:, 1] = old[:, 1] + torch.log(torch.tensor(RATIOS, dtype=torch.float64))
    new[:, 0], new[:, 2] = 100.0, -100.0  # junk on observation tokens: exp(101) must not leak into the loss
    mask = torch.tensor([[0, 1, 0]] * 5)
    return new.requires_grad_(), old, torch.tensor(ADVANTAGES, dtype=torch.float64), mask


def test_clipped_objective_per_token_values():
    ratio = torch.tensor(RATIOS, dtype=torch.float64)
    adv = torch.tensor(ADVANTAGES, dtype=torch.float64)
    obj = clipped_objective(ratio, adv, EPS_LOW, EPS_HIGH)
    assert obj.tolist() == pytest.approx([
        -0.8,  # rho 0.5 < 0.8, A < 0: min(-0.5, -0.8) -> the low clip binds
        0.5,  # rho 0.5 < 0.8, A > 0: min(0.5, 0.8) -> unclipped, the gradient still pushes rho up
        1.3,  # rho 2.0 > 1.3, A > 0: min(2.0, 1.3) -> the high clip binds
        -2.0,  # rho 2.0 > 1.3, A < 0: min(-2.0, -1.3) -> unclipped, the gradient still pushes rho down
        1.1,  # inside [0.8, 1.3]: rho * A
    ], abs=1e-15)


def test_loss_gradient_and_clip_fractions_worked_example():
    logprobs, old, adv, mask = five_cases()
    loss, m = dapo_loss(logprobs, old, adv, mask, EPS_LOW, EPS_HIGH)
    # -(-0.8 + 0.5 + 1.3 - 2.0 + 1.1) / 5 action tokens
    assert loss.item() == pytest.approx(-0.02, abs=1e-15)
    loss.backward()
    # d loss / d logprob = -(rho * A) / 5 where unclipped, 0 where the clip binds, exactly 0 off the action tokens
    assert logprobs.grad[:, 1].tolist() == pytest.approx([0.0, -0.1, 0.0, 0.4, -0.22], abs=1e-15)
    assert logprobs.grad[:, [0, 2]].eq(0).all()
    assert (m["clip_frac_low"].item(), m["clip_frac_high"].item()) == (0.2, 0.2)
    assert m["action_tokens"].item() == 5
    assert m["ratio_mean"].item() == pytest.approx(1.22, abs=1e-14)
    assert (m["ratio_min"].item(), m["ratio_max"].item()) == pytest.approx((0.5, 2.0), abs=1e-15)
    # k3 = (rho - 1) - log rho, averaged over the five action tokens
    k3 = [(r - 1) - math.log(r) for r in RATIOS]
    assert m["approx_kl"].item() == pytest.approx(sum(k3) / 5, abs=1e-15)
    assert sorted(m) == ["action_tokens", "approx_kl", "clip_frac_high", "clip_frac_low", "pg_loss", "ratio_max", "ratio_mean",
                         "ratio_min"]  # no entropy without its input, and no KL-to-reference term at all


def test_entropy_metric_is_the_mean_over_action_tokens():
    logprobs, old, adv, mask = five_cases()
    entropy = torch.tensor([[9.0, 1.0, 9.0], [9.0, 2.0, 9.0], [9.0, 3.0, 9.0], [9.0, 4.0, 9.0], [9.0, 5.0, 9.0]])
    _, m = dapo_loss(logprobs, old, adv, mask, entropy=entropy)
    assert m["entropy"].item() == 3.0


def random_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 3
    new = old + (torch.rand(4, 6, generator=g, dtype=torch.float64) - 0.5)  # rho in [0.61, 1.65]: some clipped
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [0, 1, 1, 1, 1, 0], [0, 0, 0, 1, 0, 0], [0, 1, 0, 1, 1, 1]])
    adv = torch.tensor([0.9, -0.9, 1.5, -0.4], dtype=torch.float64)
    return new, old, adv, mask


def test_micro_batches_normalised_by_the_global_count_reproduce_the_full_batch():
    new, old, adv, mask = random_batch()
    full_lp = new.clone().requires_grad_()
    full, _ = dapo_loss(full_lp, old, adv, mask)
    full.backward()

    split_lp = new.clone().requires_grad_()
    n = int(mask.sum())  # 12 action tokens in the whole batch
    total = torch.zeros((), dtype=torch.float64)
    for rows in ([0, 1], [2, 3]):
        part, _ = dapo_loss(split_lp[rows], old[rows], adv[rows], mask[rows], norm_tokens=n)
        part.backward()  # gradients accumulate in split_lp.grad
        total = total + part.detach()
    assert torch.allclose(total, full.detach(), atol=1e-7, rtol=0)
    assert torch.allclose(split_lp.grad, full_lp.grad, atol=1e-7, rtol=0)
    # without the global count each half is its own mean, and the sum is not the batch loss
    a, _ = dapo_loss(new[[0, 1]], old[[0, 1]], adv[[0, 1]], mask[[0, 1]])
    b, _ = dapo_loss(new[[2, 3]], old[[2, 3]], adv[[2, 3]], mask[[2, 3]])
    assert not torch.allclose(a + b, full.detach())


def test_sequence_aggregation_weights_sequences_not_tokens():
    # row 0: one action token with rho 1, A = +1; row 1: three action tokens with rho 1, A = -1
    lp = torch.zeros(2, 4, dtype=torch.float64)
    mask = torch.tensor([[0, 1, 0, 0], [0, 1, 1, 1]])
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    token, _ = dapo_loss(lp, lp, adv, mask)
    sequence, _ = dapo_loss(lp, lp, adv, mask, aggregation="sequence")
    assert token.item() == 0.5  # -(1 - 3) / 4 tokens
    assert sequence.item() == 0.0  # -(1 + (-1)) / 2 sequences
    half, _ = dapo_loss(lp[:1], lp[:1], adv[:1], mask[:1], aggregation="sequence", norm_sequences=2)
    assert half.item() == -0.5  # row 0's mean -1, over the 2 sequences of the whole batch


def test_inconsistent_arguments_are_refused():
    logprobs, old, adv, mask = five_cases()
    with pytest.raises(ValueError, match="norm_tokens goes with aggregation='token'"):
        dapo_loss(logprobs, old, adv, mask, aggregation="sequence", norm_tokens=10)
    with pytest.raises(ValueError, match="aggregation must be 'token' or 'sequence', got 'sample'"):
        dapo_loss(logprobs, old, adv, mask, aggregation="sample")


def test_neg_prob_cap_leaves_out_the_sure_tokens_of_negative_samples_but_keeps_them_in_the_normaliser():
    # rows: A < 0 drawn at p_old 0.9 (sure: left out), A < 0 at p_old 0.3 (kept), A > 0 at p_old 0.9 (kept)
    old = torch.log(torch.tensor([[0.9], [0.3], [0.9]], dtype=torch.float64))
    new = (old + math.log(1.1)).requires_grad_()  # rho = 1.1 everywhere: inside the clip range
    adv, mask = torch.tensor([-1.0, -1.0, 1.0], dtype=torch.float64), torch.ones(3, 1)
    loss, metrics = dapo_loss(new, old, adv, mask, EPS_LOW, EPS_HIGH, neg_prob_cap=0.5)
    assert loss.item() == pytest.approx(-(0.0 - 1.1 + 1.1) / 3, abs=1e-15)
    loss.backward()
    assert new.grad[:, 0].tolist() == pytest.approx([0.0, 1.1 / 3, -1.1 / 3], abs=1e-15)
    assert metrics["neg_capped_frac"].item() == pytest.approx(1 / 3)
    full, full_metrics = dapo_loss(new.detach(), old, adv, mask, EPS_LOW, EPS_HIGH)
    assert full.item() == pytest.approx(-(-1.1 - 1.1 + 1.1) / 3, abs=1e-15) and "neg_capped_frac" not in full_metrics


def test_neg_prob_cap_of_one_is_the_papers_loss_bit_for_bit():
    new, old, adv, mask = five_cases()
    assert torch.equal(dapo_loss(new, old, adv, mask, EPS_LOW, EPS_HIGH, neg_prob_cap=1.0)[0],
                       dapo_loss(new, old, adv, mask, EPS_LOW, EPS_HIGH)[0])


def test_kl_coef_adds_grpos_k3_penalty_against_the_sampler_with_its_exact_gradient():
    logprobs, old, adv, mask = five_cases()
    loss, m = dapo_loss(logprobs, old, adv, mask, EPS_LOW, EPS_HIGH, kl_coef=0.04)
    # GRPO's k3 with pi_ref the sampler: r = pi_ref / pi_theta = 1 / rho, k3 = r - log r - 1 per action token
    k3 = [1 / rho + math.log(rho) - 1 for rho in RATIOS]
    assert m["ref_kl"].item() == pytest.approx(sum(k3) / 5, abs=1e-15)
    assert m["pg_loss"].item() == pytest.approx(-0.02, abs=1e-15)  # the policy term alone, as without the penalty
    assert loss.item() == pytest.approx(-0.02 + 0.04 * sum(k3) / 5, abs=1e-15)
    loss.backward()
    # d k3 / d log pi_theta = 1 - 1 / rho; the policy term's gradient is the worked example's
    policy = [0.0, -0.1, 0.0, 0.4, -0.22]
    assert logprobs.grad[:, 1].tolist() == pytest.approx([g + 0.04 * (1 - 1 / rho) / 5 for g, rho in zip(policy, RATIOS)],
                                                         abs=1e-15)
    assert logprobs.grad[:, [0, 2]].eq(0).all()  # junk observation log-probs stay out of the penalty too


def test_kl_penalty_is_zero_with_zero_gradient_where_the_policy_has_not_moved():
    lp = torch.full((2, 3), -0.7, dtype=torch.float64, requires_grad=True)
    adv, mask = torch.tensor([1.0, -1.0], dtype=torch.float64), torch.tensor([[0, 1, 1], [0, 1, 0]])
    with_kl, m = dapo_loss(lp, lp.detach(), adv, mask, kl_coef=0.5)
    without, _ = dapo_loss(lp, lp.detach(), adv, mask)
    assert with_kl.item() == without.item() and m["ref_kl"].item() == 0.0
    (grad_kl,) = torch.autograd.grad(with_kl, lp)
    (grad,) = torch.autograd.grad(without, lp)
    assert torch.equal(grad_kl, grad)


def test_kl_penalty_follows_the_sequence_aggregation():
    # row 0: one action token at rho 2; row 1: three action tokens at rho 1 (no penalty)
    old = torch.zeros(2, 4, dtype=torch.float64)
    new = old.clone()
    new[0, 1] = math.log(2.0)
    mask, adv = torch.tensor([[0, 1, 0, 0], [0, 1, 1, 1]]), torch.zeros(2, dtype=torch.float64)
    k3 = 0.5 + math.log(2.0) - 1
    token, _ = dapo_loss(new, old, adv, mask, kl_coef=1.0)
    sequence, _ = dapo_loss(new, old, adv, mask, aggregation="sequence", kl_coef=1.0)
    assert token.item() == pytest.approx(k3 / 4, abs=1e-15)  # over the batch's 4 action tokens
    assert sequence.item() == pytest.approx(k3 / 2, abs=1e-15)  # row 0's mean k3, over 2 sequences


def test_kl_coef_of_zero_is_the_papers_loss_bit_for_bit():
    new, old, adv, mask = five_cases()
    loss, metrics = dapo_loss(new, old, adv, mask, EPS_LOW, EPS_HIGH, kl_coef=0.0)
    assert torch.equal(loss, dapo_loss(new, old, adv, mask, EPS_LOW, EPS_HIGH)[0]) and "ref_kl" not in metrics


def test_neg_capped_marks_only_sure_action_tokens_of_negative_advantage():
    old = torch.log(torch.tensor([[0.9, 0.3, 0.9], [0.9, 0.9, 0.3]]))
    adv = torch.tensor([[-1.0], [1.0]]).expand(2, 3)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    assert neg_capped(mask, adv, old, 0.5).tolist() == [[True, False, False], [False, False, False]]


# --- off-policy data: decoupled PPO, a truncated importance weight between the sampler and the update's start ----------


def test_off_policy_tokens_are_clipped_against_the_update_s_start_and_weighted_by_the_truncated_ratio():
    logprobs, old, adv, mask = five_cases()  # rho against the sampler's log-probs: RATIOS
    # the update starts from a newer policy: pi_prox / pi_behav per action token, the last one past the cap of 2
    weights = [1.0, 1.5, 0.5, 1.0, 4.0]
    prox = old.clone()
    prox[:, 1] = old[:, 1] + torch.log(torch.tensor(weights, dtype=torch.float64))
    prox[:, 0], prox[:, 2] = 50.0, -50.0  # junk off the action tokens
    loss, m = dapo_loss(logprobs, old, adv, mask, EPS_LOW, EPS_HIGH, prox_logprobs=prox, is_cap=2.0)
    # rho = pi_theta / pi_prox = RATIOS / weights = [0.5, 1/3, 4.0, 2.0, 0.275]; clipped objective per token:
    #   min(-0.5, -0.8) = -0.8;  min(1/3, 0.8) = 1/3;  min(4.0, 1.3) = 1.3;  min(-2.0, -1.3) = -2.0;  min(0.275, 0.8) = 0.275
    # weighted by min(weights, 2) = [1, 1.5, 0.5, 1, 2]: -0.8 + 0.5 + 0.65 - 2.0 + 0.55 = -1.1, over 5 tokens
    assert loss.item() == pytest.approx(0.22, abs=1e-12)
    loss.backward()
    # d/d logprob of w * rho * A where unclipped: -(w * rho * A) / 5; clipped tokens get none
    assert logprobs.grad[:, 1].tolist() == pytest.approx([0.0, -0.1, 0.0, 0.4, -0.11], abs=1e-12)
    assert logprobs.grad[:, [0, 2]].eq(0).all()
    assert m["is_weight_mean"].item() == pytest.approx(1.2, abs=1e-12)  # (1 + 1.5 + 0.5 + 1 + 2) / 5
    assert m["is_truncated_frac"].item() == pytest.approx(0.2, abs=1e-15)
    # the low clip binds at rho 0.5 (A < 0), the high at rho 4.0 (A > 0); rho 2.0 with A < 0 is not clipped
    assert (m["clip_frac_low"].item(), m["clip_frac_high"].item()) == (0.2, 0.2)


def test_without_the_update_s_start_the_loss_is_the_synchronous_one_bit_for_bit():
    logprobs, old, adv, mask = random_batch(3)
    sync, sync_m = dapo_loss(logprobs, old, adv, mask, neg_prob_cap=0.7, kl_coef=0.05)
    again, again_m = dapo_loss(logprobs, old, adv, mask, neg_prob_cap=0.7, kl_coef=0.05, prox_logprobs=None, is_cap=5.0)
    assert torch.equal(sync, again) and sync_m.keys() == again_m.keys()
    assert all(torch.equal(sync_m[k], again_m[k]) for k in sync_m)


def test_a_start_equal_to_the_sampler_weighs_every_token_one_and_changes_no_value():
    logprobs, old, adv, mask = random_batch(4)
    sync, _ = dapo_loss(logprobs, old, adv, mask)
    same, m = dapo_loss(logprobs, old, adv, mask, prox_logprobs=old.clone())
    assert same.item() == sync.item() and m["is_weight_mean"].item() == 1.0 and m["is_truncated_frac"].item() == 0.0


def test_a_cap_below_one_is_refused():
    logprobs, old, adv, mask = five_cases()
    with pytest.raises(ValueError, match="is_cap must be at least 1"):
        dapo_loss(logprobs, old, adv, mask, prox_logprobs=old, is_cap=0.5)

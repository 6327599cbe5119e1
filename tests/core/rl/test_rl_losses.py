"""core.rl.losses: hand-computed numbers, and each reference library's formula (reimplemented in numpy from a
reading of its code; the comment names the file and function) as a named option, all under jax.jit."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.rl.losses import LossConfig, aggregate, clipped_surrogate, kl_estimate, policy_loss, value_loss


def jitted(fn, **static):
    return jax.jit(functools.partial(fn, **static))


# unequal lengths: 3 tokens, 1 token and an empty row
LOSS = np.array([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]], np.float32)
MASK = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], bool)


# ---------------------------------------------------------------------------------------------- references
def verl_agg_loss(loss_mat, loss_mask, loss_agg_mode, loss_scale_factor=None):
    """verl verl/trainer/ppo/core_algos.py agg_loss (dp_size 1, local batch)."""
    if loss_agg_mode == "token-mean":
        return (loss_mat * loss_mask).sum() / loss_mask.sum()
    seq_mask = (loss_mask.sum(-1) > 0).astype(float)
    if loss_agg_mode == "seq-mean-token-sum":
        return ((loss_mat * loss_mask).sum(-1) * seq_mask).sum() / seq_mask.sum()
    if loss_agg_mode == "seq-mean-token-mean":
        seq = (loss_mat * loss_mask).sum(-1) / (loss_mask.sum(-1) + 1e-8)
        return (seq * seq_mask).sum() / seq_mask.sum()
    factor = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
    return (loss_mat * loss_mask).sum() / factor  # "seq-mean-token-sum-norm": no division by the rows


def trl_loss(per_token_loss, mask, loss_type, max_completion_length=None):
    """TRL trl/trainer/grpo_trainer.py _compute_loss aggregation (one process, no accumulation)."""
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / np.maximum(mask.sum(-1), 1.0)).mean()
    if loss_type in ("bnpo", "dapo"):  # dapo: num_items_in_batch = the batch's completion tokens
        return (per_token_loss * mask).sum() / max(mask.sum(), 1.0)
    if loss_type == "dr_grpo":
        return (per_token_loss * mask).sum() / (per_token_loss.shape[0] * max_completion_length)
    raise ValueError(loss_type)


def tunix_aggregate_loss(per_token_loss, completion_mask, loss_agg_mode, norm=None):
    """tunix tunix/rl/common.py aggregate_loss (unpacked rows)."""
    if loss_agg_mode == "token-mean":
        return (per_token_loss * completion_mask).sum() / max(completion_mask.sum(), 1.0)
    counts = completion_mask.sum(-1)
    rows = max((counts > 0).sum(), 1)
    if loss_agg_mode == "sequence-mean-token-mean":
        return ((per_token_loss * completion_mask).sum(-1) / np.maximum(counts, 1.0)).sum() / rows
    if loss_agg_mode == "seq-mean-token-sum":
        return (per_token_loss * completion_mask).sum(-1).sum() / rows
    if loss_agg_mode == "sequence-mean-token-scale":
        return ((per_token_loss * completion_mask).sum(-1) / norm).sum() / rows
    raise ValueError(loss_agg_mode)


def openrlhf_aggregate_loss(loss, loss_mask, token_level_loss):
    """OpenRLHF openrlhf/models/loss.py aggregate_loss without global totals (masked means)."""
    if token_level_loss:
        return (loss * loss_mask).sum() / (loss_mask.sum() + 1e-8)
    counts = loss_mask.sum(-1)
    seq = (loss * loss_mask).sum(-1) / (counts + 1e-8)
    seq_mask = (counts > 0).astype(float)
    return (seq * seq_mask).sum() / (seq_mask.sum() + 1e-8)


def verl_policy_loss(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high,
                     clip_ratio_c):
    """verl core_algos.py compute_policy_loss_vanilla, per token before agg_loss, and pg_clipfrac."""
    neg_kl = np.clip(log_prob - old_log_prob, -20, 20)
    ratio = np.exp(neg_kl)
    l1 = -advantages * ratio
    l2 = -advantages * np.clip(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    c1 = np.maximum(l1, l2)
    clipfrac = ((l2 > l1) * response_mask).sum() / response_mask.sum()
    c2 = np.minimum(-advantages * clip_ratio_c, c1)
    return np.where(advantages < 0, c2, c1), clipfrac


def trl_policy_loss(per_token_logps, old_per_token_logps, advantages, epsilon_low, epsilon_high):
    """TRL grpo_trainer.py _compute_loss, loss_type "grpo"/"dapo" token-level: -min(c1 A, clamp(c1) A)."""
    coef_1 = np.exp(per_token_logps - old_per_token_logps)
    coef_2 = np.clip(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    return -np.minimum(coef_1 * advantages, coef_2 * advantages)


def openrlhf_policy_loss(log_probs, old_log_probs, advantages, clip_eps_low, clip_eps_high, dual_clip):
    """OpenRLHF openrlhf/models/loss.py PolicyLoss.forward ("ppo"), per token."""
    ratio = np.exp(np.clip(log_probs - old_log_probs, -20, 20))
    surr1 = ratio * advantages
    surr2 = np.clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high) * advantages
    if dual_clip is None:
        return -np.minimum(surr1, surr2)
    clip1 = np.minimum(surr1, surr2)
    clip2 = np.maximum(clip1, dual_clip * advantages)
    return -np.where(advantages < 0, clip2, clip1)


def verl_kl(logprob, ref_logprob, kl_penalty):
    """verl core_algos.py kl_penalty_forward: "kl" (k1), "mse" (k2), "low_var_kl" (k3, clamped)."""
    if kl_penalty == "kl":
        return logprob - ref_logprob
    if kl_penalty == "mse":
        return 0.5 * (logprob - ref_logprob) ** 2
    kl = np.clip(ref_logprob - logprob, -20, 20)
    return np.clip(np.exp(kl) - kl - 1, -10, 10)


def trl_kl(per_token_logps, ref_per_token_logps):
    """TRL grpo_trainer.py _compute_loss per_token_kl: exp(ref - logp) - (ref - logp) - 1 (no clamp)."""
    return np.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1


def openrlhf_kl(log_probs, log_probs_base, kl_estimator):
    """OpenRLHF openrlhf/models/utils.py compute_approx_kl: k1 / k2 / k3, every result clamped to +-10."""
    lr = log_probs - log_probs_base
    out = {"k1": lr, "k2": lr ** 2 / 2.0, "k3": np.exp(-lr) - 1 + lr}[kl_estimator]
    return np.clip(out, -10, 10)


def tunix_kl(per_token_logps, ref_per_token_logps, method):
    """tunix tunix/rl/common.py compute_kl_divergence (clamp_value None)."""
    if method == "kl":
        return per_token_logps - ref_per_token_logps
    if method == "mse_kl":
        return 0.5 * (per_token_logps - ref_per_token_logps) ** 2
    diff = ref_per_token_logps - per_token_logps
    return np.exp(diff) - diff - 1


def verl_value_loss(vpreds, returns, values, response_mask, cliprange_value, loss_agg_mode="token-mean"):
    """verl core_algos.py compute_value_loss (also TRL PPOTrainer's vf_loss and OpenRLHF's ValueLoss)."""
    clipped = np.clip(vpreds, values - cliprange_value, values + cliprange_value)
    l1, l2 = (vpreds - returns) ** 2, (clipped - returns) ** 2
    loss = 0.5 * verl_agg_loss(np.maximum(l1, l2), response_mask, loss_agg_mode)
    return loss, ((l2 > l1) * response_mask).sum() / response_mask.sum()


def openrlhf_value_loss(values, old_values, returns, action_mask, clip_eps, token_level_loss=True):
    """OpenRLHF loss.py ValueLoss.forward: old + clamp(v - old), max of squared errors, 0.5 * aggregate."""
    values_clipped = old_values + np.clip(values - old_values, -clip_eps, clip_eps)
    loss = np.maximum((values_clipped - returns) ** 2, (values - returns) ** 2)
    return 0.5 * openrlhf_aggregate_loss(loss, action_mask, token_level_loss)


# ----------------------------------------------------------------------------------------------- aggregation
def test_aggregation_hand_computed_unequal_lengths():
    want = {"token-mean": (1 + 2 + 3 + 4) / 4, "seq-mean-token-sum": (6 + 4) / 2,
            "seq-mean-token-mean": (2 + 4) / 2, "seq-mean-token-sum-norm": 10 / (3 * 8)}
    for mode, value in want.items():
        out = jitted(aggregate, mode=mode, max_response_tokens=8)(LOSS, MASK)
        np.testing.assert_allclose(out, value, rtol=1e-6, err_msg=mode)


def test_aggregation_matches_verl_tunix_openrlhf():
    rng = np.random.default_rng(0)
    loss = rng.normal(size=(5, 9)).astype(np.float32)
    mask = np.arange(9)[None] < np.array([9, 4, 1, 0, 6])[:, None]
    m = mask.astype(np.float32)
    agg = lambda mode, **kw: jitted(aggregate, mode=mode, **kw)(loss, mask)  # noqa: E731
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        np.testing.assert_allclose(agg(mode), verl_agg_loss(loss, m, mode), rtol=1e-5, err_msg=mode)
    # verl's token-sum-norm divides by the constant only: ours (and TRL's) also averages over the N rows
    np.testing.assert_allclose(agg("seq-mean-token-sum-norm", max_response_tokens=12) * 5,
                               verl_agg_loss(loss, m, "seq-mean-token-sum-norm", 12), rtol=1e-5)
    for ours, theirs in [("token-mean", "token-mean"), ("seq-mean-token-mean", "sequence-mean-token-mean"),
                         ("seq-mean-token-sum", "seq-mean-token-sum")]:
        np.testing.assert_allclose(agg(ours), tunix_aggregate_loss(loss, m, theirs), rtol=1e-5)
    np.testing.assert_allclose(agg("token-mean"), openrlhf_aggregate_loss(loss, m, True), rtol=1e-5)
    np.testing.assert_allclose(agg("seq-mean-token-mean"), openrlhf_aggregate_loss(loss, m, False), rtol=1e-5)


def test_aggregation_matches_trl_loss_types():
    rng = np.random.default_rng(1)
    loss = rng.normal(size=(4, 7)).astype(np.float32)
    mask = np.arange(7)[None] < np.array([7, 2, 5, 1])[:, None]  # TRL's "grpo" counts every row: none empty
    m = mask.astype(np.float32)
    for ours, loss_type in [("seq-mean-token-mean", "grpo"), ("token-mean", "bnpo"), ("token-mean", "dapo")]:
        np.testing.assert_allclose(jitted(aggregate, mode=ours)(loss, mask), trl_loss(loss, m, loss_type),
                                   rtol=1e-5, err_msg=loss_type)
    np.testing.assert_allclose(jitted(aggregate, mode="seq-mean-token-sum-norm", max_response_tokens=10)(loss, mask),
                               trl_loss(loss, m, "dr_grpo", 10), rtol=1e-5)
    # tunix's "sequence-mean-token-scale" equals it when no row is empty
    np.testing.assert_allclose(jitted(aggregate, mode="seq-mean-token-sum-norm", max_response_tokens=10)(loss, mask),
                               tunix_aggregate_loss(loss, m, "sequence-mean-token-scale", 10), rtol=1e-5)


def test_aggregation_errors():
    with pytest.raises(ValueError, match="mode='seq-sum'"):
        aggregate(LOSS, MASK, "seq-sum")
    with pytest.raises(ValueError, match="max_response_tokens=None"):
        aggregate(LOSS, MASK, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="mask shape"):
        aggregate(LOSS, MASK[:, :2])


# ------------------------------------------------------------------------------------------------ surrogate
def test_clipped_surrogate_hand_computed():
    ratio = np.array([[1.5, 0.5, 1.1, 5.0, 1.25, 0.7]], np.float32)
    adv = np.array([[1.0, -1.0, 1.0, -1.0, 1.0, 1.0]], np.float32)
    logp = np.log(ratio)
    old = np.zeros_like(logp)
    mask = np.ones_like(logp, bool)
    loss, frac = jitted(clipped_surrogate, clip_low=0.2)(logp, old, adv, mask)
    # 1.5, A>0 -> clipped at 1.2; 0.5, A<0 -> clipped at 0.8; 1.1 inside; 5, A<0 -> unclipped 5 (no dual
    # clip); 1.25, A>0 -> clipped at 1.2; 0.7, A>0 -> unclipped -0.7 (min of the objective)
    np.testing.assert_allclose(loss, [[-1.2, 0.8, -1.1, 5.0, -1.2, -0.7]], rtol=1e-6)
    np.testing.assert_allclose(frac, 3 / 6, rtol=1e-6)
    loss, frac = jitted(clipped_surrogate, clip_low=0.2, clip_high=0.28, dual_clip=3.0)(logp, old, adv, mask)
    np.testing.assert_allclose(loss, [[-1.28, 0.8, -1.1, 3.0, -1.25, -0.7]], rtol=1e-6)  # dual clip: -A * 3
    np.testing.assert_allclose(frac, 2 / 6, rtol=1e-6)
    mask[0, :3] = False
    loss, frac = jitted(clipped_surrogate)(logp, old, adv, mask)
    np.testing.assert_allclose(loss[0, :3], 0.0)
    np.testing.assert_allclose(frac, 1 / 3, rtol=1e-6)


def _random_batch(seed, N=4, L=10):
    rng = np.random.default_rng(seed)
    logp = -rng.random((N, L)).astype(np.float32) * 3
    old = logp + rng.normal(scale=0.4, size=(N, L)).astype(np.float32)
    ref = logp + rng.normal(scale=0.6, size=(N, L)).astype(np.float32)
    adv = rng.normal(size=(N, L)).astype(np.float32)
    mask = np.arange(L)[None] < rng.integers(1, L + 1, size=N)[:, None]
    ent = rng.random((N, L)).astype(np.float32) * 2
    return logp, old, ref, adv, mask, ent


def test_surrogate_matches_verl_trl_openrlhf():
    logp, old, _, adv, mask, _ = _random_batch(2)
    m = mask.astype(np.float32)
    ours, frac = jitted(clipped_surrogate, clip_low=0.2, clip_high=0.28, dual_clip=3.0)(logp, old, adv, mask)
    verl, verl_frac = verl_policy_loss(old, logp, adv, m, 0.2, 0.28, 3.0)
    np.testing.assert_allclose(ours, verl * m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(frac, verl_frac, rtol=1e-6)
    np.testing.assert_allclose(ours, openrlhf_policy_loss(logp, old, adv, 0.2, 0.28, 3.0) * m, rtol=1e-5, atol=1e-6)
    ours, _ = jitted(clipped_surrogate, clip_low=0.2, clip_high=0.28)(logp, old, adv, mask)
    np.testing.assert_allclose(ours, trl_policy_loss(logp, old, adv, 0.2, 0.28) * m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours, openrlhf_policy_loss(logp, old, adv, 0.2, 0.28, None) * m, rtol=1e-5,
                               atol=1e-6)


# ------------------------------------------------------------------------------------------------------- KL
def test_kl_estimators_hand_computed():
    logp = np.array([[-1.0, -2.0]], np.float32)
    ref = np.array([[-1.5, -1.0]], np.float32)  # d = logp - ref = 0.5, -1
    est = lambda name, **kw: jitted(kl_estimate, estimator=name, **kw)(logp, ref)  # noqa: E731
    np.testing.assert_allclose(est("k1"), [[0.5, -1.0]], rtol=1e-6)
    np.testing.assert_allclose(est("k2"), [[0.125, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(est("k3"), [[np.exp(-0.5) - 0.5, np.exp(1.0) - 2.0]], rtol=1e-6)
    for ours, verl_name in [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")]:
        np.testing.assert_array_equal(est(verl_name), est(ours))


def test_kl_k3_clamp_as_verl():
    logp = np.array([[-40.0, -1.0, -3.0]], np.float32)
    ref = np.array([[-1.0, -40.0, -1.0]], np.float32)  # ref - logp = 39 (clamped), -39, 2
    clamped = jitted(kl_estimate, estimator="k3")(logp, ref)
    np.testing.assert_allclose(clamped, verl_kl(logp, ref, "low_var_kl"), rtol=1e-5)
    np.testing.assert_allclose(clamped, [[10.0, 10.0, np.exp(2.0) - 3.0]], rtol=1e-5)
    free = jitted(kl_estimate, estimator="k3", clamp=False)(logp, ref)
    np.testing.assert_allclose(free[0, 1], np.exp(-39.0) - 1 + 39, rtol=1e-5)  # 38: unclamped (TRL, tunix)


def test_kl_matches_libraries():
    logp, _, ref, _, _, _ = _random_batch(3)
    for ours, theirs in [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")]:
        np.testing.assert_allclose(jitted(kl_estimate, estimator=ours)(logp, ref), verl_kl(logp, ref, theirs),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(jitted(kl_estimate, estimator=ours)(logp, ref), openrlhf_kl(logp, ref, ours),
                                   rtol=1e-5, atol=1e-6)
    for ours, theirs in [("k1", "kl"), ("k2", "mse_kl"), ("k3", "low_var_kl")]:
        np.testing.assert_allclose(jitted(kl_estimate, estimator=ours, clamp=False)(logp, ref),
                                   tunix_kl(logp, ref, theirs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jitted(kl_estimate, estimator="k3", clamp=False)(logp, ref), trl_kl(logp, ref),
                               rtol=1e-5, atol=1e-6)


def test_kl_straight_through_has_k2_gradient():
    logp, _, ref, _, _, _ = _random_batch(4)
    grad = lambda name: jax.jit(jax.grad(lambda x: kl_estimate(x, ref, name).sum()))(jnp.asarray(logp))  # noqa
    np.testing.assert_allclose(grad("k3+"), logp - ref, rtol=1e-5, atol=1e-6)  # d/dx (x - ref)^2 / 2
    np.testing.assert_allclose(kl_estimate(logp, ref, "k3+"), kl_estimate(logp, ref, "k3"), rtol=1e-6)
    np.testing.assert_allclose(grad("k3"), 1 - np.exp(ref - logp), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------------- value loss
def test_value_loss_hand_computed():
    v = np.array([[1.0, 0.0, 2.0]], np.float32)
    old = np.array([[0.0, 0.0, 1.5]], np.float32)
    ret = np.array([[3.0, -1.0, 0.0]], np.float32)
    mask = np.ones((1, 3), bool)
    loss, frac = jitted(value_loss, clip=0.2, return_clip_frac=True)(v, old, ret, mask)
    # col 0: unclipped (1-3)^2 = 4, clipped to 0.2: (0.2-3)^2 = 7.84 -> 7.84; col 1: 1 both;
    # col 2: unclipped (2-0)^2 = 4, clipped to 1.7: 2.89 -> the unclipped 4 is kept
    np.testing.assert_allclose(loss, 0.5 * (7.84 + 1.0 + 4.0) / 3, rtol=1e-6)
    np.testing.assert_allclose(frac, 1 / 3, rtol=1e-6)
    loss = jitted(value_loss, clip=None)(v, old, ret, mask)
    np.testing.assert_allclose(loss, 0.5 * (4 + 1 + 4) / 3, rtol=1e-6)


def test_value_loss_matches_verl_and_openrlhf():
    rng = np.random.default_rng(5)
    v, old, ret = (rng.normal(size=(4, 8)).astype(np.float32) for _ in range(3))
    mask = np.arange(8)[None] < np.array([8, 3, 1, 5])[:, None]
    m = mask.astype(np.float32)
    for mode in ("token-mean", "seq-mean-token-mean"):
        loss, frac = jitted(value_loss, clip=0.3, aggregation=mode, return_clip_frac=True)(v, old, ret, mask)
        want, want_frac = verl_value_loss(v, ret, old, m, 0.3, mode)
        np.testing.assert_allclose(loss, want, rtol=1e-5)
        np.testing.assert_allclose(frac, want_frac, rtol=1e-6)
        np.testing.assert_allclose(loss, openrlhf_value_loss(v, old, ret, m, 0.3, mode == "token-mean"), rtol=1e-5)


# ---------------------------------------------------------------------------------------------- policy_loss
def test_policy_loss_combines_terms_and_metrics():
    logp, old, ref, adv, mask, ent = _random_batch(6)
    m = mask.astype(np.float32)
    config = LossConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.05, kl_estimator="low_var_kl", entropy_coef=0.01,
                        aggregation="seq-mean-token-mean")
    loss, metrics = jax.jit(lambda *a: policy_loss(*a, config))(logp, old, ref, adv, mask, ent)
    pg, _ = verl_policy_loss(old, logp, adv, m, 0.2, 0.28, np.inf)
    kl = verl_kl(logp, ref, "low_var_kl")
    # verl dp_actor: pg_loss + kl_coef * agg(kl) - entropy_coeff * agg(entropy), all with loss_agg_mode
    want = (verl_agg_loss(pg, m, "seq-mean-token-mean") + 0.05 * verl_agg_loss(kl, m, "seq-mean-token-mean")
            - 0.01 * verl_agg_loss(ent, m, "seq-mean-token-mean"))
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_allclose(metrics["pg_loss"], verl_agg_loss(pg, m, "seq-mean-token-mean"), rtol=1e-5)
    ratio = np.exp(logp - old)
    np.testing.assert_allclose(metrics["kl"], (kl * m).sum() / m.sum(), rtol=1e-5)
    np.testing.assert_allclose(metrics["entropy"], (ent * m).sum() / m.sum(), rtol=1e-5)
    np.testing.assert_allclose(metrics["ratio_mean"], (ratio * m).sum() / m.sum(), rtol=1e-5)
    np.testing.assert_allclose(metrics["ratio_max"], ratio[mask].max(), rtol=1e-5)
    np.testing.assert_allclose(metrics["ppo_kl"], ((old - logp) * m).sum() / m.sum(), rtol=1e-5, atol=1e-7)
    low = ((ratio < 0.8) & (adv < 0) & mask).sum() / mask.sum()
    high = ((ratio > 1.28) & (adv > 0) & mask).sum() / mask.sum()
    np.testing.assert_allclose(metrics["clip_frac_low"], low, rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_frac_high"], high, rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_frac"], low + high, rtol=1e-6)
    assert low > 0 and high > 0


def test_policy_loss_trl_dapo_with_beta():
    # TRL loss_type "dapo" with beta: per-token -min(...) + beta * k3, summed / number of completion tokens
    logp, old, ref, adv, mask, _ = _random_batch(7)
    m = mask.astype(np.float32)
    config = LossConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.04, kl_estimator="k3", kl_clamp=False)
    loss, _ = jax.jit(lambda *a: policy_loss(*a, None, config))(logp, old, ref, adv, mask)
    per_token = trl_policy_loss(logp, old, adv, 0.2, 0.28) + 0.04 * trl_kl(logp, ref)
    np.testing.assert_allclose(loss, trl_loss(per_token, m, "dapo"), rtol=1e-5)


def test_policy_loss_gradient_on_unclipped_tokens():
    # token-mean, no clipping reached (old = logp): d loss / d logp_t = -A_t / (number of masked tokens)
    logp, _, _, adv, mask, _ = _random_batch(8)
    config = LossConfig()
    grad = jax.jit(jax.grad(lambda x: policy_loss(x, logp, None, adv, mask, None, config)[0]))(jnp.asarray(logp))
    np.testing.assert_allclose(grad, np.where(mask, -adv / mask.sum(), 0.0), rtol=1e-5, atol=1e-7)


def test_loss_config_validation_names_the_field():
    for kwargs, field in [({"clip_low": 1.5}, "clip_low=1.5"), ({"clip_high": -0.1}, "clip_high=-0.1"),
                          ({"dual_clip": 0.9}, "dual_clip=0.9"), ({"kl_coef": -1.0}, "kl_coef=-1.0"),
                          ({"kl_estimator": "k4"}, "kl_estimator='k4'"), ({"entropy_coef": -0.1}, "entropy_coef"),
                          ({"aggregation": "sum"}, "aggregation='sum'"),
                          ({"aggregation": "seq-mean-token-sum-norm"}, "max_response_tokens=None"),
                          ({"log_ratio_clamp": 0.0}, "log_ratio_clamp=0.0")]:
        with pytest.raises(ValueError, match=field):
            LossConfig(**kwargs)
    config = LossConfig(kl_coef=0.1)
    logp, old, _, adv, mask, _ = _random_batch(9)
    with pytest.raises(ValueError, match="ref_logprobs=None"):
        policy_loss(logp, old, None, adv, mask, None, config)
    with pytest.raises(ValueError, match="entropies=None"):
        policy_loss(logp, old, None, adv, mask, None, dataclasses.replace(config, kl_coef=0.0, entropy_coef=0.1))

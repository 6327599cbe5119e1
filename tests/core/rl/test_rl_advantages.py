"""core.rl.advantages: hand-computed numbers, and each reference library's formula (reimplemented in numpy
from a reading of its code; the comment names the file and function) as a named option, all under jax.jit."""

import collections
import functools

import jax
import numpy as np
import pytest

from core.rl.advantages import (
    CONVENTIONS,
    broadcast_to_tokens,
    gae,
    group_advantages,
    masked_whiten,
    normalize_step_rewards,
    reward_to_go,
    token_rewards,
)


def jitted(fn, **static):
    return jax.jit(functools.partial(fn, **static))


# rows of three prompts in mixed order: group 0 = [1, 0, 0, 1], group 1 = [3, 1], group 2 = [5] (a singleton)
REWARDS = np.array([1.0, 3.0, 0.0, 5.0, 0.0, 1.0, 1.0], np.float32)
GROUP = np.array([0, 1, 0, 2, 0, 1, 0])


# ---------------------------------------------------------------------------------------------- references
def verl_grpo(scores, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    """verl verl/trainer/ppo/core_algos.py compute_grpo_outcome_advantage: per-index lists, a singleton gets
    mean 0 / std 1, torch.std (unbiased), (s - mean) / (std + eps)."""
    by = collections.defaultdict(list)
    for s, i in zip(scores, index):
        by[i].append(s)
    out = np.empty(len(scores))
    for n, (s, i) in enumerate(zip(scores, index)):
        mean, std = (0.0, 1.0) if len(by[i]) == 1 else (np.mean(by[i]), np.std(by[i], ddof=1))
        out[n] = (s - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else s - mean
    return out


def verl_rloo(scores, index):
    """verl core_algos.py compute_rloo_outcome_advantage: s * n / (n - 1) - mean * n / (n - 1); n = 1 unchanged."""
    by = collections.defaultdict(list)
    for s, i in zip(scores, index):
        by[i].append(s)
    out = np.array(scores, float)
    for n, (s, i) in enumerate(zip(scores, index)):
        k = len(by[i])
        if k > 1:
            out[n] = s * k / (k - 1) - np.mean(by[i]) * k / (k - 1)
    return out


def trl_grpo(rewards, num_generations, scale_rewards="group"):
    """TRL trl/trainer/grpo_trainer.py _generate_and_score_completions ("sum_then_normalize"): rewards viewed
    (-1, G), group mean; std by utils.nanstd (Bessel) per group or over the batch; divide by std + 1e-4
    unless scale_rewards == "none"."""
    g = rewards.reshape(-1, num_generations)
    mean = np.repeat(g.mean(axis=1), num_generations)
    if scale_rewards == "batch":
        std = np.full_like(rewards, np.std(rewards, ddof=1))
    else:
        std = np.repeat(np.std(g, axis=1, ddof=1), num_generations)
    adv = rewards - mean
    return adv / (std + 1e-4) if scale_rewards != "none" else adv


def trl_rloo(rewards, num_generations):
    """TRL trl/trainer/rloo_trainer.py: baseline = (group sum - r) / (G - 1); advantage r - baseline."""
    g = rewards.reshape(-1, num_generations)
    return (g - (g.sum(axis=1, keepdims=True) - g) / (num_generations - 1)).reshape(-1)


def openrlhf(rewards, n_samples_per_prompt, estimator):
    """OpenRLHF openrlhf/trainer/ppo_utils/experience_maker.py compute_advantages_and_returns: rewards
    reshaped (-1, n); "rloo" leave-one-out, "dr_grpo" mean-centred, "group_norm" (r - mean) / (std + 1e-9)."""
    g = rewards.reshape(-1, n_samples_per_prompt)
    if estimator == "rloo":
        g = g - (g.sum(-1, keepdims=True) - g) / (n_samples_per_prompt - 1)
    elif estimator == "dr_grpo":
        g = g - g.mean(-1, keepdims=True)
    elif estimator == "group_norm":
        g = (g - g.mean(-1, keepdims=True)) / (g.std(-1, ddof=1, keepdims=True) + 1e-9)
    return g.reshape(-1)


def tunix(rewards, num_generations, estimator):
    """tunix tunix/rl/algo_core.py compute_advantages (std ddof=1, + 1e-6), compute_rloo_advantages,
    compute_drgrpo_advantages."""
    g = rewards.reshape(-1, num_generations)
    if estimator == "grpo":
        g = (g - g.mean(-1, keepdims=True)) / (g.std(-1, ddof=1, keepdims=True) + 1e-6)
    elif estimator == "rloo":
        g = g - (g.sum(-1, keepdims=True) - g) / (num_generations - 1)
    else:
        g = g - g.mean(-1, keepdims=True)
    return g.reshape(-1)


def verl_gae(token_level_rewards, values, response_mask, gamma, lam):
    """verl core_algos.py compute_gae_advantage_return before its masked_whiten: a reverse loop where masked
    columns carry nextvalues and lastgaelam unchanged; returns = advantages + values."""
    N, L = values.shape
    nextvalues, lastgaelam = np.zeros(N), np.zeros(N)
    out = np.zeros((N, L))
    for t in reversed(range(L)):
        delta = token_level_rewards[:, t] + gamma * nextvalues - values[:, t]
        new = delta + gamma * lam * lastgaelam
        m = response_mask[:, t]
        nextvalues = values[:, t] * m + (1 - m) * nextvalues
        lastgaelam = new * m + (1 - m) * lastgaelam
        out[:, t] = lastgaelam
    return out, out + values


def openrlhf_gae(values, rewards, action_mask, gamma, lambd):
    """OpenRLHF experience_maker.py get_advantages_and_returns: values and rewards times the action mask,
    nextvalues = values[t + 1] (contiguous), the textbook recursion."""
    values, rewards = values * action_mask, rewards * action_mask
    N, L = values.shape
    last = np.zeros(N)
    out = np.zeros((N, L))
    for t in reversed(range(L)):
        nextvalues = values[:, t + 1] if t < L - 1 else 0.0
        last = rewards[:, t] + gamma * nextvalues - values[:, t] + gamma * lambd * last
        out[:, t] = last
    return out, out + values


def verl_masked_whiten(values, mask):
    """verl verl/utils/torch_functional.py masked_whiten: masked mean, unbiased masked var, rsqrt(var + 1e-8)."""
    mean = (values * mask).sum() / (mask.sum() + 1e-8)
    var = (((values - mean) ** 2) * mask).sum() / (mask.sum() + 1e-8) * mask.sum() / (mask.sum() - 1)
    return (values - mean) / np.sqrt(var + 1e-8)


# ------------------------------------------------------------------------------------------ group baselines
def test_grpo_hand_computed_verl_default():
    adv = jitted(group_advantages, num_groups=3)(REWARDS, GROUP)
    s0, s1 = np.sqrt(1 / 3), np.sqrt(2.0)  # unbiased stds of [1, 0, 0, 1] and [3, 1]
    e = 1e-6
    want = [0.5 / (s0 + e), 1 / (s1 + e), -0.5 / (s0 + e), 5 / (1 + e), -0.5 / (s0 + e), -1 / (s1 + e),
            0.5 / (s0 + e)]
    np.testing.assert_allclose(adv, want, rtol=1e-6)
    np.testing.assert_allclose(adv[0], 0.8660239, rtol=1e-6)  # 0.5 / (0.5773503 + 1e-6)


def test_grpo_singleton_rule_per_convention():
    for convention, lone in [("verl", 5 / (1 + 1e-6)), ("trl", 0.0), ("openrlhf", 0.0), ("tunix", 0.0)]:
        adv = jitted(group_advantages, num_groups=3, convention=convention)(REWARDS, GROUP)
        np.testing.assert_allclose(adv[3], lone, rtol=1e-6)
        np.testing.assert_allclose(adv[1], 1 / (np.sqrt(2) + CONVENTIONS[convention].eps), rtol=1e-6)
    adv = jitted(group_advantages, num_groups=3, convention="trl", singleton="keep")(REWARDS, GROUP)
    np.testing.assert_allclose(adv[3], 5 / (1 + 1e-4), rtol=1e-6)


def test_dr_grpo_and_rloo_hand_computed():
    dr = jitted(group_advantages, num_groups=3, mode="dr_grpo")(REWARDS, GROUP)
    np.testing.assert_allclose(dr, [0.5, 1, -0.5, 5, -0.5, -1, 0.5], rtol=1e-6)
    np.testing.assert_allclose(jitted(group_advantages, num_groups=3, scale="none")(REWARDS, GROUP), dr)
    rloo = jitted(group_advantages, num_groups=3, mode="rloo")(REWARDS, GROUP)
    np.testing.assert_allclose(rloo, [2 / 3, 2, -2 / 3, 5, -2 / 3, -2, 2 / 3], rtol=1e-6)
    rloo_trl = jitted(group_advantages, num_groups=3, mode="rloo", convention="trl")(REWARDS, GROUP)
    np.testing.assert_allclose(rloo_trl[3], 0.0)


def test_batch_scale_hand_computed():
    r = np.array([1.0, 0.0, 0.0, 1.0, 3.0, 1.0], np.float32)
    g = np.array([0, 0, 0, 0, 1, 1])
    adv = jitted(group_advantages, num_groups=2, scale="batch", convention="trl")(r, g)
    std = np.sqrt(np.sum((r - 1.0) ** 2) / 5)  # batch mean 1, ddof 1: sqrt(6 / 5)
    np.testing.assert_allclose(adv, np.array([0.5, -0.5, -0.5, 0.5, 1, -1]) / (std + 1e-4), rtol=1e-6)


def test_matches_verl_on_unequal_groups_in_any_order():
    rng = np.random.default_rng(0)
    sizes = [1, 2, 3, 5, 1, 4]
    index = rng.permutation(np.repeat(np.arange(6), sizes))
    scores = rng.normal(size=index.size).astype(np.float32)
    ours = jitted(group_advantages, num_groups=6, convention="verl")
    np.testing.assert_allclose(ours(scores, index), verl_grpo(scores, index), rtol=1e-5, atol=1e-6)
    dr = jitted(group_advantages, num_groups=6, mode="dr_grpo", convention="verl")
    np.testing.assert_allclose(dr(scores, index), verl_grpo(scores, index, norm_adv_by_std_in_grpo=False),
                               rtol=1e-5, atol=1e-6)
    rloo = jitted(group_advantages, num_groups=6, mode="rloo", convention="verl")
    np.testing.assert_allclose(rloo(scores, index), verl_rloo(scores, index), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_matches_trl(scale):
    G = 4
    r = np.random.default_rng(1).integers(0, 3, size=5 * G).astype(np.float32)
    r[:G] = 1.0  # a zero-std group: (r - mean) / (0 + 1e-4) = 0
    ours = jitted(group_advantages, num_groups=5, scale=scale, convention="trl")(r, np.repeat(np.arange(5), G))
    np.testing.assert_allclose(ours, trl_grpo(r, G, scale), rtol=1e-5, atol=1e-5)
    rloo = jitted(group_advantages, num_groups=5, mode="rloo", convention="trl")(r, np.repeat(np.arange(5), G))
    np.testing.assert_allclose(rloo, trl_rloo(r, G), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("estimator,mode", [("group_norm", "grpo"), ("rloo", "rloo"), ("dr_grpo", "dr_grpo")])
def test_matches_openrlhf(estimator, mode):
    n = 3
    r = np.random.default_rng(2).normal(size=4 * n).astype(np.float32)
    ours = jitted(group_advantages, num_groups=4, mode=mode, convention="openrlhf")(r, np.repeat(np.arange(4), n))
    np.testing.assert_allclose(ours, openrlhf(r, n, estimator), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("estimator,mode", [("grpo", "grpo"), ("rloo", "rloo"), ("drgrpo", "dr_grpo")])
def test_matches_tunix(estimator, mode):
    G = 4
    r = np.random.default_rng(3).normal(size=3 * G).astype(np.float32)
    ours = jitted(group_advantages, num_groups=3, mode=mode, convention="tunix")(r, np.repeat(np.arange(3), G))
    np.testing.assert_allclose(ours, tunix(r, G, estimator), rtol=1e-5, atol=1e-6)


def test_explicit_ddof_eps_and_valid_rows():
    r = np.array([1.0, 0.0, 0.0, 7.0], np.float32)
    adv = jitted(group_advantages, num_groups=1, ddof=0, eps=0.0)(r, np.zeros(4, int),
                                                                  valid=np.array([1, 1, 1, 0], bool))
    mean, std = 1 / 3, np.std([1.0, 0.0, 0.0])  # the invalid row is left out of the statistics
    np.testing.assert_allclose(adv, [(1 - mean) / std, -mean / std, -mean / std, 0.0], rtol=1e-6)


def test_bad_options_raise():
    for kwargs, word in [({"mode": "ppo"}, "mode='ppo'"), ({"scale": "row"}, "scale='row'"),
                         ({"convention": "rllib"}, "convention='rllib'"), ({"ddof": 2}, "ddof=2"),
                         ({"mode": "rloo", "scale": "group"}, "scale='group' with mode='rloo'"),
                         ({"singleton": "nan"}, "singleton='nan'")]:
        with pytest.raises(ValueError, match=word):
            group_advantages(REWARDS, GROUP, num_groups=3, **kwargs)
    with pytest.raises(ValueError, match=r"group ids in \[0, 2\]"):
        group_advantages(REWARDS, GROUP, num_groups=2)
    with pytest.raises(ValueError, match="group shape"):
        group_advantages(REWARDS, GROUP[:3], num_groups=3)


def test_broadcast_to_policy_tokens():
    mask = np.array([[0, 1, 1, 0, 1], [0, 0, 1, 0, 0]], bool)
    out = jax.jit(broadcast_to_tokens)(np.array([2.0, -1.0]), mask)
    np.testing.assert_array_equal(out, [[0, 2, 2, 0, 2], [0, 0, -1, 0, 0]])


# ------------------------------------------------------------------------------------------ process rewards
STEP_REWARDS = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [1.0, 1.0, 0.0], [4.0, 0.0, 0.0]], np.float32)
STEP_POSITIONS = np.array([[2, 5, 7], [3, 6, -1], [1, 4, 4], [2, -1, -1]])


def test_token_rewards_at_positions():
    out = jitted(token_rewards, length=8)(STEP_REWARDS, STEP_POSITIONS)
    want = np.zeros((4, 8))
    want[0, [2, 5, 7]] = [1, 0, 2]
    want[1, [3, 6]] = [0, 3]
    want[2, [1, 4]] = [1, 1]  # two steps at column 4 add up (1 + 0)
    want[3, 2] = 4
    np.testing.assert_array_equal(out, want)


def test_turn_level_normalisation_hand_computed():
    # rows 0-2 are one prompt, row 3 another. Turn 0 of group 0: [1, 0, 1] (mean 2/3, std sqrt(1/3));
    # turn 1: [0, 3, 1] (mean 4/3, std sqrt(7/3)); turn 2: only row 0 and row 2 took it: [2, 0] (mean 1,
    # std sqrt(2)); group 1 has one row: every turn is a singleton (verl rule: mean 0, std 1 -> kept).
    out = jitted(normalize_step_rewards, num_groups=2, eps=0.0)(STEP_REWARDS, STEP_POSITIONS, np.array([0, 0, 0, 1]))
    s0, s1, s2 = np.sqrt(1 / 3), np.sqrt(7 / 3), np.sqrt(2.0)
    want = [[(1 - 2 / 3) / s0, (0 - 4 / 3) / s1, 1 / s2],
            [(0 - 2 / 3) / s0, (3 - 4 / 3) / s1, 0.0],
            [(1 - 2 / 3) / s0, (1 - 4 / 3) / s1, -1 / s2],
            [4.0, 0.0, 0.0]]
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)
    # a step mask leaves turn 2 of row 0 out: row 2's turn 2 is then alone in its turn
    mask = np.ones((4, 3), bool)
    mask[0, 2] = False
    out = jitted(normalize_step_rewards, num_groups=2, eps=0.0, singleton="zero")(
        STEP_REWARDS, STEP_POSITIONS, np.array([0, 0, 0, 1]), step_mask=mask)
    assert out[0, 2] == 0 and out[2, 2] == 0 and out[3, 0] == 0


def test_group_level_normalisation_pools_all_steps():
    group = np.array([0, 0, 0, 1])
    out = jitted(normalize_step_rewards, num_groups=2, level="group", convention="trl")(STEP_REWARDS, STEP_POSITIONS,
                                                                                        group)
    taken = STEP_POSITIONS[:3] >= 0
    pool = STEP_REWARDS[:3][taken]  # DeepSeekMath process supervision: all steps of the group together
    want = np.zeros((4, 3))
    want[:3][taken] = (pool - pool.mean()) / (pool.std(ddof=1) + 1e-4)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_reward_to_go_skips_observation_tokens():
    # columns: prompt, a, a, obs, obs, a, a, pad; rewards at the first action end (col 2) and the last (col 6)
    mask = np.array([[0, 1, 1, 0, 0, 1, 1, 0]], bool)
    r = np.array([[0, 0, 0.5, 9, 9, 0, 1.0, 9]], np.float32)  # 9s sit on non-policy columns: ignored
    g = 0.9
    out = jitted(reward_to_go, gamma=g)(r, mask)
    # policy tokens in order: c1 c2 c5 c6 (discount counts policy tokens only, across the gap)
    want = [[0, 0.5 * g + 1 * g ** 3, 0.5 + 1 * g ** 2, 0, 0, 1 * g, 1.0, 0]]
    np.testing.assert_allclose(out, want, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------- GAE
def python_gae_over_policy_tokens(r, v, m, gamma, lam):
    """A plain loop: list each row's policy columns, run the textbook recursion over that list."""
    adv, ret = np.zeros_like(v), np.zeros_like(v)
    for n in range(r.shape[0]):
        cols = np.flatnonzero(m[n])
        last, v_next = 0.0, 0.0
        for j in reversed(cols):
            last = r[n, j] + gamma * v_next - v[n, j] + gamma * lam * last
            v_next = v[n, j]
            adv[n, j], ret[n, j] = last, last + v[n, j]
    return adv, ret


def test_gae_hand_case_with_observation_gap():
    mask = np.array([[0, 1, 1, 0, 0, 1, 0]], bool)
    v = np.array([[7, 0.5, 0.2, 7, 7, 0.4, 7]], np.float32)  # 7s on non-policy columns: never used
    r = np.array([[0, 0, 0.3, 5, 5, 1.0, 0]], np.float32)
    gamma, lam = 0.9, 0.8
    adv, ret = jitted(gae, gamma=gamma, lam=lam)(r, v, mask)
    a5 = 1.0 - 0.4                               # last policy token: V_next = 0
    a2 = 0.3 + gamma * 0.4 - 0.2 + gamma * lam * a5  # the next policy token after col 2 is col 5
    a1 = 0.0 + gamma * 0.2 - 0.5 + gamma * lam * a2
    np.testing.assert_allclose(adv, [[0, a1, a2, 0, 0, a5, 0]], rtol=1e-6)
    np.testing.assert_allclose(ret, [[0, a1 + 0.5, a2 + 0.2, 0, 0, a5 + 0.4, 0]], rtol=1e-6)


def test_gae_matches_python_loop_and_verl_on_random_masks():
    rng = np.random.default_rng(4)
    N, L = 5, 12
    m = rng.random((N, L)) < 0.6
    m[:, 0] = False  # prompt column
    r = rng.normal(size=(N, L)).astype(np.float32)
    v = rng.normal(size=(N, L)).astype(np.float32)
    adv, ret = jitted(gae, gamma=0.95, lam=0.9)(r, v, m)
    want_adv, want_ret = python_gae_over_policy_tokens(r, v, m, 0.95, 0.9)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-5)
    verl_adv, verl_ret = verl_gae(r, v, m.astype(np.float32), 0.95, 0.9)
    np.testing.assert_allclose(adv, np.where(m, verl_adv, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, np.where(m, verl_ret, 0), rtol=1e-5, atol=1e-5)


def test_gae_without_gap_is_the_textbook_sum():
    # contiguous right-padded responses: A_t = sum_l (gamma lam)^l delta_{t+l} (Schulman et al. 2016, eq. 16)
    rng = np.random.default_rng(5)
    lengths = [6, 3, 1]
    L = 6
    m = np.arange(L)[None, :] < np.array(lengths)[:, None]
    r = rng.normal(size=(3, L)).astype(np.float32)
    v = rng.normal(size=(3, L)).astype(np.float32)
    gamma, lam = 0.99, 0.95
    adv, ret = jitted(gae, gamma=gamma, lam=lam)(r, v, m)
    want = np.zeros((3, L))
    for n, T in enumerate(lengths):
        vv = np.append(v[n, :T], 0.0)
        delta = r[n, :T] + gamma * vv[1:] - vv[:-1]
        for t in range(T):
            want[n, t] = sum((gamma * lam) ** k * delta[t + k] for k in range(T - t))
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-5)
    o_adv, o_ret = openrlhf_gae(v, r, m.astype(np.float32), gamma, lam)
    np.testing.assert_allclose(adv, np.where(m, o_adv, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, np.where(m, o_ret, 0), rtol=1e-5, atol=1e-5)
    # lam = 1: returns are the discounted return-to-go of the rewards
    _, ret1 = jitted(gae, gamma=gamma, lam=1.0)(r, v, m)
    np.testing.assert_allclose(ret1, jitted(reward_to_go, gamma=gamma)(r, m), rtol=1e-5, atol=1e-5)


def test_masked_whiten_matches_verl():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(3, 7)).astype(np.float32) * 3 + 1
    m = rng.random((3, 7)) < 0.7
    out = jax.jit(masked_whiten)(x, m)
    np.testing.assert_allclose(out, np.where(m, verl_masked_whiten(x, m.astype(np.float32)), 0), rtol=1e-5,
                               atol=1e-5)
    shifted = jitted(masked_whiten, shift_mean=False)(x, m)
    np.testing.assert_allclose(shifted - out, np.where(m, x[m].mean(), 0), rtol=1e-5, atol=1e-5)


def test_shape_errors():
    with pytest.raises(ValueError, match="expected the same"):
        gae(np.zeros((2, 3)), np.zeros((2, 4)), np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="step_positions"):
        token_rewards(np.zeros((2, 3)), np.zeros((2, 2), int), 5)
    with pytest.raises(ValueError, match="level='call'"):
        normalize_step_rewards(STEP_REWARDS, STEP_POSITIONS, np.zeros(4, int), num_groups=1, level="call")

"""The on-policy trainer: a GRPO / PPO / LoRA smoke run of the real loop, bitwise resume of a killed run,
data-parallel steps on 8 fake devices equal to one device, and the first update's ratio is exactly 1."""

import jax
import numpy as np
import pytest
from helpers import assert_trees_close

from core.lm.lora import LoraConfig
from core.optim import OptimizerConfig
from core.rl.losses import LossConfig
from core.rl.rollout import RolloutConfig
from core.rl.trainer import RLConfig, RLTrainer
from core.sharding import make_mesh

PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [8, 9], [10, 11, 12], [13, 14, 15, 16, 17], [18, 19]]


class CountTarget:
    """Reward: the fraction of the answer's tokens equal to 20 (a preference the policy can learn)."""

    def reset(self, prompt):
        return prompt

    def step(self, state, action_text):
        words = action_text.split()
        return None, True, float(np.mean([w == "20" for w in words])) if words else 0.0


class Tok:
    def encode(self, text):
        return [int(w) for w in text.split()]

    def decode(self, ids):
        return " ".join(str(int(t)) for t in ids)


def _config(**kw):
    base = dict(algorithm="grpo", steps=3, prompts_per_step=2,
                rollout=RolloutConfig(group_size=4, max_new_tokens=4, max_response_tokens=4, temperature=1.0,
                                      prompt_bucket=8),
                loss=LossConfig(kl_coef=0.05), optimizer=OptimizerConfig(lr=3e-3, clip_norm=1.0),
                epochs=2, minibatches=2, ckpt_every=1)
    base.update(kw)
    return RLConfig(**base)


def _trainer(tiny_policy, config, mesh=None):
    _, graphdef, params = tiny_policy
    return RLTrainer(config, graphdef, params, prompts=PROMPTS, envs=[CountTarget()] * len(PROMPTS),
                     env_prompts=PROMPTS, tokenizer=Tok(), mesh=mesh)


def _assert_the_loop_ran(trainer, history, params, lora=None, algorithm="grpo"):
    assert [r["step"] for r in history] == [1, 2]
    for key in ("reward", "kl", "clip_frac", "entropy", "response_length", "tool_calls", "rollout_tokens_per_s",
                "update_tokens_per_s", "loss", "lr"):
        assert key in history[-1] and np.isfinite(history[-1][key]), key
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
                                         trainer.policy_params(), params))
    assert max(moved) > 0  # the policy changed
    if lora is not None:  # the base weights in the frozen slot are untouched
        assert_trees_close(trainer.state.frozen["base"], params, exact=True)
    if algorithm == "ppo":
        assert "value_loss" in history[-1]


def _reuse_compiled(trainer, compiled):
    """A trainer of the same config runs the same programs: reuse the first one's jitted update and scoring
    instead of compiling them again (the rollout's jits are module-level and shared already)."""
    trainer._update, trainer._scores = compiled._update, compiled._scores
    return trainer


# grpo without LoRA is the first half of test_the_loop_runs_and_updates_what_it_should_and_a_killed_run_resumes_bitwise
@pytest.mark.parametrize("algorithm, lora", [("ppo", None), ("rloo", LoraConfig(rank=4))])
def test_the_loop_runs_and_updates_what_it_should(tiny_policy, tmp_path, algorithm, lora):
    _, graphdef, params = tiny_policy
    trainer = _trainer(tiny_policy, _config(algorithm=algorithm, lora=lora, steps=2))
    history = trainer.train(tmp_path, progress_bar=False)
    _assert_the_loop_ran(trainer, history, params, lora, algorithm)


def test_recorded_old_logprobs_are_the_policys_own(tiny_policy):
    """The scored batch's old log-probs equal the trained policy's before any update: ratio exactly 1, no
    clipping, on the first minibatch (verl's recomputation at the sampling temperature)."""
    trainer = _trainer(tiny_policy, _config(epochs=2, minibatches=1, loss=LossConfig(kl_coef=0.0)))
    roll, batch, _ = trainer.collect(0)
    assert "old_logprobs" in batch
    _, metrics = trainer._loss(trainer.state.params, batch, jax.random.key(0), trainer.state.frozen)
    assert float(metrics["clip_frac"]) == 0.0
    np.testing.assert_allclose(float(metrics["ratio_mean"]), 1.0, atol=1e-6)
    cols = np.asarray(roll.policy)
    np.testing.assert_allclose(np.asarray(batch["old_logprobs"])[cols], roll.sample_logprobs[cols], atol=1e-5)


def test_the_grpo_loop_runs_and_updates_what_it_should_and_a_killed_run_resumes_bitwise(tiny_policy, tmp_path):
    """The uninterrupted run is the loop test's grpo case (2 steps); the other run is killed after step 1."""
    full = _trainer(tiny_policy, _config(algorithm="grpo", lora=None, steps=2))
    full_history = full.train(tmp_path / "full", progress_bar=False)
    _assert_the_loop_ran(full, full_history, tiny_policy[2])
    killed = _reuse_compiled(_trainer(tiny_policy, _config(steps=2)), full)
    killed.train(tmp_path / "resumed", progress_bar=False, until=1)  # "killed"
    resumed = _reuse_compiled(_trainer(tiny_policy, _config(steps=2)), full)
    history = resumed.train(tmp_path / "resumed", progress_bar=False)
    assert [r["step"] for r in history] == [1, 2]  # the killed run's step-1 record and the resumed step 2
    assert_trees_close(resumed.state.params, full.state.params, exact=True)
    assert_trees_close(resumed.state.opt_state, full.state.opt_state, exact=True)
    assert [r["reward"] for r in history] == [r["reward"] for r in full_history]
    assert resumed.stream.position == full.stream.position


@pytest.mark.parametrize("minibatches", [2, 1])  # 1: every update sees whole groups, prompts are scored once
def test_data_parallel_step_equals_one_device(tiny_policy, devices, minibatches):
    """A whole RL step (rollout, scoring, 2 epochs x `minibatches` minibatches of updates) with the batch split
    over 8 devices equals the one-device step. SGD, because Adam's m / sqrt(v) turns reduction-order rounding in
    near-zero gradients into O(lr) differences."""
    rollout = RolloutConfig(group_size=4, max_new_tokens=4, max_response_tokens=4, temperature=1.0, prompt_bucket=8)
    config = _config(prompts_per_step=4, rollout=rollout, optimizer=OptimizerConfig(name="sgd", lr=0.5),
                     minibatches=minibatches)
    one = _trainer(tiny_policy, config)
    eight = _trainer(tiny_policy, config, mesh=make_mesh(data=8))
    r1, r8 = one.step(0), eight.step(0)
    for key in ("reward", "loss", "kl", "clip_frac"):
        np.testing.assert_allclose(r8[key], r1[key], atol=1e-5, rtol=1e-5, err_msg=key)
    assert_trees_close(jax.device_get(eight.state.params), jax.device_get(one.state.params), atol=1e-5, rtol=1e-5)
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(one.state.params), jax.tree.leaves(tiny_policy[2])))
    assert moved > 1e-4  # the updates did something


class TwoTurns:
    """Answers the first action with an observation of 1-3 tokens (so rows differ in length), then done."""

    def reset(self, prompt):
        return {"turns": 0}

    def step(self, state, action_text):
        state["turns"] += 1
        if state["turns"] == 1:
            return " ".join(["30"] * (1 + len(action_text) % 3)), False, 0.0
        return None, True, 1.0


def test_shared_prompt_scores_equal_whole_sequence_scores(tiny_policy):
    """Each prompt run once per group (forward_scores(prompts=...)) gives the whole-sequence pass's log-probs,
    entropies and values on every response column (policy and observation tokens), and the same gradients,
    with LoRA adapters on: prompts of 2-5 tokens, two turns with observations, rows of different lengths."""
    from core.lm import lora as lora_lib
    from core.rl import value as value_lib
    from core.rl.rollout import rollout
    from core.rl.trainer import forward_scores, shared_prompts

    config, graphdef, params = tiny_policy
    cfg = RolloutConfig(group_size=3, max_new_tokens=3, max_turns=2, max_response_tokens=9, temperature=1.0,
                        max_observation_tokens=3, prompt_bucket=8)
    prompts = [PROMPTS[i] for i in (2, 4, 0)]
    roll = rollout(graphdef, params, prompts, [TwoTurns()] * 3, prompts, Tok(), jax.random.key(3), cfg)
    assert roll.observation.any() and len(set(roll.policy.sum(1) + roll.observation.sum(1))) > 1
    lcfg = LoraConfig(rank=2, targets=("q_proj", "v_proj", "down_proj"))
    adapters = jax.tree.map(lambda x: x + 0.05, lora_lib.init_lora(config, lcfg, jax.random.key(1)))  # B != 0
    head = value_lib.init_value_head(config.hidden_size, jax.random.key(2))
    shared = jax.tree.map(jax.numpy.asarray, shared_prompts(roll, cfg))
    tokens, attention = jax.numpy.asarray(roll.tokens), jax.numpy.asarray(roll.attention)
    response = np.asarray(roll.policy | roll.observation)

    def scores(adapters, head, prompts):
        lora = lora_lib.LoraInputs(adapters=adapters, config=lcfg)
        return forward_scores(graphdef, params, tokens, attention, temperature=0.7, chunk_size=16, lora=lora,
                              value_head=head, prompts=prompts)

    whole, once = jax.jit(scores)(adapters, head, None), jax.jit(scores)(adapters, head, shared)
    for name in ("logprobs", "entropy", "values"):
        np.testing.assert_allclose(np.asarray(once[name])[response], np.asarray(whole[name])[response], atol=2e-5,
                                   err_msg=name)
    assert float(np.abs(np.asarray(whole["logprobs"])[response]).min()) > 0  # real scores were compared

    def objective(adapters, head, prompts):
        out = scores(adapters, head, prompts)
        return (jax.numpy.where(response, out["logprobs"] + out["values"], 0.0)).sum()

    grad = jax.jit(jax.grad(objective, argnums=(0, 1)))
    grads_whole, grads_once = grad(adapters, head, None), grad(adapters, head, shared)
    assert_trees_close(grads_once, grads_whole, atol=2e-4, rtol=2e-4)


def test_the_prompt_stream_is_a_seeded_permutation_per_pass_and_restores_mid_pass():
    from core.rl.trainer import PromptStream

    stream = PromptStream(5, 2, seed=3)
    drawn = np.concatenate([stream.next() for _ in range(5)])
    expected = np.concatenate([np.random.default_rng([3, epoch]).permutation(5) for epoch in (0, 1)])
    np.testing.assert_array_equal(drawn, expected)
    resumed = PromptStream(5, 2, seed=3)
    resumed.restore({"position": 4})  # inside the first pass; the next draw crosses into the second
    np.testing.assert_array_equal(np.concatenate([resumed.next() for _ in range(3)]), expected[4:10])

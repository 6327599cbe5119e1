"""Rollouts: G completions share one prefill, masks and log-probs line up with a teacher-forced forward,
multi-turn tool use continues from the cache exactly, and failing tools become observations."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.lm import model as model_lib
from core.lm.generate import SamplingConfig, generate, pad_prompts, process_logits
from core.rl.rollout import RolloutConfig, rollout

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8]]


class Scripted:
    """Answers every action with `observation` until turn `done_after`, then done with reward = turns."""

    def __init__(self, observation="21 22 23", done_after=2, fail=None):
        self.observation, self.done_after, self.fail = observation, done_after, fail

    def reset(self, prompt):
        return {"prompt": prompt, "turns": 0, "actions": []}

    def step(self, state, action_text):
        state["turns"] += 1
        state["actions"].append(action_text)
        if self.fail == "raise":
            raise RuntimeError("boom")
        if self.fail == "none":
            return None
        if self.fail == "sleep":
            time.sleep(2.0)
        if state["turns"] >= self.done_after:
            return None if False else ("", True, float(state["turns"]))
        return self.observation, False, 0.5


def _teacher_forced_logprobs(graphdef, params, row, temperature, top_k=0):
    logits = model_lib.apply(graphdef, params, jnp.asarray(row)[None]).logits[0]
    lp = jax.nn.log_softmax(process_logits(logits, temperature=temperature, top_k=top_k), axis=-1)
    return np.asarray(lp)


def test_groups_share_the_prompt_and_logprobs_line_up(tiny_policy, tokenizer):
    config, graphdef, params = tiny_policy
    cfg = RolloutConfig(group_size=3, max_new_tokens=6, max_response_tokens=6, temperature=1.0, top_k=10,
                        prompt_bucket=8)
    envs = [Scripted(done_after=1)] * 2
    out = rollout(graphdef, params, PROMPTS, envs, PROMPTS, tokenizer, jax.random.key(0), cfg)
    assert out.tokens.shape == (6, 5 + 6) and list(out.group) == [0, 0, 0, 1, 1, 1]
    for n in range(6):
        p = PROMPTS[out.group[n]]
        assert out.tokens[n, :len(p)].tolist() == p and out.prompt_lengths[n] == len(p)
        cols = np.flatnonzero(out.policy[n])
        assert cols.tolist() == list(range(len(p), len(p) + 6))  # no EOS: all 6 tokens are policy tokens
        lp = _teacher_forced_logprobs(graphdef, params, out.tokens[n], 1.0, top_k=10)
        np.testing.assert_allclose(out.sample_logprobs[n, cols], lp[cols - 1, out.tokens[n, cols]], atol=1e-5)
    rows = {tuple(out.tokens[n]) for n in range(3)}
    assert len(rows) > 1  # sampled completions of one prompt differ
    np.testing.assert_array_equal(out.rewards, 1.0)  # done after the first action, reward = 1 turn
    assert out.finished.all() and not out.observation.any()


def test_multi_turn_tool_use_continues_from_the_cache(tiny_policy, tokenizer):
    """Greedy, a tool-call stop token that the policy emits early: turn 1 ends at it, the observation is
    appended, turn 2 continues. Turn 2's tokens equal the greedy continuation of the whole sequence."""
    config, graphdef, params = tiny_policy
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    greedy = np.asarray(generate(graphdef, params, tokens, mask, jax.random.key(0),
                                 SamplingConfig(max_new_tokens=6)).tokens)
    stop = int(greedy[0, 2])
    cfg = RolloutConfig(group_size=1, max_new_tokens=6, max_turns=3, max_response_tokens=30, temperature=0.0,
                        tool_stop_sequences=((stop,),), max_observation_tokens=4, prompt_bucket=8)
    envs = [Scripted(observation="21 22 23", done_after=2)] * 2
    out = rollout(graphdef, params, PROMPTS, envs, PROMPTS, tokenizer, jax.random.key(0), cfg)
    row = out.tokens[0]
    n_first = list(greedy[0]).index(stop) + 1
    assert row[3:3 + n_first].tolist() == greedy[0, :n_first].tolist()
    assert row[3 + n_first:3 + n_first + 3].tolist() == [21, 22, 23]
    assert out.observation[0].tolist().count(True) == 3 and out.num_tool_calls[0] == 1
    assert not (out.policy[0] & out.observation[0]).any()
    second = np.flatnonzero(out.policy[0])[n_first:]
    assert len(second) >= 1
    # teacher-forced greedy check of turn 2 (the cache had a gap between the prompt bucket and turn 1)
    logits = np.asarray(model_lib.apply(graphdef, params, jnp.asarray(row[:second[-1] + 1])[None]).logits[0])
    np.testing.assert_array_equal(logits[second - 1].argmax(-1), row[second])
    assert out.step_positions[0, 0] == 3 + n_first - 1 and out.step_rewards[0, 0] == 0.5
    assert out.rewards[0] == 0.5 + 2.0 and out.finished[0]


@pytest.mark.parametrize("fail, message", [("raise", "raised RuntimeError: boom"), ("none", "returned nothing"),
                                           ("sleep", "timed out after 0.2 s")])
def test_a_failing_tool_becomes_an_observation(tiny_policy, tokenizer, fail, message):
    config, graphdef, params = tiny_policy
    seen = []

    class Recording:
        def encode(self, text):
            seen.append(text)
            return tokenizer.encode(text)

        def decode(self, ids):
            return tokenizer.decode(ids)

    cfg = RolloutConfig(group_size=2, max_new_tokens=3, max_turns=2, max_response_tokens=20, temperature=1.0,
                        max_observation_tokens=3, tool_timeout_s=0.2, prompt_bucket=8)
    out = rollout(graphdef, params, PROMPTS, [Scripted(fail=fail)] * 2, PROMPTS, Recording(), jax.random.key(1), cfg)
    assert any(message in text for text in seen) and len(seen) == 4  # every row got the error, the batch lived
    assert out.observation.any(axis=1).all() and (out.num_tool_calls == 2).all()  # both turns called the tool


def test_a_prompt_longer_than_the_budget_is_an_error(tiny_policy, tokenizer):
    config, graphdef, params = tiny_policy
    cfg = RolloutConfig(group_size=1, max_prompt_tokens=4)
    with pytest.raises(ValueError, match="prompt 1 has 5 tokens: expected 1 to max_prompt_tokens=4"):
        rollout(graphdef, params, PROMPTS, [Scripted()] * 2, PROMPTS, tokenizer, jax.random.key(0), cfg)


def test_a_turns_tool_calls_run_together(tiny_policy, tokenizer):
    """The 4 rows' calls of a turn are in flight at once on 4 workers: each waits at a 4-party barrier,
    which breaks (and the call raises) unless all four are running together."""
    import threading

    config, graphdef, params = tiny_policy
    barrier = threading.Barrier(4, timeout=5.0)

    class Meet:
        def reset(self, prompt):
            return prompt

        def step(self, state, action_text):
            barrier.wait()
            return None, True, 1.0

    cfg = RolloutConfig(group_size=2, max_new_tokens=2, max_response_tokens=2, tool_workers=4, prompt_bucket=8)
    out = rollout(graphdef, params, PROMPTS, [Meet()] * 2, PROMPTS, tokenizer, jax.random.key(0), cfg)
    np.testing.assert_array_equal(out.rewards, 1.0)  # no call raised BrokenBarrierError


def test_a_hung_tool_does_not_hold_a_thread_of_the_next_rollout(tiny_policy, tokenizer):
    """One worker: the first rollout's tool hangs past its timeout; the next rollout gets fresh threads, so
    its fast tool answers instead of queueing behind the hung one (and timing out)."""
    config, graphdef, params = tiny_policy

    class Env:
        def __init__(self, delay):
            self.delay = delay

        def reset(self, prompt):
            return prompt

        def step(self, state, action_text):
            time.sleep(self.delay)
            return None, True, 1.0

    cfg = RolloutConfig(group_size=1, max_new_tokens=2, max_response_tokens=2, tool_workers=1, tool_timeout_s=0.2,
                        prompt_bucket=8)
    hung = rollout(graphdef, params, PROMPTS[:1], [Env(1.5)], PROMPTS[:1], tokenizer, jax.random.key(0), cfg)
    assert hung.rewards[0] == 0.0  # timed out
    fast = rollout(graphdef, params, PROMPTS[:1], [Env(0.0)], PROMPTS[:1], tokenizer, jax.random.key(0), cfg)
    assert fast.rewards[0] == 1.0

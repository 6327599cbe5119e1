"""Generation: cached greedy decode equals an uncached reference, stop tokens, log-probs, sampling filters,
no recompilation within a prompt-length bucket, the Pallas decode kernel path, and cache-size errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import CompileCounter

from core.lm.generate import SamplingConfig, generate, pad_prompts, sample_logits

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]
N = 5


@pytest.fixture(scope="module")
def greedy(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0), SamplingConfig(max_new_tokens=N))
    return out


def test_greedy_matches_uncached_reference(tiny_lm, greedy):
    """Teacher-force prompt + generated tokens through the cache-free forward (unpadded prompt, right
    padding only after the sequence): each generated token is the argmax there, with the same log-prob."""
    config, graphdef, params, apply = tiny_lm
    width = max(len(p) for p in PROMPTS) + N
    seqs = np.zeros((len(PROMPTS), width), np.int32)
    for b, prompt in enumerate(PROMPTS):
        seqs[b, :len(prompt) + N] = prompt + np.asarray(greedy.tokens[b]).tolist()
    logits = np.asarray(apply(params, jnp.asarray(seqs)).logits)
    for b, prompt in enumerate(PROMPTS):
        step_logits = logits[b, len(prompt) - 1:len(prompt) - 1 + N]
        np.testing.assert_array_equal(step_logits.argmax(-1), np.asarray(greedy.tokens[b]))
        lps = np.asarray(jax.nn.log_softmax(step_logits))[np.arange(N), np.asarray(greedy.tokens[b])]
        np.testing.assert_allclose(np.asarray(greedy.logprobs[b]), lps, atol=1e-5)
    assert bool(greedy.mask.all()) and greedy.tokens.shape == (3, N)
    assert len(set(np.asarray(greedy.tokens).ravel().tolist())) > 2  # not a degenerate constant output


def test_stop_tokens_pad_the_rest(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    stop = int(greedy.tokens[1, 1])
    first = [int(np.argmax(np.asarray(greedy.tokens[b]) == stop)) if stop in np.asarray(greedy.tokens[b]) else N
             for b in range(3)]
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0),
                   SamplingConfig(max_new_tokens=N, stop_tokens=(stop,), pad_id=39))
    for b in range(3):
        n = min(first[b] + 1, N)
        np.testing.assert_array_equal(np.asarray(out.tokens[b, :n]), np.asarray(greedy.tokens[b, :n]))
        assert (np.asarray(out.tokens[b, n:]) == 39).all() and (np.asarray(out.logprobs[b, n:]) == 0).all()
        assert int(out.lengths[b]) == n
    assert int(out.lengths[1]) == 2


def test_no_recompilation_within_a_bucket(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    with CompileCounter() as counter:
        for prompts in ([[5, 6], [7, 8, 9, 10, 11], [12, 13, 14]], [[1] * 8, [2], [3, 4, 5, 6]]):
            tokens, mask = pad_prompts(prompts, bucket=8)
            generate(graphdef, params, tokens, mask, jax.random.key(1), SamplingConfig(max_new_tokens=N))
    assert counter.count == 0


def test_kernel_decode_path_matches(tiny_lm, greedy):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0), SamplingConfig(max_new_tokens=N),
                   use_kernel=True)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(greedy.tokens))
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(greedy.logprobs), atol=1e-5)


def test_sampling_filters():
    logits = jnp.asarray(np.log(np.array([[0.5, 0.3, 0.15, 0.05]] * 4000, np.float32)))
    keys = jax.random.key(3)
    k1 = sample_logits(logits, keys, temperature=1.0, top_k=1)
    assert (np.asarray(k1) == 0).all()
    k2 = np.asarray(sample_logits(logits, keys, temperature=1.0, top_k=2))
    assert set(np.unique(k2)) == {0, 1}
    np.testing.assert_allclose((k2 == 0).mean(), 0.5 / 0.8, atol=0.03)
    # top_p = 0.7: the nucleus is {0, 1} (0.5 < 0.7, 0.8 >= 0.7)
    p = np.asarray(sample_logits(logits, keys, temperature=1.0, top_p=0.7))
    assert set(np.unique(p)) == {0, 1}
    full = np.asarray(sample_logits(logits, keys, temperature=1.0))
    np.testing.assert_allclose(np.bincount(full, minlength=4) / len(full), [0.5, 0.3, 0.15, 0.05], atol=0.03)
    # temperature 0.5 squares the probabilities (renormalised)
    cold = np.asarray(sample_logits(logits, keys, temperature=0.5))
    q = np.array([0.5, 0.3, 0.15, 0.05]) ** 2
    np.testing.assert_allclose(np.bincount(cold, minlength=4) / len(cold), q / q.sum(), atol=0.03)
    assert (np.asarray(sample_logits(logits, keys)) == 0).all()  # greedy


def test_bad_inputs(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    tokens, mask = pad_prompts(PROMPTS, bucket=8)
    with pytest.raises(ValueError, match="longer than the cache"):
        generate(graphdef, params, tokens, mask, jax.random.key(0), SamplingConfig(max_new_tokens=4), cache_size=8)
    with pytest.raises(ValueError, match="expected at most length=4"):
        pad_prompts(PROMPTS, length=4)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(ValueError, match="same"):
        generate(graphdef, params, tokens, mask[:, :3], jax.random.key(0))

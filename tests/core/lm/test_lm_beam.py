"""Beam search: exact against exhaustive enumeration on a tiny vocabulary (length penalty 0, where the early
stop is exact), beam 1 equals greedy generation, an `inputs_embeds` prefix with holes equals the token path,
length normalisation as transformers', and bad arguments."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.lm import model as model_lib
from core.lm import weights as weights_lib
from core.lm.beam import BeamConfig, beam_search
from core.lm.configs import LMConfig
from core.lm.generate import SamplingConfig, generate, pad_prompts

SMALL = LMConfig(architecture="llama", vocab_size=4, hidden_size=16, intermediate_size=32, num_layers=1,
                 num_heads=2, num_kv_heads=1, head_dim=8, attention_bias=False)
EOS = 3
PROMPTS = [[0, 1, 2], [2, 2]]


@pytest.fixture(scope="module")
def small_lm():
    graphdef, params = weights_lib.params_from_hf_tensors(SMALL, weights_lib.random_hf_tensors(SMALL, 3, scale=0.6))
    return graphdef, params


def _sequence_logprob(graphdef, params, prompt, continuation):
    seq = jnp.asarray([prompt + continuation], jnp.int32)
    logp = jax.nn.log_softmax(model_lib.apply(graphdef, params, seq).logits[0].astype(jnp.float32), -1)
    return float(sum(logp[len(prompt) - 1 + i, t] for i, t in enumerate(continuation)))


def _exhaustive(graphdef, params, prompt, n, length_penalty):
    """Every hypothesis: a sequence ending at its first EOS within n tokens, or n tokens without EOS."""
    hyps = []
    for length in range(1, n + 1):
        for body in itertools.product(range(SMALL.vocab_size), repeat=length):
            body = list(body)
            if EOS in body[:-1] or (length < n and body[-1] != EOS):
                continue
            lp = _sequence_logprob(graphdef, params, prompt, body)
            hyps.append((lp / length ** length_penalty, lp, body))
    return sorted(hyps, key=lambda h: -h[0])


def test_beam_search_equals_exhaustive_search(small_lm):
    """With beams enough to keep every prefix and length penalty 0, the n-best list is the exhaustive top-n."""
    graphdef, params = small_lm
    n = 3
    tokens, mask = pad_prompts(PROMPTS, bucket=4)
    out = beam_search(graphdef, params, tokens, mask,
                      BeamConfig(beam_size=16, max_new_tokens=n, eos_tokens=(EOS,), length_penalty=0.0, n_best=5))
    for b, prompt in enumerate(PROMPTS):
        ref = _exhaustive(graphdef, params, prompt, n, 0.0)[:5]
        got = [np.asarray(out.tokens[b, j, :int(out.lengths[b, j])]).tolist() for j in range(5)]
        assert got == [h[2] for h in ref]
        np.testing.assert_allclose(np.asarray(out.scores[b]), [h[0] for h in ref], atol=1e-4)
        np.testing.assert_allclose(np.asarray(out.logprobs[b]), [h[1] for h in ref], atol=1e-4)
        np.testing.assert_array_equal(np.asarray(out.finished[b]), [h[2][-1] == EOS for h in ref])
        assert len({tuple(h) for h in got}) == 5  # distinct hypotheses


def test_length_penalty_ranks_by_normalised_score(small_lm):
    """The best hypothesis under length penalty 1 is the exhaustive argmax of sum log p / length, and its score
    is that ratio (a larger beam than needed, so the early-stop heuristic cannot cut it)."""
    graphdef, params = small_lm
    tokens, mask = pad_prompts(PROMPTS[:1], bucket=4)
    out = beam_search(graphdef, params, tokens, mask,
                      BeamConfig(beam_size=16, max_new_tokens=3, eos_tokens=(EOS,), length_penalty=1.0, n_best=1))
    best = _exhaustive(graphdef, params, PROMPTS[0], 3, 1.0)[0]
    assert np.asarray(out.tokens[0, 0, :int(out.lengths[0, 0])]).tolist() == best[2]
    np.testing.assert_allclose(float(out.scores[0, 0]), best[0], atol=1e-4)
    np.testing.assert_allclose(float(out.scores[0, 0]), float(out.logprobs[0, 0]) / int(out.lengths[0, 0]), atol=1e-5)


def test_beam_one_equals_greedy(tiny_lm):
    config, graphdef, params, _ = tiny_lm
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]
    tokens, mask = pad_prompts(prompts, bucket=8)
    greedy = generate(graphdef, params, tokens, mask, jax.random.key(0), SamplingConfig(max_new_tokens=6))
    stop = int(greedy.tokens[0, 2])  # a token greedy emits: the rows stop at different steps
    greedy = generate(graphdef, params, tokens, mask, jax.random.key(0),
                      SamplingConfig(max_new_tokens=6, stop_tokens=(stop,)))
    out = beam_search(graphdef, params, tokens, mask, BeamConfig(beam_size=1, max_new_tokens=6, eos_tokens=(stop,)))
    np.testing.assert_array_equal(np.asarray(out.tokens[:, 0]), np.asarray(greedy.tokens))
    np.testing.assert_array_equal(np.asarray(out.lengths[:, 0]), np.asarray(greedy.lengths))
    np.testing.assert_allclose(np.asarray(out.logprobs[:, 0]), np.asarray(greedy.logprobs.sum(1)), atol=1e-5)
    assert bool(out.finished[0, 0]) and int(out.lengths[0, 0]) <= 3
    assert len(set(np.asarray(out.lengths[:, 0]).tolist())) > 1  # rows ended at different steps


def test_inputs_embeds_prefix_with_holes(tiny_lm):
    """A prompt given as embeddings, with masked slots in the middle (an encoder's padded tokens), searches as
    the same prompt given as token ids without the holes."""
    config, graphdef, params, _ = tiny_lm
    prompt = [5, 6, 7, 8]
    tokens, mask = pad_prompts([prompt], length=4)
    holey = jnp.asarray([[5, 0, 6, 0, 7, 8]], jnp.int32)
    holey_mask = jnp.asarray([[True, False, True, False, True, True]])
    emb = model_lib.embed(graphdef, params, holey)
    emb = jnp.where(holey_mask[..., None], emb, 123.0)  # the holes' content must not matter
    cfg = BeamConfig(beam_size=3, max_new_tokens=5, eos_tokens=(11,), n_best=3)
    a = beam_search(graphdef, params, tokens, mask, cfg)
    b = beam_search(graphdef, params, None, holey_mask, cfg, inputs_embeds=emb)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_allclose(np.asarray(a.scores), np.asarray(b.scores), atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_best"):
        BeamConfig(beam_size=2, n_best=3)
    with pytest.raises(ValueError, match="beam_size"):
        BeamConfig(beam_size=0)
    with pytest.raises(ValueError, match="mask"):
        beam_search(None, None, jnp.zeros((2, 3), jnp.int32), jnp.ones((2, 4), bool))

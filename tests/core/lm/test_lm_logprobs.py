"""Chunked teacher-forced log-probs: equal to the plain softmax (values, entropies, gradients), never hold
the (B, T, V) logits, and `sequence_logprobs` equals log_softmax of the model's logits."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from core.lm import model as model_lib
from core.lm.logprobs import chunked_logprobs, sequence_logprobs

B, T, D, V = 2, 5, 16, 37  # V is not a multiple of the chunk


def _problem():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    return (jax.random.normal(k1, (B, T, D)), jax.random.normal(k2, (D, V)) * 0.5,
            jax.random.randint(k3, (B, T), 0, V))


def _plain(hidden, w, targets, temperature=1.0):
    logp = jax.nn.log_softmax((hidden @ w) / temperature, axis=-1)
    entropy = -(jnp.exp(logp) * logp).sum(-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0], entropy


@pytest.mark.parametrize("chunk", [8, 37, 100])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_equals_plain_softmax(chunk, temperature):
    hidden, w, targets = _problem()
    lp, ent = chunked_logprobs(hidden, w, targets, chunk_size=chunk, temperature=temperature, with_entropy=True)
    ref_lp, ref_ent = _plain(hidden, w, targets, temperature)
    np.testing.assert_allclose(lp, ref_lp, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(ent, ref_ent, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_gradients_equal_plain_softmax(temperature):
    """The hand-written backward, with weights on both outputs and repeated targets (the one-hot scatter)."""
    hidden, w, targets = _problem()
    targets = targets.at[1].set(targets[0])
    g_lp = jax.random.normal(jax.random.key(5), (B, T))

    def loss(fn, h, w):
        lp, ent = fn(h, w)
        return (g_lp * lp).sum() + 0.3 * ent.sum()

    chunked = lambda h, w: chunked_logprobs(h, w, targets, chunk_size=8, temperature=temperature,  # noqa: E731
                                            with_entropy=True)
    plain = lambda h, w: _plain(h, w, targets, temperature)  # noqa: E731
    got = jax.grad(loss, argnums=(1, 2))(chunked, hidden, w)
    want = jax.grad(loss, argnums=(1, 2))(plain, hidden, w)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("used", ["logprobs", "entropy", "both"])
def test_a_frozen_head_gets_no_weight_gradient_and_unused_outputs_cost_nothing(used):
    """With the head under stop_gradient (LoRA's frozen base, a reference model) the backward forms no weight
    gradient block (D, chunk) at all, and the hidden states' gradient still equals the plain softmax's, with
    either output unused."""
    hidden, w, targets = _problem()
    weights = {"logprobs": (1.0, 0.0), "entropy": (0.0, 1.0), "both": (1.0, 0.3)}[used]

    def loss(fn, h, w):
        lp, ent = fn(h, w)
        return sum(c * x.sum() for c, x in zip(weights, (lp, ent)) if c)

    chunked = lambda h, w: chunked_logprobs(h, w, targets, chunk_size=8, with_entropy=True)  # noqa: E731
    frozen = lambda h: loss(chunked, h, jax.lax.stop_gradient(w))  # noqa: E731
    got = jax.grad(frozen)(hidden)
    want = jax.grad(lambda h: loss(lambda h, w: _plain(h, w, targets), h, w))(hidden)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    assert (D, 8) not in set(_shapes(jax.make_jaxpr(jax.grad(frozen))(hidden).jaxpr))
    both = jax.make_jaxpr(jax.grad(lambda h, w: loss(chunked, h, w), argnums=(0, 1)))(hidden, w).jaxpr
    assert (D, 8) in set(_shapes(both))  # the check above can see a weight-gradient block


def _shapes(jaxpr):
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            yield tuple(getattr(v.aval, "shape", ()))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _shapes(sub)
        for p in eqn.params.values():
            inner = getattr(p, "jaxpr", None)
            if inner is not None:
                yield from _shapes(getattr(inner, "jaxpr", inner))


def test_forward_and_backward_never_hold_the_full_logits():
    hidden, w, targets = _problem()
    f = lambda h, w: chunked_logprobs(h, w, targets, chunk_size=8).sum()  # noqa: E731
    shapes = set(_shapes(jax.make_jaxpr(jax.value_and_grad(f, argnums=(0, 1)))(hidden, w).jaxpr))
    assert (B, T, 8) in shapes  # the scan body was inspected
    assert not any(len(s) >= 2 and s[-1] >= V and s[:2] == (B, T) for s in shapes)
    plain = lambda h, w: _plain(h, w, targets)[0].sum()  # noqa: E731
    assert (B, T, V) in set(_shapes(jax.make_jaxpr(jax.value_and_grad(plain, argnums=(0, 1)))(hidden, w).jaxpr))


@pytest.mark.parametrize("tied", [False, True])
def test_sequence_logprobs_equal_the_model_logits(tiny_lm, tied):
    config, graphdef, params, apply = tiny_lm
    if tied:
        import dataclasses
        config = dataclasses.replace(config, tie_word_embeddings=True)
        graphdef, params = model_lib.init(config, jax.random.key(3))
    tokens = jax.random.randint(jax.random.key(1), (2, 7), 0, config.vocab_size)
    mask = jnp.asarray([[True] * 7, [False, False] + [True] * 5])
    targets = jnp.roll(tokens, -1, axis=1)
    lp, ent = jax.jit(lambda p: sequence_logprobs(graphdef, p, tokens, targets, attention_mask=mask, chunk_size=16,
                                                  return_entropy=True))(params)
    logits = model_lib.apply(graphdef, params, tokens, attention_mask=mask).logits
    ref, ref_ent = _plain_from_logits(logits, targets)
    np.testing.assert_allclose(lp, ref, atol=1e-5)
    np.testing.assert_allclose(ent, ref_ent, atol=1e-5)


def _plain_from_logits(logits, targets):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0], -(jnp.exp(logp) * logp).sum(-1)


def test_inputs_embeds_and_hidden_output(tiny_lm):
    """A prefix of arbitrary embeddings before the tokens: positions follow the mask, the tokens' logits
    equal those of the same embeddings given as tokens, and return_hidden skips the LM head."""
    config, graphdef, params, apply = tiny_lm
    tokens = jax.random.randint(jax.random.key(1), (2, 6), 0, config.vocab_size)
    embeds = model_lib.embed(graphdef, params, tokens)
    a = model_lib.apply(graphdef, params, tokens).logits
    b = model_lib.apply(graphdef, params, inputs_embeds=embeds).logits
    np.testing.assert_allclose(a, b, atol=1e-6)
    out = model_lib.apply(graphdef, params, tokens, return_hidden=True)
    assert out.logits is None and out.hidden.shape == (2, 6, config.hidden_size)
    np.testing.assert_allclose(out.hidden @ params["lm_head"][...], a, atol=1e-5)
    with pytest.raises(ValueError, match="inputs_embeds shape"):
        model_lib.apply(graphdef, params, inputs_embeds=embeds[..., :-1])
    with pytest.raises(ValueError, match="exactly one"):
        model_lib.apply(graphdef, params, tokens, inputs_embeds=embeds)


def test_remat_gives_the_same_gradients(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    tokens = jax.random.randint(jax.random.key(2), (2, 6), 0, config.vocab_size)

    def loss(p, remat):
        return sequence_logprobs(graphdef, p, tokens, jnp.roll(tokens, -1, 1), chunk_size=16, remat=remat).sum()

    ref = jax.grad(loss)(params, "none")
    for policy in ("full", "dots_no_batch"):
        got = jax.grad(loss)(params, policy)
        for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
            np.testing.assert_allclose(g, r, atol=1e-5, rtol=1e-5)
    jaxpr = str(jax.make_jaxpr(jax.grad(loss), static_argnums=1)(params, "full"))
    assert "remat" in jaxpr or "checkpoint" in jaxpr
    with pytest.raises(ValueError, match="remat='sometimes'"):
        loss(params, "sometimes")

"""core.rl.value: the value head's shapes, alignment with the token columns, small initial values, and where
its gradient goes (head always; trunk unless frozen)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from core.lm import model as model_lib
from core.rl.losses import value_loss
from core.rl.value import ValueHead, init_value_head, value_from_hidden, values

TOKENS = np.array([[1, 5, 7, 9, 11, 0], [3, 4, 12, 0, 0, 0]], np.int32)
ATTENTION = TOKENS > 0


def _norm(tree):
    return float(sum(jnp.sum(x.astype(jnp.float32) ** 2) for x in jax.tree.leaves(tree)) ** 0.5)


def test_values_shape_alignment_and_head_formula(tiny_policy):
    config, graphdef, params = tiny_policy
    head = init_value_head(config.hidden_size, jax.random.key(0))
    v = values(graphdef, params, head, TOKENS, attention_mask=ATTENTION)
    assert v.shape == TOKENS.shape and v.dtype == jnp.float32
    hidden = model_lib.apply(graphdef, params, TOKENS, attention_mask=ATTENTION, return_hidden=True).hidden
    w, b = head["linear"]["kernel"][...], head["linear"]["bias"][...]
    after = np.asarray(hidden @ w + b)[..., 0]  # V after token j
    np.testing.assert_allclose(values(graphdef, params, head, TOKENS, attention_mask=ATTENTION, shift=False), after,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value_from_hidden(head, hidden), after, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v[:, 1:], after[:, :-1], rtol=1e-5, atol=1e-6)  # column j: prefix before j
    np.testing.assert_array_equal(v[:, 0], 0.0)
    # initialised small: std 1 / (D + 1), zero bias
    np.testing.assert_array_equal(b, 0.0)
    assert 0.3 / (config.hidden_size + 1) < float(jnp.std(w)) < 2.0 / (config.hidden_size + 1)
    assert float(jnp.max(jnp.abs(after))) < 1.0


def test_gradient_reaches_head_and_trunk_unless_frozen(tiny_policy):
    config, graphdef, params = tiny_policy
    head = init_value_head(config.hidden_size, jax.random.key(1))
    returns = jnp.asarray(np.linspace(-1, 1, TOKENS.size).reshape(TOKENS.shape), jnp.float32)
    mask = jnp.asarray(ATTENTION)

    def loss(trunk, head_params, freeze):
        v = values(graphdef, trunk, head_params, TOKENS, attention_mask=ATTENTION, freeze_trunk=freeze)
        return value_loss(v, jax.lax.stop_gradient(v), returns, mask, clip=None)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    g_trunk, g_head = grad(params, head, False)
    assert _norm(g_head) > 1e-3 and _norm(g_trunk) > 1e-6
    assert _norm(g_head["linear"]["bias"]) > 1e-3
    g_frozen, g_head_frozen = grad(params, head, True)
    assert _norm(g_frozen) == 0.0
    np.testing.assert_allclose(g_head_frozen["linear"]["kernel"][...], g_head["linear"]["kernel"][...], rtol=1e-5,
                               atol=1e-7)


def test_bad_inputs():
    with pytest.raises(ValueError, match="hidden_size=0"):
        ValueHead(0, rngs=None)
    head = ValueHead(4, init_std=0.0, rngs=nnx.Rngs(params=0))
    np.testing.assert_array_equal(head(jnp.ones((2, 3, 4))), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="hidden size 5"):
        value_from_hidden(init_value_head(4, jax.random.key(0)), jnp.ones((2, 5)))

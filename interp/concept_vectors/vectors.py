"""Function / concept vectors and steering with them.

A vector is the sum over selected heads (l, h) of the head's mean output through its slice of layer l's
`o_proj` (the other heads of the layer zeroed), plus the `o_proj` bias if the model has one (the notes'
construction, the same for FVs and CVs: only the head set differs). Steering adds w * vector to the output
hidden state of decoder layer l at the last position.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.lm import model as model_lib
from core.lm.hooks import Hooks, Steer


def output_projections(params: nnx.State, num_layers: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(o_proj (L, H, Dh, D), o_bias (L, D) or None) from a core.lm parameter state."""
    layers = params["layers"]
    o = np.stack([np.asarray(layers[i]["self_attn"]["o_proj"][...]) for i in range(num_layers)])
    attn0 = layers[0]["self_attn"]
    bias = None
    if "o_bias" in attn0 and attn0["o_bias"] is not None:
        bias = np.stack([np.asarray(layers[i]["self_attn"]["o_bias"][...]) for i in range(num_layers)])
    return o, bias


def head_vector(mean_heads: np.ndarray, o_proj: np.ndarray, o_bias: np.ndarray | None,
                heads: Sequence[tuple[int, int]]) -> np.ndarray:
    """sum_{(l, h) in heads} mean_heads[l, h] @ o_proj[l, h] (+ o_bias[l] per head). mean_heads: (L, H, Dh)."""
    mean_heads = np.asarray(mean_heads)
    if mean_heads.shape != o_proj.shape[:3]:
        raise ValueError(f"mean_heads shape {mean_heads.shape}: expected (L, H, Dh) = {o_proj.shape[:3]}")
    v = np.zeros(o_proj.shape[-1], np.float64)
    for layer, head in heads:
        v += mean_heads[layer, head].astype(np.float64) @ o_proj[layer, head].astype(np.float64)
        if o_bias is not None:
            v += o_bias[layer]
    return v.astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))


@functools.partial(jax.jit, static_argnames=("graphdef", "num_layers"))
def _steered(graphdef, params, tokens, mask, vector, coef, *, num_layers):
    B, T = tokens.shape
    last = jnp.zeros((B, T), jnp.float32).at[:, T - 1].set(1.0)
    # one Steer per residual index 1..L with a traced coefficient: layer and weight change without a recompile
    steer = tuple(Steer(layer=l + 1, vector=coef[l] * vector, where=last) for l in range(num_layers))
    out = model_lib.apply(graphdef, params, tokens, attention_mask=mask, hooks=Hooks(steer=steer),
                          logits_positions=jnp.full((B, 1), T - 1, jnp.int32))
    return jax.nn.log_softmax(out.logits[:, 0], axis=-1)


def steered_logprobs(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, mask: jax.Array,
                     vector: jax.Array, layer: jax.Array | int, weight: jax.Array | float, *, num_layers: int
                     ) -> jax.Array:
    """log-probs (B, V) at the last position with `weight * vector` added to decoder layer `layer`'s output
    (residual index layer + 1) at the last position. layer and weight may be traced."""
    coef = jnp.where(jnp.arange(num_layers) == layer, jnp.asarray(weight, jnp.float32), 0.0)
    return _steered(graphdef, params, tokens, mask, jnp.asarray(vector, jnp.float32), coef, num_layers=num_layers)


@functools.partial(jax.jit, static_argnames=("graphdef", "num_layers"))
def steering_sweep(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, mask: jax.Array,
                   vectors: jax.Array, weights: jax.Array, *, num_layers: int) -> jax.Array:
    """Probabilities (V_n, L, W, B, V) of every vector x layer x weight on the same prompts, one program.

    tokens, mask: (B, T); vectors: (V_n, D); weights: (W,)."""
    def one(vector, layer, weight):
        coef = jnp.where(jnp.arange(num_layers) == layer, weight, 0.0)
        return jnp.exp(_steered(graphdef, params, tokens, mask, vector, coef, num_layers=num_layers))

    layers = jnp.arange(num_layers)
    per_weight = jax.vmap(one, in_axes=(None, None, 0))
    per_layer = jax.vmap(per_weight, in_axes=(None, 0, None))
    return jax.lax.map(lambda v: per_layer(v, layers, weights), vectors)


def kl_divergence(p: np.ndarray, q: np.ndarray, eps: float = 1e-9) -> np.ndarray:
    """KL(p || q) over the last axis."""
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    return (p * (np.log(p + eps) - np.log(q + eps))).sum(-1)

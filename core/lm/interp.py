"""Interpretability at scale: activation patching of every attention head as one compiled program.

Causal mediation over heads (function vectors' causal indirect effect, Todd et al. 2024): capture the per-head
outputs z (the `o_proj` input) of a clean run, patch one head's z into a corrupted run, and measure how the
answer's probability moves. `head_patching_sweep` does this for all L * H heads with a traced
`PatchHeadAt`, mapped over (layer, head) with `lax.map` (chunks of `batch_size` heads vmapped together), so
the sweep compiles once for given shapes, whatever the model size.

    clean = apply(graphdef, params, clean_tokens, hooks=Hooks(capture=Capture(residual=False)))
    cie = head_patching_sweep(graphdef, params, corrupted_tokens, clean.captured["heads"], answer_logprob,
                              targets, where=last_token, logits_positions=last_pos)  # (L, H, ...)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from core.lm import model as model_lib
from core.lm.hooks import Hooks, PatchHeadAt


@functools.partial(jax.jit, static_argnames=("graphdef", "metric_fn", "batch_size"))
def head_patching_sweep(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, clean_heads: jax.Array,
                        metric_fn: Callable[..., Any], *metric_args: Any, attention_mask: jax.Array | None = None,
                        where: jax.Array | None = None, logits_positions: jax.Array | None = None,
                        batch_size: int | None = None) -> Any:
    """metric_fn(logits, *metric_args) of the forward on `tokens` with one head patched, for every head.

    tokens: (B, T) int, the run to patch into (e.g. corrupted prompts). clean_heads: per-head outputs to patch
    in, broadcastable to (L, B, T, H, Dh), e.g. `captured["heads"]` of a clean run, or a mean over prompts
    (L, 1, 1, H, Dh). where: (B, T) bool positions to patch (None = all). logits_positions: (B, P) int, so the
    LM head runs only there; metric_fn then gets logits (B, P, V) float32, else (B, T, V). metric_fn must be a
    hashable static function (pass the same object to reuse the compile); per-call data such as target ids go
    in `metric_args` (traced). batch_size: heads vmapped together per `lax.map` step (None = one at a time,
    least memory; L * H = all at once). Returns metric_fn's output with leading axes (L, H).
    """
    config = nnx.merge(graphdef, params, copy=True).config
    L, H, Dh = config.num_layers, config.num_heads, config.head_dim
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens shape {tokens.shape}: expected (B, T)")
    B, T = tokens.shape
    clean_heads = jnp.asarray(clean_heads)
    try:
        jnp.broadcast_shapes(clean_heads.shape, (L, B, T, H, Dh))
    except ValueError:
        raise ValueError(f"clean_heads shape {clean_heads.shape}: expected broadcastable to (L, B, T, H, Dh) = "
                         f"{(L, B, T, H, Dh)}") from None
    if clean_heads.ndim != 5 or clean_heads.shape[0] != L or clean_heads.shape[3] != H:
        raise ValueError(f"clean_heads shape {clean_heads.shape}: expected (L={L}, B, T, H={H}, Dh)")
    if batch_size is not None and not 1 <= batch_size <= L * H:
        raise ValueError(f"batch_size={batch_size}: expected None or in [1, L * H = {L * H}]")

    def one(layer_head):
        layer, head = layer_head
        value = jax.lax.dynamic_index_in_dim(clean_heads, layer, axis=0, keepdims=False)
        value = jax.lax.dynamic_index_in_dim(value, head, axis=2, keepdims=False)  # (B or 1, T or 1, Dh)
        patch = PatchHeadAt(value=value, layer=layer, head=head, where=where)
        out = model_lib.apply(graphdef, params, tokens, attention_mask=attention_mask, hooks=Hooks(patch=(patch,)),
                              logits_positions=logits_positions)
        return metric_fn(out.logits, *metric_args)

    layers = jnp.repeat(jnp.arange(L, dtype=jnp.int32), H)
    heads = jnp.tile(jnp.arange(H, dtype=jnp.int32), L)
    per_head = jax.lax.map(one, (layers, heads), batch_size=batch_size)
    return jax.tree.map(lambda m: m.reshape((L, H) + m.shape[1:]), per_head)


"""Teacher-forced per-token log-probs (and entropies) with the vocabulary projection done in chunks.

A policy-gradient or SFT step needs log p(target_t | prefix) at every position, never the whole (B, T, V)
logits tensor: at a 150k vocabulary that tensor dwarfs the model's activations. `chunked_logprobs` scans
the LM head in `chunk_size` column blocks with an online log-sum-exp (as flash attention does over keys),
and rematerialises each block in the backward pass, so forward and backward hold (B, T, chunk_size) at a
time. The target's logit is a gathered dot product.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def chunked_logprobs(hidden: jax.Array, unembedding: jax.Array, targets: jax.Array, *, chunk_size: int = 4096,
                     temperature: float = 1.0, with_entropy: bool = False
                     ) -> jax.Array | tuple[jax.Array, jax.Array]:
    """log softmax(hidden @ unembedding / temperature)[targets], without materialising the logits.

    hidden: (B, T, D); unembedding: (D, V); targets: (B, T) int. Returns logprobs (B, T) float32 and, with
    `with_entropy`, the entropy (B, T) of each position's distribution. The matmul runs in hidden's dtype
    and is accumulated in float32, as the model's own logits are.
    """
    if hidden.ndim != 3 or unembedding.ndim != 2 or hidden.shape[-1] != unembedding.shape[0]:
        raise ValueError(f"hidden {hidden.shape} and unembedding {unembedding.shape}: expected (B, T, D) and (D, V)")
    if targets.shape != hidden.shape[:2]:
        raise ValueError(f"targets shape {targets.shape}: expected (B, T) = {hidden.shape[:2]}")
    if chunk_size < 1 or temperature <= 0:
        raise ValueError(f"chunk_size={chunk_size}, temperature={temperature}: expected both > 0")
    D, V = unembedding.shape
    chunk = min(chunk_size, V)
    n = -(-V // chunk)
    w = unembedding.astype(hidden.dtype)
    blocks = jnp.pad(w, ((0, 0), (0, n * chunk - V))).reshape(D, n, chunk).transpose(1, 0, 2)  # (n, D, chunk)
    in_vocab = (jnp.arange(n * chunk) < V).reshape(n, chunk)

    def block(carry, xs):
        m, s, t = carry  # running max, sum of exp(z - m), sum of exp(z - m) * z
        w_c, ok = xs
        z = jnp.where(ok, (hidden @ w_c).astype(jnp.float32) / temperature, -jnp.inf)
        m_new = jnp.maximum(m, z.max(axis=-1))
        scale = jnp.exp(m - m_new)
        e = jnp.exp(z - m_new[..., None])
        s = s * scale + e.sum(axis=-1)
        t = t * scale + (e * jnp.where(ok, z, 0.0)).sum(axis=-1)
        return (m_new, s, t), None

    shape = hidden.shape[:2]
    init = (jnp.full(shape, -jnp.inf, jnp.float32), jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))
    (m, s, t), _ = jax.lax.scan(jax.checkpoint(block), init, (blocks, in_vocab))
    lse = m + jnp.log(s)
    target_cols = jnp.take(w, jnp.clip(targets, 0, V - 1), axis=1)  # (D, B, T)
    target_logit = jnp.einsum("btd,dbt->bt", hidden, target_cols,
                              preferred_element_type=jnp.float32) / temperature
    logprobs = target_logit - lse
    if with_entropy:
        return logprobs, lse - t / s
    return logprobs


def sequence_logprobs(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array | None, targets: jax.Array, *,
                      chunk_size: int = 4096, temperature: float = 1.0, return_entropy: bool = False,
                      **model_kwargs) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Teacher-forced log p(targets[:, t] | inputs[:, :t+1]) (B, T), in vocabulary chunks (see module doc).

    tokens (B, T) (or `inputs_embeds=` in model_kwargs) are the inputs; targets (B, T) the tokens to score,
    usually the inputs shifted left (mask the last position). model_kwargs go to the forward
    (attention_mask, positions, segment_ids, hooks, remat, ...). Jittable and differentiable.
    """
    model = nnx.merge(graphdef, params, copy=True)
    hidden = model(tokens, return_hidden=True, **model_kwargs).hidden
    return chunked_logprobs(hidden, model.unembedding(), jnp.asarray(targets, jnp.int32), chunk_size=chunk_size,
                            temperature=temperature, with_entropy=return_entropy)

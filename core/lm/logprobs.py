"""Teacher-forced per-token log-probs (and entropies) with the vocabulary projection done in chunks.

A policy-gradient or SFT step needs log p(target_t | prefix) at every position, never the whole (B, T, V)
logits tensor: at a 150k vocabulary that tensor dwarfs the model's activations. `chunked_logprobs` scans
the LM head in `chunk_size` column blocks with an online log-sum-exp (as flash attention does over keys);
its hand-written backward recomputes each block's logits, so forward and backward hold (B, T, chunk_size)
at a time. The target's logit is a gathered dot product.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax.custom_derivatives import SymbolicZero


def chunked_logprobs(hidden: jax.Array, unembedding: jax.Array, targets: jax.Array, *, chunk_size: int = 4096,
                     temperature: float = 1.0, with_entropy: bool = False
                     ) -> jax.Array | tuple[jax.Array, jax.Array]:
    """log softmax(hidden @ unembedding / temperature)[targets], without materialising the logits.

    hidden: (B, T, D); unembedding: (D, V); targets: (B, T) int. Returns logprobs (B, T) float32 and, with
    `with_entropy`, the entropy (B, T) of each position's distribution. The matmul runs in hidden's dtype
    and is accumulated in float32, as the model's own logits are. The gradient is hand-written (one more pass
    over the chunks: recompute each block's logits, then its two gradient matmuls), which is both bounded in
    memory and about twice as fast on a CPU as differentiating the scan.
    """
    if hidden.ndim != 3 or unembedding.ndim != 2 or hidden.shape[-1] != unembedding.shape[0]:
        raise ValueError(f"hidden {hidden.shape} and unembedding {unembedding.shape}: expected (B, T, D) and (D, V)")
    if targets.shape != hidden.shape[:2]:
        raise ValueError(f"targets shape {targets.shape}: expected (B, T) = {hidden.shape[:2]}")
    if chunk_size < 1 or temperature <= 0:
        raise ValueError(f"chunk_size={chunk_size}, temperature={temperature}: expected both > 0")
    logprobs, entropy = _chunked(hidden, unembedding.astype(hidden.dtype), jnp.asarray(targets, jnp.int32),
                                 min(chunk_size, unembedding.shape[1]), float(temperature))
    return (logprobs, entropy) if with_entropy else logprobs


def _blocks(w: jax.Array, chunk: int) -> tuple[jax.Array, jax.Array]:
    """(D, V) -> column blocks (n, D, chunk) zero-padded, and which columns are in the vocabulary (n, chunk)."""
    D, V = w.shape
    n = -(-V // chunk)
    blocks = jnp.pad(w, ((0, 0), (0, n * chunk - V))).reshape(D, n, chunk).transpose(1, 0, 2)
    return blocks, (jnp.arange(n * chunk) < V).reshape(n, chunk)


def _block_logits(hidden, w_c, ok, temperature):
    return jnp.where(ok, (hidden @ w_c).astype(jnp.float32) / temperature, -jnp.inf)


def _forward(hidden, w, targets, chunk, temperature):
    blocks, in_vocab = _blocks(w, chunk)

    def block(carry, xs):
        m, s, t = carry  # running max, sum of exp(z - m), sum of exp(z - m) * z
        z = _block_logits(hidden, *xs, temperature)
        m_new = jnp.maximum(m, z.max(axis=-1))
        scale = jnp.exp(m - m_new)
        e = jnp.exp(z - m_new[..., None])
        s = s * scale + e.sum(axis=-1)
        t = t * scale + (e * jnp.where(xs[1], z, 0.0)).sum(axis=-1)
        return (m_new, s, t), None

    shape = hidden.shape[:2]
    init = (jnp.full(shape, -jnp.inf, jnp.float32), jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))
    (m, s, t), _ = jax.lax.scan(block, init, (blocks, in_vocab))
    lse = m + jnp.log(s)
    mean_z = t / s
    target_cols = jnp.take(w, jnp.clip(targets, 0, w.shape[1] - 1), axis=1)  # (D, B, T)
    target_logit = jnp.einsum("btd,dbt->bt", hidden, target_cols, preferred_element_type=jnp.float32) / temperature
    return (target_logit - lse, lse - mean_z), (lse, mean_z)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _chunked(hidden, w, targets, chunk, temperature):
    return _forward(hidden, w, targets, chunk, temperature)[0]


def _chunked_fwd(hidden, w, targets, chunk, temperature):
    """With symbolic zeros: `perturbed` says which inputs are differentiated. The flags travel to the backward
    in the residuals' structure (() or None), so a frozen head (LoRA, a reference model) gets no weight
    gradient: inside the scan over blocks XLA could not drop that unused output."""
    out, (lse, mean_z) = _forward(hidden.value, w.value, targets.value, chunk, temperature)
    flags = tuple(() if x.perturbed else None for x in (hidden, w))
    return out, (hidden.value, w.value, targets.value, lse, mean_z, flags)


def _chunked_bwd(chunk, temperature, residuals, cotangents):
    """dz_j = g_lp (onehot_j - p_j) - g_ent p_j (z_j - E_p z), z = h w / temperature, per vocabulary block;
    only the gradients of the differentiated inputs, and only the terms of the outputs that are used."""
    hidden, w, targets, lse, mean_z, (want_hidden, want_w) = residuals
    g_lp, g_ent = (None if isinstance(g, SymbolicZero) else jnp.asarray(g, jnp.float32) for g in cotangents)
    want_hidden, want_w = want_hidden is not None, want_w is not None
    D, V = w.shape
    if (g_lp is None and g_ent is None) or not (want_hidden or want_w):
        return None, None, None
    blocks, in_vocab = _blocks(w, chunk)

    def block(d_hidden, xs):
        w_c, ok = xs
        z = _block_logits(hidden, w_c, ok, temperature)
        p = jnp.exp(z - lse[..., None])  # 0 outside the vocabulary
        g = 0.0 if g_lp is None else g_lp[..., None]
        if g_ent is not None:
            g = g + g_ent[..., None] * (jnp.where(ok, z, 0.0) - mean_z[..., None])
        dz = (-p * g / temperature).astype(hidden.dtype)
        if want_hidden:
            d_hidden = d_hidden + jnp.einsum("btc,dc->btd", dz, w_c, preferred_element_type=jnp.float32)
        d_w = jnp.einsum("btd,btc->dc", hidden, dz, preferred_element_type=jnp.float32) if want_w else None
        return d_hidden, d_w

    d_hidden, d_blocks = jax.lax.scan(block, jnp.zeros(hidden.shape, jnp.float32), (blocks, in_vocab))
    d_w = d_blocks.transpose(1, 0, 2).reshape(D, -1)[:, :V] if want_w else None
    if g_lp is not None:  # the one-hot term: d target_logit = g_lp / temperature
        g_t = g_lp / temperature
        cols = jnp.clip(targets, 0, V - 1)
        if want_hidden:
            d_hidden = d_hidden + g_t[..., None] * jnp.take(w, cols, axis=1).transpose(1, 2, 0).astype(jnp.float32)
        if want_w:
            d_w = d_w.T.at[cols.reshape(-1)].add((g_t[..., None] * hidden.astype(jnp.float32)).reshape(-1, D)).T
    return (d_hidden.astype(hidden.dtype) if want_hidden else None, d_w.astype(w.dtype) if want_w else None,
            None)


_chunked.defvjp(_chunked_fwd, _chunked_bwd, symbolic_zeros=True)


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

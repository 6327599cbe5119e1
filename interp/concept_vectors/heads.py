"""Head activations, causal mediation (function-vector heads) and RSA (concept-vector heads).

z_{l,h}(p) is head h's slice of the input to `o_proj` in layer l at the last token of prompt p. Prompts are
left-padded so the last token sits at T - 1 for every row.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.lm import model as model_lib
from core.lm.hooks import Capture, Hooks
from core.lm.interp import head_patching_sweep


def _last(B: int, T: int) -> jax.Array:
    return jnp.full((B, 1), T - 1, jnp.int32)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def last_token_forward(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, mask: jax.Array
                       ) -> tuple[jax.Array, jax.Array]:
    """tokens, mask: (B, T) left-padded. Returns (z (L, B, H, Dh) at the last token, log-probs (B, V) there)."""
    B, T = tokens.shape
    last = _last(B, T)
    out = model_lib.apply(graphdef, params, tokens, attention_mask=mask, logits_positions=last,
                          hooks=Hooks(capture=Capture(positions=last, residual=False)))
    return out.captured["heads"][:, :, 0], jax.nn.log_softmax(out.logits[:, 0], axis=-1)


def batched_last_token(graphdef, params, tokens: np.ndarray, mask: np.ndarray, batch: int = 256
                       ) -> tuple[np.ndarray, np.ndarray]:
    """`last_token_forward` over host arrays in fixed-size chunks (the last one padded), so it compiles once."""
    zs, lps = [], []
    n = tokens.shape[0]
    for s in range(0, n, batch):
        tk, mk = tokens[s:s + batch], mask[s:s + batch]
        pad = batch - tk.shape[0] if n > batch else 0
        if pad:
            tk = np.concatenate([tk, np.repeat(tk[-1:], pad, 0)])
            mk = np.concatenate([mk, np.repeat(mk[-1:], pad, 0)])
        z, lp = last_token_forward(graphdef, params, jnp.asarray(tk), jnp.asarray(mk))
        zs.append(np.asarray(z)[:, :tk.shape[0] - pad])
        lps.append(np.asarray(lp)[:tk.shape[0] - pad])
    return np.concatenate(zs, axis=1), np.concatenate(lps, axis=0)


def answer_logprob(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """log p(target) at the one logits position: logits (B, 1, V), targets (B,) -> (B,). Module level, so the
    sweep's compile is reused."""
    return jax.nn.log_softmax(logits[:, 0], axis=-1)[jnp.arange(logits.shape[0]), targets]


def causal_indirect_effects(graphdef: nnx.GraphDef, params: nnx.State, corrupted: np.ndarray, mask: np.ndarray,
                            mean_heads: np.ndarray, targets: np.ndarray, *, batch_size: int | None = 8
                            ) -> np.ndarray:
    """CIE of every head on every corrupted prompt, one compiled sweep (Todd et al. 2024).

    corrupted, mask: (B, T) left-padded label-shuffled prompts; mean_heads: (L, B, H, Dh), each prompt's
    dataset mean of z over clean prompts (rows of one dataset share it); targets: (B,) first answer tokens.
    Returns (L, H, B): log p(target | mean z_{l,h} patched in at the last token) - log p(target | corrupted).
    """
    corrupted, mask, targets = jnp.asarray(corrupted), jnp.asarray(mask), jnp.asarray(targets)
    B, T = corrupted.shape
    mean_heads = jnp.asarray(mean_heads)
    L, Bm, H, Dh = mean_heads.shape
    if Bm != B:
        raise ValueError(f"mean_heads shape {mean_heads.shape}: expected (L, B={B}, H, Dh)")
    where = jnp.zeros((B, T), bool).at[:, T - 1].set(True)
    _, base_lp = last_token_forward(graphdef, params, corrupted, mask)
    base = base_lp[jnp.arange(B), targets]
    patched = head_patching_sweep(graphdef, params, corrupted, mean_heads[:, :, None], answer_logprob, targets,
                                  attention_mask=mask, where=where, logits_positions=_last(B, T),
                                  batch_size=batch_size)
    return np.asarray(patched - base[None, None])


def group_means(values: np.ndarray, groups: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean of `values` over each group along `axis`: returns (means with that axis replaced by groups, ids)."""
    ids = np.unique(groups)
    return np.stack([np.take(values, np.flatnonzero(groups == g), axis=axis).mean(axis=axis) for g in ids],
                    axis=axis), ids


# ---------------------------------------------------------------------------------------------------------
# RSA

def design_matrix(labels: Sequence) -> np.ndarray:
    """D[i, j] = 1 iff prompts i and j share the label (concept, format, language, ...)."""
    labels = np.asarray(labels)
    return (labels[:, None] == labels[None, :]).astype(np.float32)


def _pearson(a: jax.Array, b: jax.Array) -> jax.Array:
    a = a - a.mean(-1, keepdims=True)
    b = b - b.mean(-1, keepdims=True)
    return (a * b).sum(-1) / jnp.sqrt((a * a).sum(-1) * (b * b).sum(-1))


@jax.jit
def _rsa(z: jax.Array, designs: jax.Array) -> jax.Array:
    N = z.shape[-2]
    iu, ju = np.triu_indices(N, k=1)
    zn = z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-12)
    sims = jnp.einsum("...nd,...md->...nm", zn, zn)[..., iu, ju]  # (..., P) condensed upper triangle
    flat = sims.reshape(-1, sims.shape[-1])
    sim_ranks = jax.vmap(lambda s: jax.scipy.stats.rankdata(s, method="average"))(flat)  # once per head
    design_ranks = jax.vmap(lambda d: jax.scipy.stats.rankdata(d[iu, ju], method="average"))(designs)
    rho = _pearson(sim_ranks[:, None, :], design_ranks[None, :, :])  # (heads, designs)
    return rho.reshape(sims.shape[:-1] + (designs.shape[0],))


def rsa_scores(z: np.ndarray, designs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Spearman rho between each head's cosine-similarity matrix and each design matrix (upper triangles).

    z: (L, N, H, Dh) last-token head outputs over N prompts; designs: name -> (N, N). Returns name -> (L, H).
    Similarities are rank-transformed once per head and every design is scored against those ranks.
    """
    z = np.asarray(z)
    if z.ndim != 4:
        raise ValueError(f"z shape {z.shape}: expected (L, N, H, Dh)")
    N = z.shape[1]
    for name, d in designs.items():
        if np.shape(d) != (N, N):
            raise ValueError(f"design {name!r} shape {np.shape(d)}: expected (N, N) = {(N, N)}")
    stacked = jnp.asarray(np.stack([np.asarray(d, np.float32) for d in designs.values()]))
    rho = np.asarray(_rsa(jnp.asarray(np.moveaxis(z, 2, 1)), stacked))  # (L, H, designs)
    return {name: rho[..., i] for i, name in enumerate(designs)}


def top_heads(scores: np.ndarray, k: int) -> list[tuple[int, int]]:
    """The k (layer, head) pairs of highest score, best first. scores: (L, H)."""
    order = np.argsort(-np.asarray(scores).ravel(), kind="stable")[:k]
    H = scores.shape[1]
    return [(int(i // H), int(i % H)) for i in order]


def jaccard(a: Sequence, b: Sequence) -> float:
    a, b = set(map(tuple, a)), set(map(tuple, b))
    return len(a & b) / max(len(a | b), 1)

"""Pallas kernel for one frame of CTC prefix beam search: expand every beam by blank / repeat / each token,
merge extensions that equal an existing beam, score with the phone n-gram prior, keep the top K.

`expand_prune_reference` is the pure-JAX definition; `expand_prune_pallas` computes the same in a Pallas
kernel (one program per sentence; `interpret=True` on CPU, as in the tests).

Inputs (B = sentences, K = beams, V = classes, blank = 0), log-probabilities in natural log:
  y (B, V) frame log-probs; pb, pnb (B, K) prefix log-probs ending in blank / non-blank; lm (B, K) the
  beams' accumulated prior; plen, last (B, K) int32 prefix lengths and last tokens (-1 when empty);
  lm_next (B, K, V) prior log-prob of each next token given the beam's context; merge (B, K, V) int32: the
  beam j that beam k extended by c equals (-1 if none).
Outputs: sel (B, K) int32 candidate index (k for "stay on beam k", K + k*V + c for "extend k by c"), and the
  chosen candidates' pb, pnb, lm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

NEG = -1e30  # finite "impossible" score, so top-K ties break by index in both implementations


def _candidates(y, pb, pnb, lm, plen, last, lm_next, merge, lm_weight, length_bonus):
    """Per sentence (no batch axis): candidate (pb, pnb, lm, score) vectors of size K + K*V."""
    k, v = lm_next.shape
    ptot = jnp.logaddexp(pb, pnb)
    y_last = jnp.take(y, jnp.maximum(last, 0))
    stay_pb = ptot + y[0]
    stay_pnb = jnp.where(last >= 0, pnb + y_last, -jnp.inf)
    tok = jnp.arange(v)[None, :]
    ext_pnb = jnp.where(tok == last[:, None], pb[:, None], ptot[:, None]) + y[None, :]
    ext_pnb = jnp.where(tok == 0, -jnp.inf, ext_pnb)
    # merge: extension (k, c) that equals beam j adds its mass to j's non-blank probability
    onehot = (merge[:, :, None] == jnp.arange(k)[None, None, :])  # (K, V, K)
    to_j = jnp.where(onehot, ext_pnb[:, :, None], -jnp.inf)
    stay_pnb = jnp.logaddexp(stay_pnb, jax.nn.logsumexp(to_j.reshape(k * v, k), axis=0))
    ext_pnb = jnp.where(merge >= 0, -jnp.inf, ext_pnb)
    ext_lm = lm[:, None] + lm_next
    stay_score = jnp.logaddexp(stay_pb, stay_pnb) + lm_weight * lm + length_bonus * plen
    ext_score = ext_pnb + lm_weight * ext_lm + length_bonus * (plen[:, None] + 1)
    c_pb = jnp.concatenate([stay_pb, jnp.full((k * v,), -jnp.inf)])
    c_pnb = jnp.concatenate([stay_pnb, ext_pnb.reshape(-1)])
    c_lm = jnp.concatenate([lm, ext_lm.reshape(-1)])
    score = jnp.concatenate([stay_score, ext_score.reshape(-1)])
    score = jnp.where(jnp.isfinite(score), score, NEG)
    return c_pb, c_pnb, c_lm, score


def expand_prune_reference(y, pb, pnb, lm, plen, last, lm_next, merge, *, lm_weight: float, length_bonus: float):
    """Pure-JAX reference of one beam-search frame (batched). See the module docstring for shapes."""
    k = pb.shape[1]

    def one(*args):
        c_pb, c_pnb, c_lm, score = _candidates(*args, lm_weight, length_bonus)
        _, sel = jax.lax.top_k(score, k)
        return sel.astype(jnp.int32), c_pb[sel], c_pnb[sel], c_lm[sel]

    return jax.vmap(one)(y, pb, pnb, lm, plen, last, lm_next, merge)


def _kernel(y_ref, pb_ref, pnb_ref, lm_ref, plen_ref, last_ref, lmn_ref, merge_ref, coef_ref,
            sel_ref, opb_ref, opnb_ref, olm_ref):
    k = pb_ref.shape[1]
    lm_weight, length_bonus = coef_ref[0, 0], coef_ref[0, 1]
    c_pb, c_pnb, c_lm, score = _candidates(y_ref[0], pb_ref[0], pnb_ref[0], lm_ref[0], plen_ref[0], last_ref[0],
                                           lmn_ref[0], merge_ref[0], lm_weight, length_bonus)

    def body(i, carry):  # selection by repeated argmax (first index on ties, as lax.top_k)
        score, sel = carry
        j = jnp.argmax(score).astype(jnp.int32)
        return score.at[j].set(-jnp.inf), sel.at[i].set(j)

    _, sel = jax.lax.fori_loop(0, k, body, (score, jnp.zeros((k,), jnp.int32)))
    sel_ref[0] = sel
    opb_ref[0] = c_pb[sel]
    opnb_ref[0] = c_pnb[sel]
    olm_ref[0] = c_lm[sel]


def expand_prune_pallas(y, pb, pnb, lm, plen, last, lm_next, merge, *, lm_weight: float, length_bonus: float,
                        interpret: bool = True):
    """The Pallas version of `expand_prune_reference` (one program per sentence).

    Interpret mode only: the body gathers (beam tokens, selected candidates) and selects by argmax, which the Pallas
    Triton lowering lacks, and the phone axis (41) is no power of two; compiled GPU decoding uses the reference."""
    if not interpret:
        raise NotImplementedError("expand_prune_pallas(interpret=False): the kernel gathers and takes argmax, which "
                                  "Pallas' Triton lowering does not support; use interpret=True or "
                                  "expand_prune_reference (use_pallas=False) on a GPU")
    b, k = pb.shape
    v = y.shape[1]
    row = lambda *shape: pl.BlockSpec((1, *shape), lambda i: (i,) + (0,) * len(shape))  # noqa: E731
    coef = jnp.broadcast_to(jnp.stack([jnp.asarray(lm_weight, jnp.float32),
                                       jnp.asarray(length_bonus, jnp.float32)]), (b, 2))
    out_shape = (jax.ShapeDtypeStruct((b, k), jnp.int32), jax.ShapeDtypeStruct((b, k), jnp.float32),
                 jax.ShapeDtypeStruct((b, k), jnp.float32), jax.ShapeDtypeStruct((b, k), jnp.float32))
    return pl.pallas_call(
        _kernel, out_shape=out_shape, grid=(b,),
        in_specs=[row(v), row(k), row(k), row(k), row(k), row(k), row(k, v), row(k, v), row(2)],
        out_specs=(row(k), row(k), row(k), row(k)), interpret=interpret,
    )(y, pb, pnb, lm, plen.astype(jnp.float32), last, lm_next, merge, coef)

"""Jit-compiled, batched CTC prefix beam search over phoneme log-probs with an optional phone n-gram prior
held as a dense table, and the loader that turns an ARPA phone LM (via kenlm) into that table.

Table layout: `table[a, b, c] = ln p(c | a b)` for context tokens a, b in 0..V-1 (0 = sentence start, since
the CTC blank never enters a prefix) and next token c in 0..V (c = V is the end of sentence; c = 0 unused).
"""

from __future__ import annotations

import functools
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from bit import phonemes
from bit.kernels import expand_prune_pallas, expand_prune_reference

PHONE_ARPA = pathlib.Path(__file__).resolve().parent / "data" / "pocketsphinx_en-us-phone_3gram.arpa"


def phone_lm_table(arpa: str | pathlib.Path = PHONE_ARPA, symbols=phonemes.SYMBOLS) -> np.ndarray:
    """Dense (V, V, V+1) trigram table from an ARPA phone LM queried through kenlm (natural log)."""
    import kenlm

    model = kenlm.Model(str(arpa))
    v = len(symbols)
    table = np.full((v, v, v + 1), -np.inf, np.float32)
    words = list(symbols[1:]) + ["</s>"]
    for a in range(v):
        for b in range(v):
            state = kenlm.State()
            model.BeginSentenceWrite(state)
            for tok in (a, b):
                if tok:
                    nxt = kenlm.State()
                    model.BaseScore(state, symbols[tok], nxt)
                    state = nxt
            for c, w in enumerate(words, start=1):
                table[a, b, c] = model.BaseScore(state, w, kenlm.State()) * math.log(10)
    return table


def _beam_init(batch: int, beam: int, max_len: int):
    pb = jnp.full((batch, beam), -jnp.inf).at[:, 0].set(0.0)
    return dict(prefix=jnp.zeros((batch, beam, max_len), jnp.int32), plen=jnp.zeros((batch, beam), jnp.int32),
                pb=pb, pnb=jnp.full((batch, beam), -jnp.inf), lm=jnp.zeros((batch, beam)))


def _last_two(prefix, plen):
    idx1 = jnp.maximum(plen - 1, 0)
    idx2 = jnp.maximum(plen - 2, 0)
    last = jnp.take_along_axis(prefix, idx1[..., None], -1)[..., 0]
    prev = jnp.take_along_axis(prefix, idx2[..., None], -1)[..., 0]
    return jnp.where(plen >= 1, last, -1), jnp.where(plen >= 2, prev, 0)


def _merge_targets(prefix, plen, valid, last, num_classes):
    """(B, K, V) index of the beam equal to beam k extended by c, or -1."""
    max_len = prefix.shape[-1]
    pos = jnp.arange(max_len)
    same = prefix[:, :, None, :] == prefix[:, None, :, :]  # (B, k, j, L)
    upto = pos[None, None, None, :] < plen[:, :, None, None]
    eq = jnp.all(same | ~upto, -1) & (plen[:, None, :] == plen[:, :, None] + 1) & valid[:, None, :]
    hit = eq[:, :, None, :] & (last[:, None, None, :] == jnp.arange(num_classes)[None, None, :, None])  # (B,k,c,j)
    return jnp.where(hit.any(-1), jnp.argmax(hit, -1), -1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("beam", "max_len", "use_pallas"))
def beam_search(logp: jax.Array, lengths: jax.Array, table: jax.Array | None = None, *, beam: int = 8,
                lm_weight: float = 0.0, length_bonus: float = 0.0, max_len: int = 64,
                use_pallas: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
    """CTC prefix beam search. logp (B, T, V) log-probs (blank 0), lengths (B,) frames.

    Score of a prefix y: ln p_ctc(y | x) + lm_weight * ln p_lm(y, </s>) + length_bonus * |y|.
    Returns best prefixes (B, max_len) zero-padded, their lengths (B,) and scores (B,)."""
    b, t, v = logp.shape
    if table is None:
        table = jnp.zeros((v, v, v + 1), jnp.float32)
    table = jnp.where(jnp.isfinite(table), table, -1e4)  # keep arithmetic finite
    step_fn = expand_prune_pallas if use_pallas else expand_prune_reference
    state = _beam_init(b, beam, max_len)

    def frame(state, inputs):
        y, ti = inputs
        prefix, plen = state["prefix"], state["plen"]
        last, prev = _last_two(prefix, plen)
        valid = jnp.isfinite(jnp.logaddexp(state["pb"], state["pnb"]))
        merge = _merge_targets(prefix, plen, valid, last, v)
        lm_next = table[prev, jnp.maximum(last, 0)][..., :v]  # (B, K, V)
        sel, pb, pnb, lm = step_fn(y, state["pb"], state["pnb"], state["lm"], plen, last, lm_next, merge,
                                   lm_weight=lm_weight, length_bonus=length_bonus)
        is_ext = sel >= beam
        e = jnp.maximum(sel - beam, 0)
        src = jnp.where(is_ext, e // v, sel)
        tok = e % v
        new_prefix = jnp.take_along_axis(prefix, src[..., None], 1)
        src_len = jnp.take_along_axis(plen, src, 1)
        write = is_ext[..., None] & (jnp.arange(max_len)[None, None] == src_len[..., None])
        new_prefix = jnp.where(write, tok[..., None], new_prefix)
        new = dict(prefix=new_prefix, plen=src_len + is_ext.astype(jnp.int32), pb=pb, pnb=pnb, lm=lm)
        active = (ti < lengths)
        return jax.tree.map(lambda n, o: jnp.where(active.reshape((-1,) + (1,) * (n.ndim - 1)), n, o),
                            new, state), None

    state, _ = jax.lax.scan(frame, state, (jnp.swapaxes(logp, 0, 1), jnp.arange(t)))
    last, prev = _last_two(state["prefix"], state["plen"])
    eos = table[prev, jnp.maximum(last, 0), v]
    final = (jnp.logaddexp(state["pb"], state["pnb"]) + lm_weight * (state["lm"] + eos)
             + length_bonus * state["plen"])
    best = jnp.argmax(final, -1)
    pick = lambda a: jnp.take_along_axis(a, best.reshape((-1,) + (1,) * (a.ndim - 1)), 1)[:, 0]  # noqa: E731
    return pick(state["prefix"]), pick(state["plen"]), jnp.max(final, -1)

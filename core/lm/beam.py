"""Jitted beam search with an n-best list, over the same prefill and KV cache as `core.lm.generate`.

The search follows transformers' `num_beams` generation (and t5x's beam search): every step expands the K
live beams of each row to their 2K best continuations by summed log-probability; a continuation that ends in
an end token moves to the row's pool of finished hypotheses, scored as sum_logprob / length ** length_penalty
(length = generated tokens, the end token included); the K best others stay live. The pool keeps the K best.
A row is done when its pool is full and its best live beam, at the current length, cannot beat the worst
finished one (transformers' `early_stopping=False` test). Beams still live after `max_new_tokens` join the
pool with length `max_new_tokens`, as transformers adds them at the maximum length.

    out = beam_search(graphdef, params, tokens, mask, BeamConfig(beam_size=4, max_new_tokens=20, eos_tokens=(eos,)))
    out.tokens[b, 0]    # row b's best hypothesis; out.tokens[b, :n_best] its n-best list, best first

Prompts are left-padded (`core.lm.generate.pad_prompts`) token ids, or `inputs_embeds` (an encoder prefix);
the prompt's mask may have holes (positions follow it), but its last slot must be a real token.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from core.lm import model as model_lib
from core.lm.generate import prefill

NEG = -1e9  # a score no real hypothesis reaches (finite, so sums and comparisons stay defined)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BeamConfig:
    """beam_size K beams per row; the n_best (<= K) best finished hypotheses come back per row."""

    beam_size: int = 4
    max_new_tokens: int = 32
    eos_tokens: tuple[int, ...] = ()
    length_penalty: float = 1.0  # exponent of the length that divides a finished hypothesis' log-probability
    n_best: int | None = None  # None = beam_size
    pad_id: int = 0

    def __post_init__(self):
        if self.beam_size < 1 or self.max_new_tokens < 1:
            raise ValueError(f"beam_size={self.beam_size}, max_new_tokens={self.max_new_tokens}: expected >= 1 each")
        n_best = self.beam_size if self.n_best is None else self.n_best
        if not 1 <= n_best <= self.beam_size:
            raise ValueError(f"n_best={self.n_best}: expected between 1 and beam_size={self.beam_size}")
        object.__setattr__(self, "n_best", n_best)
        object.__setattr__(self, "eos_tokens", tuple(int(t) for t in self.eos_tokens))


class BeamOutput(NamedTuple):
    """tokens: (B, n_best, N) int32, best first, `pad_id` after a hypothesis' end; scores: (B, n_best) the
    length-normalised scores that ranked them; logprobs: (B, n_best) summed token log-probs; lengths:
    (B, n_best) generated tokens (the end token included); finished: (B, n_best) ended on an end token."""

    tokens: jax.Array
    scores: jax.Array
    logprobs: jax.Array
    lengths: jax.Array
    finished: jax.Array


def _gather_beams(x: jax.Array, parent: jax.Array, axis: int) -> jax.Array:
    """x with a (B * K) axis at `axis`, reordered so that slot (b, k) holds beam parent[b, k] of row b."""
    b, k = parent.shape
    flat = (parent + k * jnp.arange(b)[:, None]).reshape(-1)
    return jnp.take(x, flat, axis=axis)


def _reorder_cache(cache: model_lib.DecodeCache, parent: jax.Array) -> model_lib.DecodeCache:
    """The search's cache (decode's per-layer layout, batch first in every array) reordered by parent beams."""
    layers = lambda arrays: tuple(_gather_beams(a, parent, 0) for a in arrays)  # noqa: E731
    return cache._replace(k=layers(cache.k), v=layers(cache.v), valid=_gather_beams(cache.valid, parent, 0),
                          positions=_gather_beams(cache.positions, parent, 0),
                          lengths=_gather_beams(cache.lengths, parent, 0))


def _repeat_cache(cache: model_lib.KVCache, k: int) -> model_lib.KVCache:
    return cache._replace(k=jnp.repeat(cache.k, k, axis=1), v=jnp.repeat(cache.v, k, axis=1),
                          valid=jnp.repeat(cache.valid, k, axis=0), positions=jnp.repeat(cache.positions, k, axis=0),
                          lengths=jnp.repeat(cache.lengths, k, axis=0))


def _merge_pool(scores, seqs, logprobs, lengths, ended, new_scores, new_seqs, new_logprobs, new_lengths, new_ended,
                k):
    """The k best of the pool and the new entries, by score."""
    cat = lambda a, b: jnp.concatenate([a, b], axis=1)  # noqa: E731
    all_scores = cat(scores, new_scores)
    top, idx = jax.lax.top_k(all_scores, k)
    take = lambda x: jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)  # noqa: E731
    return (top, take(cat(seqs, new_seqs)), take(cat(logprobs, new_logprobs)), take(cat(lengths, new_lengths)),
            take(cat(ended, new_ended)))


def search(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array | None, mask: jax.Array,
           config: BeamConfig, *, inputs_embeds: jax.Array | None = None, lora: Any = None) -> BeamOutput:
    """The beam search itself (jittable; `config` static). See `beam_search`."""
    c = config
    K, N = c.beam_size, c.max_new_tokens
    x = tokens if tokens is not None else inputs_embeds
    B, P = x.shape[:2]
    logits, cache = prefill(graphdef, params, tokens, mask, cache_size=P + N, inputs_embeds=inputs_embeds, lora=lora)
    V = logits.shape[-1]
    cache = model_lib.to_decode_cache(_repeat_cache(cache, K))  # the layout decode's loop reads fastest
    logits = jnp.repeat(logits, K, axis=0)
    model = nnx.merge(graphdef, params, copy=True)
    eos = jnp.asarray(c.eos_tokens if c.eos_tokens else (-1,), jnp.int32)
    lp = float(c.length_penalty)
    alive = jnp.where(jnp.arange(K)[None] == 0, 0.0, NEG) * jnp.ones((B, 1))  # row b starts with one live beam
    pool = (jnp.full((B, K), NEG), jnp.full((B, K, N), c.pad_id, jnp.int32), jnp.full((B, K), NEG),
            jnp.zeros((B, K), jnp.int32), jnp.zeros((B, K), bool))

    def done(t, alive, pool):
        full = jnp.all(pool[0] > NEG / 2, axis=1)
        best_alive = alive.max(axis=1) / jnp.maximum(t, 1).astype(jnp.float32) ** lp
        return full & (pool[0].min(axis=1) >= best_alive)

    def cond(carry):
        t, _, _, alive, _, pool = carry
        return (t < N) & ~jnp.all(done(t, alive, pool))

    def body(carry):
        t, cache, logits, alive, seqs, pool = carry
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1).reshape(B, K, V)
        cand = (alive[:, :, None] + logp).reshape(B, K * V)
        value, idx = jax.lax.top_k(cand, 2 * K)
        parent, tok = idx // V, (idx % V).astype(jnp.int32)
        is_eos = jnp.isin(tok, eos) & (value > NEG / 2)
        cand_seqs = jnp.take_along_axis(seqs, parent[..., None], axis=1)
        cand_seqs = jax.lax.dynamic_update_slice(cand_seqs, tok[..., None], (0, 0, t))
        length = (t + 1).astype(jnp.float32)
        row_done = done(t, alive, pool)  # a finished row takes no new hypotheses
        fin_scores = jnp.where(is_eos & ~row_done[:, None], value / length ** lp, NEG)
        pool = _merge_pool(*pool, fin_scores, cand_seqs, value, jnp.full((B, 2 * K), t + 1, jnp.int32),
                           jnp.ones((B, 2 * K), bool), K)
        live_value, live_idx = jax.lax.top_k(jnp.where(is_eos, NEG, value), K)
        new_parent = jnp.take_along_axis(parent, live_idx, axis=1)
        new_tok = jnp.take_along_axis(tok, live_idx, axis=1)
        seqs = jnp.take_along_axis(cand_seqs, live_idx[..., None], axis=1)
        cache = _reorder_cache(cache, new_parent)
        out = model(new_tok.reshape(B * K, 1), attention_mask=jnp.ones((B * K, 1), bool), cache=cache, lora=lora)
        return t + 1, out.cache, out.logits[:, -1], live_value, seqs, pool

    init = (jnp.zeros((), jnp.int32), cache, logits, alive, jnp.full((B, K, N), c.pad_id, jnp.int32), pool)
    t, _, _, alive, seqs, pool = jax.lax.while_loop(cond, body, init)
    # beams live at the maximum length join the pool (a row that stopped early gains nothing from them)
    at_max = (t >= N) & ~done(t, alive, pool)
    tail = jnp.where(at_max[:, None] & (alive > NEG / 2), alive / jnp.maximum(t, 1).astype(jnp.float32) ** lp, NEG)
    pool = _merge_pool(*pool, tail, seqs, alive, jnp.full((B, K), t, jnp.int32), jnp.zeros((B, K), bool), K)
    scores, seqs, logprobs, lengths, ended = (x[:, :c.n_best] for x in pool)
    keep = jnp.arange(N)[None, None] < lengths[..., None]
    return BeamOutput(tokens=jnp.where(keep, seqs, c.pad_id), scores=scores, logprobs=logprobs, lengths=lengths,
                      finished=ended)


@functools.partial(jax.jit, static_argnames=("graphdef", "config"))
def _search(graphdef, params, tokens, mask, inputs_embeds, lora, *, config):
    return search(graphdef, params, tokens, mask, config, inputs_embeds=inputs_embeds, lora=lora)


def beam_search(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array | None, mask: jax.Array,
                config: BeamConfig = BeamConfig(), *, inputs_embeds: jax.Array | None = None,
                lora: Any = None) -> BeamOutput:
    """Beam search for left-padded prompts tokens/mask (B, P), or `inputs_embeds` (B, P, D) with tokens None.
    One compile per (P, B, config). `lora`: a `core.lm.lora.LoraInputs` to search the adapted model."""
    if tokens is not None:
        tokens = jnp.asarray(tokens, jnp.int32)
    mask = jnp.asarray(mask, bool)
    shape = tokens.shape if tokens is not None else (inputs_embeds.shape[:2] if inputs_embeds is not None else None)
    if shape is None or len(shape) != 2 or shape != mask.shape:
        raise ValueError(f"tokens {None if tokens is None else tokens.shape} / inputs_embeds "
                         f"{None if inputs_embeds is None else inputs_embeds.shape} and mask {mask.shape}: expected "
                         "tokens (B, P) or inputs_embeds (B, P, D), with mask the same (B, P) shape")
    return _search(graphdef, params, tokens, mask, inputs_embeds, lora, config=config)

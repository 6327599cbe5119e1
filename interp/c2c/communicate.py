"""Two language models talking: through the cache (C2C), through text (T2T), or not at all.

C2C on a prompt: both models prefill the prompt's section (every token but the last) at the receiver's
positions, the fuser writes `receiver + gate * s * projection` into the receiver's cache over that section, and
the receiver alone runs the response section (the last prompt token, then the answer) on the fused cache.
With `include_response` each response token's cache slot is fused as well, once both models have written it.

Rotary frames: cached keys are post-RoPE. `key_frame="rotated"` fuses them as cached (the reference code
does this; both models see the receiver's positions, and the residual base is the receiver's own rotated key,
so the output stays in its frame); `"unrotated"` removes each model's rotation, fuses, and rotates the result
with the receiver's rotary at the receiver's positions.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from core.lm import model as model_lib
from core.lm.cache import export_kv, import_kv
from core.lm.configs import LMConfig
from core.lm.generate import SamplingConfig, decode, prefill, start_state
from core.lm.model import KVCache
from interp.c2c import data as data_lib
from interp.c2c.configs import FuserConfig
from interp.c2c.fuser import apply_fuser, temperature


@dataclasses.dataclass(frozen=True)
class Pair:
    """The static half of a receiver / sharer / fuser triple (configs and graphdefs: hashable, jit-static)."""

    receiver: LMConfig
    receiver_graphdef: nnx.GraphDef
    sharer: LMConfig
    sharer_graphdef: nnx.GraphDef
    fuser: FuserConfig
    fuser_graphdef: nnx.GraphDef | None = None


def _rotate(k: jax.Array, positions: jax.Array, config: LMConfig, sign: int) -> jax.Array:
    """Apply (sign 1) or remove (sign -1) `config`'s rotary on keys (L, B, n, H, D) at positions (B, n)."""
    inv_freq = model_lib.rope_inv_freq(config)
    return jax.vmap(lambda kl: model_lib.apply_rope(kl, sign * positions, inv_freq))(k.astype(jnp.float32))


def fuse_slots(pair: Pair, fuser_params: nnx.State, sharer_cache: KVCache, receiver_cache: KVCache,
               start: int, length: int, scope: jax.Array, *, key: jax.Array | None = None,
               temp: jax.typing.ArrayLike = 1.0, train: bool = False, fuse_fn=None) -> tuple[KVCache, jax.Array]:
    """Fuse slots [start, start + length) of the sharer's cache into the receiver's where `scope` (B, length)
    is True (valid prompt tokens). Returns the receiver cache and the mean gates (L_t, 2).

    `fuse_fn(sk, sv, rk, rv) -> (k, v, gates)` replaces the fuser (tests use an identity).
    """
    sl = slice(start, start + length)
    sk, sv = sharer_cache.k[:, :, sl], sharer_cache.v[:, :, sl]
    rk, rv = receiver_cache.k[:, :, sl], receiver_cache.v[:, :, sl]
    positions = receiver_cache.positions[:, sl]
    if pair.fuser.key_frame == "unrotated":
        sk = _rotate(sk, sharer_cache.positions[:, sl], pair.sharer, -1)
        rk = _rotate(rk, positions, pair.receiver, -1)
    if fuse_fn is None:
        out = apply_fuser(pair.fuser_graphdef, fuser_params, sk, sv, rk, rv, key=key, temp=temp, train=train)
        k, v, gates = out.k, out.v, out.gates
    else:
        k, v, gates = fuse_fn(sk, sv, rk, rv)
    if pair.fuser.key_frame == "unrotated":
        k = _rotate(k, positions, pair.receiver, 1)
    where = scope[None, :, :, None, None]
    k = jnp.where(where, k.astype(receiver_cache.k.dtype), receiver_cache.k[:, :, sl])
    v = jnp.where(where, v.astype(receiver_cache.v.dtype), receiver_cache.v[:, :, sl])
    put = lambda buf, x: jax.lax.dynamic_update_slice_in_dim(buf, x, start, 2)  # noqa: E731
    return receiver_cache._replace(k=put(receiver_cache.k, k), v=put(receiver_cache.v, v)), gates


def respond(pair: Pair, fuser_params: nnx.State, receiver_params: nnx.State, sharer_params: nnx.State,
            receiver_cache: KVCache, sharer_cache: KVCache, inputs: jax.Array, *, key: jax.Array | None = None,
            temp: jax.typing.ArrayLike = 1.0, train: bool = False, fuse_fn=None) -> jax.Array:
    """The receiver runs the response section `inputs` (B, R) on its (fused) cache: logits (B, R, V).

    Default scope: the receiver alone. With `include_response`, token by token: both models write the token's
    slot and it is fused before the next token reads it."""
    if not pair.fuser.include_response:
        return model_lib.apply(pair.receiver_graphdef, receiver_params, inputs, cache=receiver_cache).logits
    logits = []
    for r in range(inputs.shape[1]):
        tok = inputs[:, r:r + 1]
        slot = receiver_cache.index
        out = model_lib.apply(pair.receiver_graphdef, receiver_params, tok, cache=receiver_cache)
        sharer_cache = model_lib.apply(pair.sharer_graphdef, sharer_params, tok, cache=sharer_cache,
                                       logits_positions=jnp.zeros((tok.shape[0], 1), jnp.int32)).cache
        logits.append(out.logits[:, 0])
        sub = None if key is None else jax.random.fold_in(key, 1000 + r)
        receiver_cache, _ = _fuse_one_slot(pair, fuser_params, sharer_cache, out.cache, slot, key=sub, temp=temp,
                                           train=train, fuse_fn=fuse_fn)
    return jnp.stack(logits, axis=1)


def _fuse_one_slot(pair, fuser_params, sharer_cache, receiver_cache, slot, **kw):
    """Fuse the single slot `slot` (traced): move it to slot 0 of one-slot views, fuse, write back."""
    take = lambda c: c._replace(  # noqa: E731
        k=jax.lax.dynamic_slice_in_dim(c.k, slot, 1, 2), v=jax.lax.dynamic_slice_in_dim(c.v, slot, 1, 2),
        positions=jax.lax.dynamic_slice_in_dim(c.positions, slot, 1, 1),
        valid=jax.lax.dynamic_slice_in_dim(c.valid, slot, 1, 1))
    rs = take(receiver_cache)
    fused, gates = fuse_slots(pair, fuser_params, take(sharer_cache), rs, 0, 1, rs.valid, **kw)
    put = lambda buf, x: jax.lax.dynamic_update_slice_in_dim(buf, x, slot, 2)  # noqa: E731
    return receiver_cache._replace(k=put(receiver_cache.k, fused.k), v=put(receiver_cache.v, fused.v)), gates


def section_caches(pair: Pair, receiver_params: nnx.State, sharer_params: nnx.State, tokens: jax.Array,
                   mask: jax.Array, extra_slots: int, sharer_tokens: jax.Array | None = None
                   ) -> tuple[KVCache, KVCache]:
    """Both models prefill the section tokens (B, N) (left-padded) into caches of N + extra_slots slots. The
    sharer reads `sharer_tokens` (its tokenizer's alignment of the same text, one token per receiver token;
    default: the same tokens) under the receiver's mask, so it runs at the receiver's positions."""
    size = tokens.shape[1] + extra_slots
    _, rc = prefill(pair.receiver_graphdef, receiver_params, tokens, mask, cache_size=size)
    _, sc = prefill(pair.sharer_graphdef, sharer_params, tokens if sharer_tokens is None else sharer_tokens, mask,
                    cache_size=size)
    return rc, sc


@functools.partial(jax.jit, static_argnames=("pair", "closed", "fuse"))
def c2c_logits(pair: Pair, fuser_params: nnx.State, receiver_params: nnx.State, sharer_params: nnx.State,
               tokens: jax.Array, mask: jax.Array, closed: bool = False, fuse: bool = True
               ) -> tuple[jax.Array, jax.Array]:
    """C2C inference (hard gates) on full prompts (B, P) ending with the answer cue: the next-token logits
    (B, V) and the gates (L_t, 2). `closed`: every gate forced shut; `fuse=False`: the same cached path with
    no fuser at all (the receiver alone), which a closed fuser must reproduce bit for bit."""
    section, last = tokens[:, :-1], tokens[:, -1:]
    N = section.shape[1]
    rc, sc = section_caches(pair, receiver_params, sharer_params, section, mask[:, :-1], 1)
    if closed:
        fuser_params = close_gates(fuser_params)
    gates = jnp.zeros((pair.receiver.num_layers, 2))
    if fuse:
        rc, gates = fuse_slots(pair, fuser_params, sc, rc, 0, N, mask[:, :-1])
    logits = respond(pair, fuser_params, receiver_params, sharer_params, rc, sc, last)
    return logits[:, -1], gates


@functools.partial(jax.jit, static_argnames=("pair",))
def closed_cache_difference(pair: Pair, fuser_params: nnx.State, receiver_params: nnx.State,
                            sharer_params: nnx.State, tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """The largest |fused - receiver| over the prompt section's keys and values with every gate shut: 0 when the
    closed fuser leaves the receiver's cache as it was, bit for bit (in the default rotated key frame; the
    unrotated one re-rotates keys, which rounds)."""
    section = tokens[:, :-1]
    rc, sc = section_caches(pair, receiver_params, sharer_params, section, mask[:, :-1], 1)
    fused, _ = fuse_slots(pair, close_gates(fuser_params), sc, rc, 0, section.shape[1], mask[:, :-1])
    return jnp.maximum(jnp.abs(fused.k - rc.k).max(), jnp.abs(fused.v - rc.v).max())


def set_gates(fuser_params: nnx.State, value: float) -> nnx.State:
    """The same fuser with every gate logit set to `value` (-1: every hard gate shut; +1: every gate open)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.full_like(x, value) if "gate_logit" in jax.tree_util.keystr(path) else x, fuser_params)


def close_gates(fuser_params: nnx.State) -> nnx.State:
    return set_gates(fuser_params, -1.0)


def gate_logits(fuser_params: nnx.State, receiver_layers: int, layer_map: tuple) -> jax.Array:
    """(L_t, 2) learned gate logits (key, value); -inf for receiver layers without a fuser."""
    found = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(fuser_params)
             if "gate_logit" in jax.tree_util.keystr(p)}
    out = jnp.full((receiver_layers, 2), -jnp.inf)
    fused = [t for t, s in enumerate(layer_map) if s is not None]
    for i, t in enumerate(fused):
        for col, name in enumerate(("key_fusers", "value_fusers")):
            out = out.at[t, col].set(found[f"['{name}'][{i}]['gate_logit'].value"])
    return out


@functools.partial(jax.jit, static_argnames=("graphdef",))
def lm_logits(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """One model alone: next-token logits (B, V) after left-padded prompts (B, P)."""
    B, P = tokens.shape
    return model_lib.apply(graphdef, params, tokens, attention_mask=mask,
                           logits_positions=jnp.full((B, 1), P - 1)).logits[:, 0]


HINT_LENGTH = 5  # `e lives in c .`


@functools.partial(jax.jit, static_argnames=("pair",))
def t2t_logits(pair: Pair, receiver_params: nnx.State, sharer_params: nnx.State, request: jax.Array,
               question: jax.Array, question_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Text-to-text: the sharer greedily completes `request` (B, 4) = `BOS e lives in` (its statement of the
    entity's city: `c . EOS`), and the receiver reads `BOS e lives in c . Q ... ? A` (`question` (B, Pq) is
    `Q ... ? A`, left-padded: its padding sits between hint and question, masked). Returns (logits (B, V),
    hint tokens (B, 5))."""
    sampling = SamplingConfig(max_new_tokens=3, stop_tokens=(data_lib.EOS,), pad_id=data_lib.PAD)
    B = question.shape[0]
    logits, cache = prefill(pair.sharer_graphdef, sharer_params, request, jnp.ones(request.shape, bool),
                            cache_size=request.shape[1] + sampling.max_new_tokens)
    out = decode(pair.sharer_graphdef, sharer_params, start_state(cache, logits), jax.random.key(0), sampling)
    written = out.tokens[:, :2]
    hint = jnp.concatenate([request[:, 1:], written], axis=1)
    hint_mask = jnp.concatenate([jnp.ones((B, 3), bool), out.mask[:, :2] & (written != data_lib.EOS)], axis=1)
    bos = jnp.full((B, 1), data_lib.BOS, jnp.int32)
    tokens = jnp.concatenate([bos, hint, question], axis=1)
    mask = jnp.concatenate([jnp.ones((B, 1), bool), hint_mask, question_mask], axis=1)
    P = tokens.shape[1]
    logits = model_lib.apply(pair.receiver_graphdef, receiver_params, tokens, attention_mask=mask,
                             logits_positions=jnp.full((B, 1), P - 1)).logits[:, 0]
    return logits, hint


def _greedy(graphdef: nnx.GraphDef, params: nnx.State, logits: jax.Array, cache: KVCache, tokens: int
            ) -> jax.Array:
    """Exactly `tokens` greedy tokens (B, tokens) from a prefill's (logits, cache): no stop token, so the cost is
    that of a text of this length."""
    sampling = SamplingConfig(max_new_tokens=tokens, pad_id=data_lib.PAD)
    return decode(graphdef, params, start_state(cache, logits), jax.random.key(0), sampling).tokens


@functools.partial(jax.jit, static_argnames=("pair", "hint_tokens", "answer_tokens"))
def t2t_generate(pair: Pair, receiver_params: nnx.State, sharer_params: nnx.State, request: jax.Array,
                 question: jax.Array, question_mask: jax.Array, hint_tokens: int, answer_tokens: int) -> jax.Array:
    """Text-to-text at set lengths, for timing: the sharer writes exactly `hint_tokens` tokens after `request`
    (B, 4), the receiver reads `BOS e lives in <hint> Q ... ? A` and writes exactly `answer_tokens` tokens
    (B, answer_tokens), which are returned. The reference's T2T writes a background text of up to
    `max_new_tokens` and then generates the answer; this is its cost at those lengths (the world's own hint is
    2 words, so past them the text is whatever the sharer continues with)."""
    B = question.shape[0]
    logits, cache = prefill(pair.sharer_graphdef, sharer_params, request, jnp.ones(request.shape, bool),
                            cache_size=request.shape[1] + hint_tokens)
    hint = _greedy(pair.sharer_graphdef, sharer_params, logits, cache, hint_tokens)
    tokens = jnp.concatenate([request, hint, question], axis=1)
    mask = jnp.concatenate([jnp.ones((B, request.shape[1] + hint_tokens), bool), question_mask], axis=1)
    logits, cache = prefill(pair.receiver_graphdef, receiver_params, tokens, mask,
                            cache_size=tokens.shape[1] + answer_tokens)
    return _greedy(pair.receiver_graphdef, receiver_params, logits, cache, answer_tokens)


@functools.partial(jax.jit, static_argnames=("pair", "answer_tokens"))
def c2c_generate(pair: Pair, fuser_params: nnx.State, receiver_params: nnx.State, sharer_params: nnx.State,
                 tokens: jax.Array, mask: jax.Array, answer_tokens: int) -> jax.Array:
    """C2C at a set answer length, for timing: as `c2c_logits` (both prefill the prompt section, the fuser
    writes the receiver's cache, the receiver runs the answer cue), then the receiver writes exactly
    `answer_tokens` tokens (B, answer_tokens) on its own (the default scope fuses the prompt section only)."""
    if pair.fuser.include_response:
        raise ValueError("c2c_generate: include_response=True fuses every response token; expected the default "
                         "prompt-only scope")
    section, last = tokens[:, :-1], tokens[:, -1:]
    rc, sc = section_caches(pair, receiver_params, sharer_params, section, mask[:, :-1], 1 + answer_tokens)
    rc, _ = fuse_slots(pair, fuser_params, sc, rc, 0, section.shape[1], mask[:, :-1])
    out = model_lib.apply(pair.receiver_graphdef, receiver_params, last, cache=rc)
    return _greedy(pair.receiver_graphdef, receiver_params, out.logits[:, -1], out.cache, answer_tokens)


@functools.partial(jax.jit, static_argnames=("config", "graphdef", "hint_length"))
def enriched_logits(config: LMConfig, graphdef: nnx.GraphDef, params: nnx.State, hinted: jax.Array,
                    hint_length: int = HINT_LENGTH) -> jax.Array:
    """The cache-enrichment oracle: the receiver prefills `BOS hint Q ... ?` (the true hint), the hint's slots
    are dropped, and BOS + question slots are moved to positions 0.. of a cache of the plain prompt's length;
    the answer cue A then runs on it. hinted: (B, P) with no padding, ending with A. Logits (B, V)."""
    B, P = hinted.shape
    section = hinted[:, :-1]
    _, cache = prefill(graphdef, params, section, jnp.ones(section.shape, bool), cache_size=P - 1)
    n_question = P - 2 - hint_length
    fresh = model_lib.init_cache(config, B, n_question + 2)
    bos = export_kv(cache, config, 0, 1)
    question = export_kv(cache, config, 1 + hint_length, n_question)
    fresh = import_kv(fresh, config, bos, at=0, positions=jnp.zeros((B, 1), jnp.int32))
    fresh = import_kv(fresh, config, question, at=1,
                      positions=jnp.broadcast_to(jnp.arange(1, n_question + 1, dtype=jnp.int32), (B, n_question)))
    return model_lib.apply(graphdef, params, hinted[:, -1:], cache=fresh).logits[:, 0]


class FuserBatch(NamedTuple):
    """Precomputed section caches of frozen models for fuser training (batch-major):
    receiver_k/v (B, L_t, N, H_t, D_t), sharer_k/v (B, L_s, N, H_s, D_s), mask (B, N), inputs / targets (B, R)."""

    receiver_k: jax.Array
    receiver_v: jax.Array
    sharer_k: jax.Array
    sharer_v: jax.Array
    mask: jax.Array
    inputs: jax.Array
    targets: jax.Array
    step: jax.Array


def _cache_from(k: jax.Array, v: jax.Array, mask: jax.Array, extra: int) -> KVCache:
    """A KVCache from batch-major section k/v (B, L, N, H, D) and mask (B, N), with `extra` empty slots."""
    k, v = jnp.moveaxis(k, 0, 1), jnp.moveaxis(v, 0, 1)
    pad = [(0, 0), (0, 0), (0, extra), (0, 0), (0, 0)]
    B, N = mask.shape
    positions = jnp.where(mask, jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0), 0).astype(jnp.int32)
    return KVCache(k=jnp.pad(k, pad), v=jnp.pad(v, pad), valid=jnp.pad(mask, [(0, 0), (0, extra)]),
                   positions=jnp.pad(positions, [(0, 0), (0, extra)]), index=jnp.asarray(N, jnp.int32),
                   lengths=mask.sum(axis=1).astype(jnp.int32))


def fuser_loss(pair: Pair):
    """loss_fn(fuser_params, batch: FuserBatch, key, frozen={"receiver", "sharer"}) for core.train: next-token
    CE on the response tokens with both models frozen, Gumbel gates at the annealed temperature."""
    f = pair.fuser

    def loss_fn(params, batch: FuserBatch, key, frozen):
        extra = batch.inputs.shape[1]
        rc = _cache_from(batch.receiver_k, batch.receiver_v, batch.mask, extra)
        sc = _cache_from(batch.sharer_k, batch.sharer_v, batch.mask, extra)
        temp = temperature(batch.step[0], start=f.temperature_start, end=f.temperature_end,
                           anneal_steps=f.anneal)
        k_fuse, k_resp = jax.random.split(key)
        rc, gates = fuse_slots(pair, params, sc, rc, 0, batch.mask.shape[1], batch.mask, key=k_fuse, temp=temp,
                               train=True)
        logits = respond(pair, params, frozen["receiver"], frozen["sharer"], rc, sc, batch.inputs, key=k_resp,
                         temp=temp, train=True)
        logp = jax.nn.log_softmax(logits, axis=-1)
        ce = -jnp.take_along_axis(logp, batch.targets[..., None], axis=-1)[..., 0]
        acc = (jnp.argmax(logits[:, 0], -1) == batch.targets[:, 0]).astype(jnp.float32).mean()
        return ce.mean(), {"answer_acc": acc, "gate_mean": gates.mean(), "temperature": temp}

    return loss_fn

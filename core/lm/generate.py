"""Jitted generation: prefill + a `lax.while_loop` decode over a static-shape KV cache, resumable.

Prompts are left-padded to a bucket length (`pad_prompts`), so every prompt length inside a bucket reuses
one compiled program. The decode loop is one `lax.while_loop` that exits as soon as every row has stopped
(a stop token or a stop sequence) or `max_new_tokens` are out; no step recompiles. Sampling: greedy
(temperature 0), temperature, top-k and top-p. Two log-probs come back per token: `logprobs`, of the model's
own distribution (log_softmax of the raw logits, temperature 1), and `sample_logprobs`, of the distribution
actually sampled from (after temperature / top-k / top-p; 0 for greedy).

Every generated token, the stop token included, is written to the cache; a row that has stopped feeds
masked pads, which are neither valid slots nor counted in `lengths`. So the returned `DecodeState` can be
continued (`continue_decoding`: the same generation, further) or extended with a new turn
(`append_tokens`: a user or tool message, then decode again) without re-prefilling, and a generation split
in two calls gives exactly the tokens of one uninterrupted call.

`prefill` and `decode` are public so a caller can edit the cache in between (C2C fuses another model's
cache into the receiver's with `core.lm.model.write_kv` or `core.lm.cache.import_kv`).
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.lm import model as model_lib
from core.lm.hooks import Hooks

# decode draws the sampling noise of all its steps before the loop when it has at most this many values
# (steps x rows x vocabulary; 4 MB of float32), else step by step inside the loop; the tokens are the same
PRECOMPUTED_NOISE_MAX = 1 << 20
# decode's loop carries the cache in `model.DecodeCache`'s per-layer layout (False: the stacked KVCache, as
# before; kept for `benchmarks/lm_decode_layout.py`, which times the two). Read when decode is traced, so set it
# before the first call in a process.
PER_LAYER_DECODE_CACHE = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """temperature 0 = greedy; top_k 0 = off; top_p 1 = off. A row stops at a stop token or when its last
    generated tokens equal one of `stop_sequences` (token tuples, e.g. a tool-call closing tag); stop tokens
    cannot be sampled before `min_new_tokens` (as transformers' MinNewTokensLogitsProcessor), and stop
    sequences are not matched before it."""

    max_new_tokens: int = 32
    min_new_tokens: int = 0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    stop_tokens: tuple[int, ...] = ()
    stop_sequences: tuple[tuple[int, ...], ...] = ()
    pad_id: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: expected >= 1")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError(f"min_new_tokens={self.min_new_tokens}: expected in [0, max_new_tokens="
                             f"{self.max_new_tokens}]")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: expected >= 0")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k}: expected >= 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p}: expected in (0, 1]")
        object.__setattr__(self, "stop_tokens", tuple(int(t) for t in self.stop_tokens))
        seqs = tuple(tuple(int(t) for t in s) for s in self.stop_sequences)
        if any(len(s) == 0 for s in seqs):
            raise ValueError(f"stop_sequences={self.stop_sequences!r}: expected non-empty token sequences")
        object.__setattr__(self, "stop_sequences", seqs)


class DecodeState(NamedTuple):
    """Where a generation stands: the cache holds every token so far; logits (B, V) are the next token's;
    done (B,) rows that have stopped; step () int32 tokens generated so far (it keys the sampling, so a
    continued generation draws the same tokens as an uninterrupted one)."""

    cache: model_lib.KVCache
    logits: jax.Array
    done: jax.Array
    step: jax.Array


class GenerateOutput(NamedTuple):
    """tokens: (B, N) int32, `pad_id` after a row stops; logprobs: (B, N) float32 model (temperature-1)
    log-probs of the tokens; sample_logprobs: (B, N) log-probs under the distribution sampled from (0 for
    greedy); both 0 where not generated; mask: (B, N) True for generated tokens (the stop token included);
    lengths: (B,) generated counts; stopped: (B,) rows that ended on a stop token or sequence;
    cache: the final KVCache; state: the DecodeState to continue from."""

    tokens: jax.Array
    logprobs: jax.Array
    sample_logprobs: jax.Array
    mask: jax.Array
    lengths: jax.Array
    stopped: jax.Array
    cache: model_lib.KVCache
    state: DecodeState


def pad_prompts(prompts: Sequence[Sequence[int]], *, pad_id: int = 0, length: int | None = None,
                bucket: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad token lists to `length` (default: the longest rounded up to a multiple of `bucket`).

    Returns tokens (B, P) int32 and mask (B, P) bool.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts: expected a non-empty list of non-empty token lists")
    longest = max(len(p) for p in prompts)
    if length is None:
        length = -(-longest // bucket) * bucket
    if longest > length:
        raise ValueError(f"prompt of {longest} tokens: expected at most length={length}")
    tokens = np.full((len(prompts), length), pad_id, np.int32)
    mask = np.zeros((len(prompts), length), bool)
    for i, p in enumerate(prompts):
        tokens[i, length - len(p):] = np.asarray(p, np.int32)
        mask[i, length - len(p):] = True
    return tokens, mask


def process_logits(logits: jax.Array, *, temperature: float, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
    """The logits of the distribution sampled from (B, V) float32: scaled by 1/temperature, -inf outside
    the top-k and the top-p nucleus. Static temperature/top_k/top_p; temperature > 0."""
    logits = logits.astype(jnp.float32) / temperature
    if top_k > 0:
        kth = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))[0][..., -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        sorted_logits = -jnp.sort(-logits, axis=-1)
        probs = jax.nn.softmax(sorted_logits, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        n_keep = jnp.sum(mass_before < top_p, axis=-1, keepdims=True)  # >= 1
        threshold = jnp.take_along_axis(sorted_logits, n_keep - 1, axis=-1)
        logits = jnp.where(logits < threshold, -jnp.inf, logits)
    return logits


def argmax_last(x: jax.Array) -> jax.Array:
    """`jnp.argmax(x, axis=-1)` (the first maximum; the first NaN if any) as int32, from single-output
    reductions: XLA:CPU runs argmax's two-output reduce several times slower, which a decode step over a large
    vocabulary pays every token."""
    top = jnp.max(x, axis=-1, keepdims=True)
    index = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
    return jnp.min(jnp.where((x == top) | jnp.isnan(x), index, x.shape[-1]), axis=-1)


def sample_logits(logits: jax.Array, key: jax.Array, *, temperature: float = 0.0, top_k: int = 0,
                  top_p: float = 1.0) -> jax.Array:
    """Sample one token per row of logits (B, V). Static temperature/top_k/top_p."""
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    processed = process_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return jax.random.categorical(key, processed, axis=-1).astype(jnp.int32)


def prefill(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array | None, mask: jax.Array, *,
            cache_size: int, hooks: Hooks | None = None, cache: model_lib.KVCache | None = None,
            inputs_embeds: jax.Array | None = None, lora: Any = None) -> tuple[jax.Array, model_lib.KVCache]:
    """Run left-padded prompts (B, P) (tokens, or inputs_embeds (B, P, D)) into a fresh cache of
    `cache_size` slots, or append them to `cache`. Returns (last logits (B, V), cache). Jittable
    (cache_size static)."""
    x = tokens if tokens is not None else inputs_embeds
    B, P = x.shape[:2]
    model = nnx.merge(graphdef, params, copy=True)
    if cache is None:
        if P > cache_size:
            raise ValueError(f"prompt length {P}: expected at most cache_size={cache_size}")
        cache = model_lib.init_cache(model.config, B, cache_size)
    elif P > cache.size:
        raise ValueError(f"{P} new tokens: expected at most the cache's {cache.size} slots")
    out = model(tokens, inputs_embeds=inputs_embeds, attention_mask=mask, cache=cache, hooks=hooks,
                logits_positions=jnp.full((B, 1), P - 1), lora=lora)
    return out.logits[:, -1], out.cache


def start_state(cache: model_lib.KVCache, logits: jax.Array) -> DecodeState:
    """A fresh generation from a prefill's (logits, cache)."""
    B = logits.shape[0]
    return DecodeState(cache=cache, logits=logits, done=jnp.zeros((B,), bool), step=jnp.zeros((), jnp.int32))


def decode(graphdef: nnx.GraphDef, params: nnx.State, state: DecodeState, key: jax.Array,
           sampling: SamplingConfig, *, hooks: Hooks | None = None, use_kernel: bool = False,
           lora: Any = None, unembedding: jax.Array | None = None) -> GenerateOutput:
    """Sample up to `max_new_tokens` tokens from `state`, stopping early once every row is done. Jittable.
    `unembedding`: an LM head (D, V) to use in place of the model's (see `Transformer.__call__`).

    The token of generation step s is drawn with `fold_in(key, s)` (s counts from the generation's start,
    across continued calls). The cache must have `max_new_tokens` free slots.
    """
    s = sampling
    N = s.max_new_tokens
    model = nnx.merge(graphdef, params, copy=True)
    B, V = state.logits.shape
    stop = jnp.asarray(s.stop_tokens if s.stop_tokens else (-1,), jnp.int32)
    window = max((len(q) for q in s.stop_sequences), default=1)
    stop_mask = np.zeros((V,), bool)  # the stop tokens that min_new_tokens holds back
    stop_mask[[t for t in s.stop_tokens if 0 <= t < V]] = True

    def gumbel(step):  # what jax.random.categorical adds to the processed logits at generation step `step`
        return jax.random.gumbel(jax.random.fold_in(key, step), (B, V), jnp.float32)

    # With little noise in all, draw every step's at once before the loop (the same values: the same keys
    # and shapes), instead of two small rolled threefry loops per step, which cost more than a small model.
    noise = None
    if s.temperature > 0.0 and N * B * V <= PRECOMPUTED_NOISE_MAX:
        noise = jax.vmap(gumbel)(state.step + jnp.arange(N))

    def emit(logits, i, done, step):
        if s.min_new_tokens > 0:
            logits = jnp.where((step < s.min_new_tokens) & stop_mask[None, :], -jnp.inf, logits)
        raw = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        if s.temperature == 0.0:
            tok = argmax_last(logits)
            sample_lp = jnp.zeros((B,), jnp.float32)
        else:
            processed = process_logits(logits, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
            tok = argmax_last(processed + (gumbel(step) if noise is None else noise[i]))
            sample_lp = jnp.take_along_axis(jax.nn.log_softmax(processed, axis=-1), tok[:, None], axis=-1)[:, 0]
        lp = jnp.take_along_axis(raw, tok[:, None], axis=-1)[:, 0]
        live = ~done
        return jnp.where(live, tok, s.pad_id), jnp.where(live, lp, 0.0), jnp.where(live, sample_lp, 0.0), live

    def cond(carry):
        i, st = carry[0], carry[1]
        return (i < N) & ~jnp.all(st.done)

    def body(carry):
        i, st, recent, toks, lps, slps, lives, stopped = carry
        tok, lp, slp, live = emit(st.logits, i, st.done, st.step)
        recent = jnp.concatenate([recent[:, 1:], tok[:, None]], axis=1)
        hit = jnp.isin(tok, stop)
        for q in s.stop_sequences:
            hit |= jnp.all(recent[:, window - len(q):] == jnp.asarray(q, jnp.int32)[None], axis=1) & (
                st.step + 1 >= max(len(q), s.min_new_tokens))
        hit &= live
        out = model(tok[:, None], attention_mask=live[:, None], cache=st.cache, hooks=hooks, use_kernel=use_kernel,
                    lora=lora, unembedding=unembedding)
        logits = jnp.where(live[:, None], out.logits[:, -1], st.logits)
        st = DecodeState(cache=out.cache, logits=logits, done=st.done | hit, step=st.step + 1)
        col = lambda buf, v: jax.lax.dynamic_update_slice(buf, v[:, None], (0, i))  # noqa: E731
        return (i + 1, st, recent, col(toks, tok), col(lps, lp), col(slps, slp), col(lives, live), stopped | hit)

    # the loop carries the cache in DecodeCache's layout (the Pallas kernel reads the stacked one)
    kv_major = PER_LAYER_DECODE_CACHE and not use_kernel
    if kv_major:
        state = state._replace(cache=model_lib.to_decode_cache(state.cache))
    init = (jnp.zeros((), jnp.int32), state, jnp.full((B, window), -1, jnp.int32),
            jnp.full((B, N), s.pad_id, jnp.int32), jnp.zeros((B, N), jnp.float32), jnp.zeros((B, N), jnp.float32),
            jnp.zeros((B, N), bool), jnp.zeros((B,), bool))
    _, state, _, tokens, logprobs, sample_logprobs, mask, stopped = jax.lax.while_loop(cond, body, init)
    if kv_major:
        state = state._replace(cache=model_lib.from_decode_cache(state.cache))
    return GenerateOutput(tokens=tokens, logprobs=logprobs, sample_logprobs=sample_logprobs, mask=mask,
                          lengths=mask.sum(axis=1).astype(jnp.int32), stopped=stopped, cache=state.cache,
                          state=state)


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling", "cache_size", "use_kernel"))
def _generate(graphdef, params, tokens, mask, inputs_embeds, key, prefill_hooks, decode_hooks, lora, unembedding, *,
              sampling, cache_size, use_kernel):
    logits, cache = prefill(graphdef, params, tokens, mask, cache_size=cache_size, hooks=prefill_hooks,
                            inputs_embeds=inputs_embeds, lora=lora)
    return decode(graphdef, params, start_state(cache, logits), key, sampling, hooks=decode_hooks,
                  use_kernel=use_kernel, lora=lora, unembedding=unembedding)


def generate(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array | None, mask: jax.Array,
             key: jax.Array, sampling: SamplingConfig = SamplingConfig(), *, cache_size: int | None = None,
             prefill_hooks: Hooks | None = None, decode_hooks: Hooks | None = None, use_kernel: bool = False,
             inputs_embeds: jax.Array | None = None, lora: Any = None) -> GenerateOutput:
    """Generate for left-padded prompts tokens/mask (B, P) (see `pad_prompts`), or for left-padded
    `inputs_embeds` (B, P, D) with tokens None (an encoder's prefix before the text). One compile per
    (bucket length P, batch, sampling, cache_size); `use_kernel` runs decode attention in the Pallas kernel.

    cache_size defaults to P + max_new_tokens; a smaller one is an error. Pass a larger one to continue or
    extend the generation later (`continue_decoding`, `append_tokens`). `lora`: a `core.lm.lora.LoraInputs`
    to sample from the adapted model without merging.
    """
    if tokens is not None:
        tokens = jnp.asarray(tokens, jnp.int32)
    mask = jnp.asarray(mask, bool)
    shape = tokens.shape if tokens is not None else (inputs_embeds.shape[:2] if inputs_embeds is not None else None)
    if shape is None or len(shape) != 2 or shape != mask.shape:
        raise ValueError(f"tokens {None if tokens is None else tokens.shape} / inputs_embeds "
                         f"{None if inputs_embeds is None else inputs_embeds.shape} and mask {mask.shape}: expected "
                         "tokens (B, P) or inputs_embeds (B, P, D), with mask the same (B, P) shape")
    B, P = shape
    if cache_size is None:
        cache_size = P + sampling.max_new_tokens
    if P + sampling.max_new_tokens > cache_size:
        raise ValueError(f"prompt length {P} + max_new_tokens {sampling.max_new_tokens}: expected at most "
                         f"cache_size={cache_size}; the prompt is longer than the cache allows")
    unembedding = None
    if "lm_head" not in params and jax.default_backend() == "cpu":
        # tied, on a CPU: decode reads a row-major copy of the embedding's transpose, which XLA:CPU's 8-row
        # products stream faster than the transposed embedding (on an accelerator it would only cost memory)
        unembedding = row_major_head(params["embed_tokens"][...])
    return _generate(graphdef, params, tokens, mask, inputs_embeds, key, prefill_hooks, decode_hooks, lora, unembedding,
                     sampling=sampling, cache_size=cache_size, use_kernel=use_kernel)


# id(embedding) -> (a weak reference to it, its row-major transpose); an entry goes when its embedding does
_ROW_MAJOR_HEADS: dict[int, tuple[weakref.ref, jax.Array]] = {}


def row_major_head(embedding: jax.Array) -> jax.Array:
    """`embedding.T` (D, V) as its own row-major array, made once per embedding array and kept while that array
    lives (arrays are immutable, so the copy stays right): repeated `generate` calls with the same weights do
    not transpose the vocabulary each time (a 32000 x 512 head: 27 ms of an 830 ms call). Traced values are
    transposed, not kept."""
    if isinstance(embedding, jax.core.Tracer):
        return jnp.transpose(embedding)
    key = id(embedding)
    kept = _ROW_MAJOR_HEADS.get(key)
    if kept is not None and kept[0]() is embedding:
        return kept[1]
    head = jnp.transpose(embedding)
    _ROW_MAJOR_HEADS[key] = (weakref.ref(embedding, lambda _, key=key: _ROW_MAJOR_HEADS.pop(key, None)), head)
    return head


def _free_slots(state: DecodeState) -> int:
    return state.cache.size - int(state.cache.index)


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling", "use_kernel"))
def _continue(graphdef, params, state, key, hooks, lora, *, sampling, use_kernel):
    return decode(graphdef, params, state, key, sampling, hooks=hooks, use_kernel=use_kernel, lora=lora)


def continue_decoding(graphdef: nnx.GraphDef, params: nnx.State, state: DecodeState, key: jax.Array,
                      sampling: SamplingConfig, *, hooks: Hooks | None = None, use_kernel: bool = False,
                      lora: Any = None) -> GenerateOutput:
    """Go on with the same generation for `sampling.max_new_tokens` more tokens (rows that stopped stay
    stopped). With the same key, the tokens equal those of one uninterrupted call."""
    if sampling.max_new_tokens > _free_slots(state):
        raise ValueError(f"max_new_tokens={sampling.max_new_tokens}: expected at most the cache's "
                         f"{_free_slots(state)} free slots (generate with a larger cache_size, or extend_cache)")
    return _continue(graphdef, params, state, key, hooks, lora, sampling=sampling, use_kernel=use_kernel)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _append(graphdef, params, state, tokens, mask, hooks, lora):
    logits, cache = prefill(graphdef, params, tokens, mask, cache_size=state.cache.size, cache=state.cache,
                            hooks=hooks, lora=lora)
    has_new = mask.any(axis=1)
    logits = jnp.where(has_new[:, None], logits, state.logits)
    return DecodeState(cache=cache, logits=logits, done=jnp.zeros_like(state.done), step=jnp.zeros_like(state.step))


def append_tokens(graphdef: nnx.GraphDef, params: nnx.State, state: DecodeState, tokens: jax.Array,
                  mask: jax.Array, *, hooks: Hooks | None = None, lora: Any = None) -> DecodeState:
    """Append a new turn (a user or tool message, left-padded (B, T) with mask; a row may append nothing)
    to a finished or paused generation, without re-prefilling. Returns a fresh DecodeState (no row done,
    step 0) whose logits are each row's next-token logits after its appended tokens."""
    tokens = jnp.asarray(tokens, jnp.int32)
    mask = jnp.asarray(mask, bool)
    if tokens.ndim != 2 or tokens.shape != mask.shape or tokens.shape[0] != state.logits.shape[0]:
        raise ValueError(f"tokens {tokens.shape} and mask {mask.shape}: expected the same (B, T) shape with "
                         f"B={state.logits.shape[0]}")
    if tokens.shape[1] > _free_slots(state):
        raise ValueError(f"{tokens.shape[1]} appended tokens: expected at most the cache's {_free_slots(state)} "
                         "free slots (generate with a larger cache_size, or extend_cache)")
    return _append(graphdef, params, state, tokens, mask, hooks, lora)


def extend_cache(state: DecodeState, extra_slots: int) -> DecodeState:
    """The same state with `extra_slots` more empty cache slots (a copy; use before a long continuation)."""
    if extra_slots < 0:
        raise ValueError(f"extra_slots={extra_slots}: expected >= 0")
    c = state.cache
    pad = lambda x: jnp.pad(x, [(0, 0)] * 2 + [(0, extra_slots)] + [(0, 0)] * (x.ndim - 3))  # noqa: E731
    cache = c._replace(k=pad(c.k), v=pad(c.v), valid=jnp.pad(c.valid, ((0, 0), (0, extra_slots))),
                       positions=jnp.pad(c.positions, ((0, 0), (0, extra_slots))))
    return state._replace(cache=cache)

"""Jitted generation: prefill + `lax.scan` decode over a static-shape KV cache.

Prompts are left-padded to a bucket length (`pad_prompts`), so every prompt length inside a bucket reuses
one compiled program, and the decode loop is one `lax.scan`, so no step recompiles. Sampling: greedy
(temperature 0), temperature, top-k and top-p. The returned log-probs are those of the model's own
distribution (log_softmax of the raw logits) at the generated tokens, which is what policy-gradient RL needs.

`prefill` and `decode` are public so a caller can edit the cache in between (C2C fuses another model's
cache into the receiver's with `core.lm.model.write_kv`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.lm import model as model_lib
from core.lm.hooks import Hooks


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """temperature 0 = greedy; top_k 0 = off; top_p 1 = off. Generation stops per row at a stop token."""

    max_new_tokens: int = 32
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    stop_tokens: tuple[int, ...] = ()
    pad_id: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: expected >= 1")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: expected >= 0")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k}: expected >= 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p}: expected in (0, 1]")
        object.__setattr__(self, "stop_tokens", tuple(int(t) for t in self.stop_tokens))


class GenerateOutput(NamedTuple):
    """tokens: (B, N) int32, `pad_id` after a row stops; logprobs: (B, N) float32 model log-probs of the
    tokens (0 where not generated); mask: (B, N) True for generated tokens (the stop token included);
    lengths: (B,) generated counts; cache: the final KVCache."""

    tokens: jax.Array
    logprobs: jax.Array
    mask: jax.Array
    lengths: jax.Array
    cache: model_lib.KVCache


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


def sample_logits(logits: jax.Array, key: jax.Array, *, temperature: float = 0.0, top_k: int = 0,
                  top_p: float = 1.0) -> jax.Array:
    """Sample one token per row of logits (B, V). Static temperature/top_k/top_p."""
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
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
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def prefill(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, mask: jax.Array, *, cache_size: int,
            hooks: Hooks | None = None, cache: model_lib.KVCache | None = None
            ) -> tuple[jax.Array, model_lib.KVCache]:
    """Run left-padded prompts (B, P) into a fresh cache of `cache_size` slots. Returns (last logits (B, V),
    cache). Jittable (cache_size static)."""
    B, P = tokens.shape
    if P > cache_size:
        raise ValueError(f"prompt length {P}: expected at most cache_size={cache_size}")
    model = nnx.merge(graphdef, params, copy=True)
    if cache is None:
        cache = model_lib.init_cache(model.config, B, cache_size)
    out = model(tokens, attention_mask=mask, cache=cache, hooks=hooks, logits_positions=jnp.full((B, 1), P - 1))
    return out.logits[:, -1], out.cache


def decode(graphdef: nnx.GraphDef, params: nnx.State, cache: model_lib.KVCache, logits: jax.Array, key: jax.Array,
           sampling: SamplingConfig, *, hooks: Hooks | None = None, use_kernel: bool = False) -> GenerateOutput:
    """Sample `max_new_tokens` tokens starting from `logits` (B, V) (the prefill's last logits). Jittable."""
    s = sampling
    N = s.max_new_tokens
    model = nnx.merge(graphdef, params, copy=True)
    stop = jnp.asarray(s.stop_tokens if s.stop_tokens else (-1,), jnp.int32)
    sample = functools.partial(sample_logits, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)

    def emit(logits, key, done):
        tok = sample(logits, key)
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1), tok[:, None], axis=-1)[:, 0]
        live = ~done
        tok = jnp.where(live, tok, s.pad_id)
        lp = jnp.where(live, lp, 0.0)
        new_done = done | jnp.isin(tok, stop)
        return tok, lp, live, new_done

    B = logits.shape[0]
    tok0, lp0, live0, done0 = emit(logits, jax.random.fold_in(key, 0), jnp.zeros((B,), bool))

    def step(carry, i):
        cache, tok, done = carry
        out = model(tok[:, None], cache=cache, hooks=hooks, use_kernel=use_kernel)
        tok, lp, live, done = emit(out.logits[:, -1], jax.random.fold_in(key, i), done)
        return (out.cache, tok, done), (tok, lp, live)

    (cache, _, _), (toks, lps, lives) = jax.lax.scan(step, (cache, tok0, done0), jnp.arange(1, N))
    tokens = jnp.concatenate([tok0[:, None], toks.T], axis=1)
    logprobs = jnp.concatenate([lp0[:, None], lps.T], axis=1)
    mask = jnp.concatenate([live0[:, None], lives.T], axis=1)
    return GenerateOutput(tokens=tokens, logprobs=logprobs, mask=mask, lengths=mask.sum(axis=1).astype(jnp.int32),
                          cache=cache)


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling", "cache_size", "use_kernel"))
def _generate(graphdef, params, tokens, mask, key, prefill_hooks, decode_hooks, *, sampling, cache_size,
              use_kernel):
    logits, cache = prefill(graphdef, params, tokens, mask, cache_size=cache_size, hooks=prefill_hooks)
    return decode(graphdef, params, cache, logits, key, sampling, hooks=decode_hooks, use_kernel=use_kernel)


def generate(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, mask: jax.Array, key: jax.Array,
             sampling: SamplingConfig = SamplingConfig(), *, cache_size: int | None = None,
             prefill_hooks: Hooks | None = None, decode_hooks: Hooks | None = None,
             use_kernel: bool = False) -> GenerateOutput:
    """Generate for left-padded prompts tokens/mask (B, P) (see `pad_prompts`). One compile per
    (bucket length P, batch, sampling, cache_size); `use_kernel` runs decode attention in the Pallas kernel.

    cache_size defaults to P + max_new_tokens; a smaller one is an error.
    """
    tokens = jnp.asarray(tokens, jnp.int32)
    mask = jnp.asarray(mask, bool)
    if tokens.ndim != 2 or tokens.shape != mask.shape:
        raise ValueError(f"tokens {tokens.shape} and mask {mask.shape}: expected the same (B, P) shape")
    B, P = tokens.shape
    needed = P + sampling.max_new_tokens - 1
    if cache_size is None:
        cache_size = P + sampling.max_new_tokens
    if needed > cache_size:
        raise ValueError(f"prompt length {P} + max_new_tokens {sampling.max_new_tokens}: expected at most "
                         f"cache_size={cache_size} + 1 positions; the prompt is longer than the cache allows")
    return _generate(graphdef, params, tokens, mask, key, prefill_hooks, decode_hooks, sampling=sampling,
                     cache_size=cache_size, use_kernel=use_kernel)

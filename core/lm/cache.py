"""The KV cache as a value: export a section of it, import a section into another cache.

Keys in `KVCache` are stored after rotary embedding, in the frame of the model that wrote them. An exported
`KVSection` holds keys with the rotation removed (as the projection produced them, before RoPE), the values,
each slot's validity and its position, so a section can be written into a cache of the same shape at other
slots and positions (`import_kv` rotates the keys into the receiver's frame at the positions it is given),
and a cache-to-cache fuser (C2C) can read the sharer's and the receiver's sections in one frame-free space,
fuse them, and write the result into the receiver's cache.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from core.lm.configs import LMConfig
from core.lm.model import KVCache, apply_rope, rope_inv_freq


class KVSection(NamedTuple):
    """A run of n cache slots. k, v: (L, B, n, KVH, Dh) with keys un-rotated; valid: (B, n) bool;
    positions: (B, n) int32, each slot's position in the model that wrote it."""

    k: jax.Array
    v: jax.Array
    valid: jax.Array
    positions: jax.Array

    @property
    def length(self) -> int:
        return self.k.shape[2]


def _rotate(k: jax.Array, positions: jax.Array, config: LMConfig, sign: int) -> jax.Array:
    """Apply (sign 1) or remove (sign -1) the rotary embedding on keys (L, B, n, KVH, Dh)."""
    inv_freq = rope_inv_freq(config)
    return jax.vmap(lambda kl: apply_rope(kl, sign * positions, inv_freq))(k)


def _check(config: LMConfig, k_shape: tuple, what: str) -> None:
    want = (config.num_layers, config.num_kv_heads, config.head_dim)
    got = (k_shape[0], k_shape[3], k_shape[4])
    if got != want:
        raise ValueError(f"{what} with (layers, kv_heads, head_dim) = {got}: expected {want} for this config "
                         "(a cache from another config)")


def export_kv(cache: KVCache, config: LMConfig, start: int, length: int) -> KVSection:
    """Slots [start, start + length) of `cache` (static ints), keys un-rotated with `config`'s rotary."""
    _check(config, cache.k.shape, "cache")
    if not (0 <= start and length >= 1 and start + length <= cache.size):
        raise ValueError(f"slots [{start}, {start + length}): expected a non-empty range inside the cache's "
                         f"{cache.size} slots")
    sl = slice(start, start + length)
    positions = cache.positions[:, sl]
    k = _rotate(cache.k[:, :, sl].astype(jnp.float32), positions, config, -1).astype(cache.k.dtype)
    return KVSection(k=k, v=cache.v[:, :, sl], valid=cache.valid[:, sl], positions=positions)


def import_kv(cache: KVCache, config: LMConfig, section: KVSection, *, at: int | jax.Array | None = None,
              positions: jax.Array | None = None) -> KVCache:
    """Write `section` into `cache` at slot `at` (default: the next free slot, `cache.index`), keys rotated
    into the receiver's frame (`config`'s rotary) at `positions` (B, n) (default: the section's own).

    The written slots' validity is the section's; `index` moves past them and each row's `lengths` becomes
    at least its largest written position + 1, so decoding continues after the imported tokens.
    Jittable when `at` is traced; the section must fit.
    """
    _check(config, cache.k.shape, "cache")
    _check(config, section.k.shape, "section")
    B, n = section.valid.shape
    if cache.k.shape[1] != B:
        raise ValueError(f"section batch {B}: expected the cache's batch {cache.k.shape[1]}")
    if isinstance(at, int) and not 0 <= at <= cache.size - n:
        raise ValueError(f"at={at}: expected a slot in [0, {cache.size - n}] so that {n} slots fit")
    at = cache.index if at is None else jnp.asarray(at, jnp.int32)
    positions = section.positions if positions is None else jnp.asarray(positions, jnp.int32)
    if positions.shape != (B, n):
        raise ValueError(f"positions shape {positions.shape}: expected (B, n) = {(B, n)}")
    positions = jnp.where(section.valid, positions, 0)
    k = _rotate(section.k.astype(jnp.float32), positions, config, 1).astype(cache.k.dtype)
    put = lambda buf, x, axis: jax.lax.dynamic_update_slice_in_dim(buf, x.astype(buf.dtype), at, axis)  # noqa: E731
    top = jnp.where(section.valid, positions + 1, 0).max(axis=1).astype(jnp.int32)
    return KVCache(k=put(cache.k, k, 2), v=put(cache.v, section.v, 2), valid=put(cache.valid, section.valid, 1),
                   positions=put(cache.positions, positions, 1), index=jnp.maximum(cache.index, at + n),
                   lengths=jnp.maximum(cache.lengths, top))

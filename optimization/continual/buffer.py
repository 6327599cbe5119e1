"""A reservoir replay buffer held on the device as a pytree (Vitter's algorithm R, one example at a time).

The arrays have a fixed `capacity`; the *effective* size is a traced scalar `size <= capacity`, so runs with
buffer 200 and 500 share one compiled program (and can be vmapped together).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Buffer(NamedTuple):
    x: jax.Array        # (capacity, *input_shape) float32
    y: jax.Array        # (capacity,) int32 labels
    logits: jax.Array   # (capacity, num_classes) float32, the network's outputs at insertion (DER)
    task: jax.Array     # (capacity,) int32 task id at insertion, -1 for empty slots
    n_seen: jax.Array   # () int32, examples offered so far


def init_buffer(capacity: int, input_shape: tuple[int, ...], num_classes: int) -> Buffer:
    """An empty buffer with room for `capacity` examples."""
    if capacity < 1:
        raise ValueError(f"capacity={capacity}, expected a positive integer")
    return Buffer(x=jnp.zeros((capacity, *input_shape), jnp.float32),
                  y=jnp.zeros((capacity,), jnp.int32),
                  logits=jnp.zeros((capacity, num_classes), jnp.float32),
                  task=jnp.full((capacity,), -1, jnp.int32),
                  n_seen=jnp.zeros((), jnp.int32))


def reservoir_add(buf: Buffer, x: jax.Array, y: jax.Array, logits: jax.Array, task: jax.Array,
                  key: jax.Array, size: jax.Array | int, valid: jax.Array | None = None) -> Buffer:
    """Offer a batch to the reservoir, as if example by example: each seen example is kept with prob size/n.

    x: (B, *input_shape); y: (B,); logits: (B, C); task: () int; size: effective capacity (<= capacity);
    valid: optional (B,) bool, examples with False are not offered.
    """
    capacity = buf.y.shape[0]
    size = jnp.minimum(jnp.asarray(size, jnp.int32), capacity)
    batch = x.shape[0]
    valid = jnp.ones((batch,), bool) if valid is None else valid
    # example i is the n_i-th offered (n_i counts only valid examples), kept in slot n_i while the buffer
    # fills, else in a uniform slot of [0, n_i] when that slot is < size (Vitter's algorithm R)
    n_i = buf.n_seen + jnp.cumsum(valid.astype(jnp.int32)) - valid.astype(jnp.int32)
    keys = jax.random.split(key, batch)
    j = jax.vmap(lambda k, n: jax.random.randint(k, (), 0, n + 1))(keys, n_i)
    slot = jnp.where(n_i < size, n_i, j)
    write = valid & (slot < size)
    # sequential semantics in one scatter: a write is dropped when a later example of the batch takes its slot
    later = jnp.arange(batch)[None, :] > jnp.arange(batch)[:, None]
    overwritten = jnp.any(later & (slot[None, :] == slot[:, None]) & write[None, :], axis=1)
    write = write & ~overwritten
    slot = jnp.where(write, slot, capacity)  # out of range: dropped by the scatter

    def put(arr, val):
        return arr.at[slot].set(val.astype(arr.dtype), mode="drop")

    return Buffer(x=put(buf.x, x), y=put(buf.y, y), logits=put(buf.logits, logits),
                  task=put(buf.task, jnp.broadcast_to(jnp.asarray(task, jnp.int32), (batch,))),
                  n_seen=buf.n_seen + jnp.sum(valid.astype(jnp.int32)))


def sample_indices(buf: Buffer, key: jax.Array, n: int, size: jax.Array | int,
                   where: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """n distinct filled slots uniformly at random (without replacement), and a mask of real picks.

    where: optional (capacity,) bool to restrict the population (e.g. old-task examples). When fewer than n
    slots qualify, the mask is False for the surplus picks. Returns (indices (n,), mask (n,) float32).
    """
    capacity = buf.y.shape[0]
    filled = jnp.arange(capacity) < jnp.minimum(buf.n_seen, jnp.minimum(size, capacity))
    ok = filled if where is None else filled & where
    scores = jnp.where(ok, jax.random.uniform(key, (capacity,)), -1.0)
    top, idx = jax.lax.top_k(scores, n)
    return idx, (top >= 0).astype(jnp.float32)

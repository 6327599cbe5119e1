"""Intervention specs for the decoder: pure pytrees (arrays are traced, layer/head indices are static).

Residual index convention: `residual[l]` is the input of block `l` (l = 0 is the embedding output) and
`residual[L]` is the output of the last block, before the final norm. `Steer(layer=l)` adds to `residual[l]`
before block `l` reads it (`layer=L` acts before the final norm). `heads[l]` is block `l`'s attention output
per head, before the output projection, shape (B, T, H, head_dim).

    hooks = Hooks(capture=Capture(positions=pos),                 # read residuals and head outputs
                  steer=(Steer(layer=3, vector=v, where=mask),),  # add v at masked positions
                  patch=(PatchHead(layer=2, head=5, value=val),)) # replace one head's output
    out = apply(graphdef, params, tokens, hooks=hooks)             # out.captured["residual"], ["heads"]

`PatchHeadAt` is `PatchHead` with a traced layer and head, so one compiled forward serves every head (see
`core.lm.interp.head_patching_sweep`). `Capture` also reads, when asked, attention patterns, the attention and
MLP block outputs and each head's contribution to the residual stream (`head_contributions`).

Callables (`residual_fn(layer, x)`, `head_fn(layer, heads)`, `kv_fn(layer, k, v)`) are static fields: pass
the same function object to avoid recompiling. The KV cache itself is an explicit input and output of the
forward (`core.lm.model.KVCache`), so reading and writing it needs no hook (see `read_kv`/`write_kv`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Steer:
    """Add `vector` to the residual stream at `layer`. vector: (D,), (B, D) or (B, T, D).

    `where`: (B, T) weights (bool or float) multiplying the vector per position; None = every position.
    """

    vector: jax.Array
    where: jax.Array | None = None
    layer: int = struct.field(pytree_node=False, default=0)

    def apply(self, x: jax.Array) -> jax.Array:
        v = jnp.asarray(self.vector, x.dtype)
        if v.ndim == 1:
            v = v[None, None, :]
        elif v.ndim == 2:
            v = v[:, None, :]
        if v.shape[-1] != x.shape[-1]:
            raise ValueError(f"Steer.vector shape {self.vector.shape}: expected last dim {x.shape[-1]}")
        if self.where is not None:
            w = jnp.asarray(self.where).astype(x.dtype)
            if w.shape != x.shape[:2]:
                raise ValueError(f"Steer.where shape {w.shape}: expected (B, T) = {x.shape[:2]}")
            v = v * w[..., None]
        return x + v


@struct.dataclass
class PatchHead:
    """Replace head `head`'s attention output in block `layer` by `value` (B, T, head_dim) where `where`."""

    value: jax.Array
    where: jax.Array | None = None  # (B, T) bool; None = every position
    layer: int = struct.field(pytree_node=False, default=0)
    head: int = struct.field(pytree_node=False, default=0)

    def apply(self, heads: jax.Array) -> jax.Array:
        B, T, H, Dh = heads.shape
        if not 0 <= self.head < H:
            raise ValueError(f"PatchHead.head={self.head}: expected in [0, {H})")
        val = jnp.asarray(self.value, heads.dtype)
        if val.shape != (B, T, Dh):
            raise ValueError(f"PatchHead.value shape {val.shape}: expected (B, T, head_dim) = {(B, T, Dh)}")
        old = heads[:, :, self.head]
        if self.where is not None:
            where = jnp.asarray(self.where).astype(bool)
            if where.shape != (B, T):
                raise ValueError(f"PatchHead.where shape {where.shape}: expected (B, T) = {(B, T)}")
            val = jnp.where(where[..., None], val, old)
        return heads.at[:, :, self.head].set(val)


@struct.dataclass
class PatchHeadAt:
    """`PatchHead` whose `layer` and `head` are traced int32 scalars, not static ints.

    It is applied in every block as a select on `layer == i` and a one-hot over heads, so changing the layer or
    head does not recompile, and `vmap`/`lax.map` over (layer, head) runs a sweep over every head as one
    program (causal mediation: function vectors' CIE). value: broadcastable to (B, T, head_dim), e.g. a mean
    activation (head_dim,); where: (B, T) bool, None = every position. A layer or head outside the model's
    range patches nothing (traced values cannot be range-checked).
    """

    value: jax.Array
    layer: jax.Array
    head: jax.Array
    where: jax.Array | None = None

    def apply_at(self, block: int, heads: jax.Array) -> jax.Array:
        """heads: (B, T, H, Dh) of block `block` (a static int) -> patched heads."""
        B, T, H, Dh = heads.shape
        layer, head = jnp.asarray(self.layer), jnp.asarray(self.head)
        if layer.shape != () or head.shape != () or not (jnp.issubdtype(layer.dtype, jnp.integer)
                                                         and jnp.issubdtype(head.dtype, jnp.integer)):
            raise ValueError(f"PatchHeadAt layer {layer.shape} {layer.dtype}, head {head.shape} {head.dtype}: "
                             "expected integer scalars")
        val = jnp.asarray(self.value, heads.dtype)
        try:
            val = jnp.broadcast_to(val, (B, T, Dh))
        except ValueError:
            raise ValueError(f"PatchHeadAt.value shape {val.shape}: expected broadcastable to (B, T, head_dim) = "
                             f"{(B, T, Dh)}") from None
        select = (layer == block) & (jnp.arange(H) == head)  # (H,)
        select = jnp.broadcast_to(select[None, None, :], (B, T, H))
        if self.where is not None:
            where = jnp.asarray(self.where).astype(bool)
            if where.shape != (B, T):
                raise ValueError(f"PatchHeadAt.where shape {where.shape}: expected (B, T) = {(B, T)}")
            select = select & where[:, :, None]
        return jnp.where(select[..., None], val[:, :, None, :], heads)


def head_contributions(heads: jax.Array, o_proj: jax.Array,
                       branch: Callable[[jax.Array], jax.Array] | None = None) -> jax.Array:
    """Each head's write into the residual stream: heads[..., h, :] @ o_proj[h] (+ its share of `branch`).

    heads: (B, P, H, Dh) attention output before `o_proj`; o_proj: (H, Dh, D). branch: an extra linear map
    (B, P, H, Dh) -> (B, P, D) on the same input (a LoRA adapter on o_proj); head h's share is the branch of
    the heads with every other head zeroed. Returns (B, P, H, D); the sum over heads plus the o_proj bias (if
    any) is the attention block's output.
    """
    contrib = jnp.einsum("bphk,hkd->bphd", heads, o_proj.astype(heads.dtype))
    if branch is not None:
        H = heads.shape[2]
        one_head = heads[None] * jnp.eye(H, dtype=heads.dtype)[:, None, None, :, None]  # (H, B, P, H, Dh)
        contrib = contrib + jnp.moveaxis(jax.vmap(branch)(one_head), 0, 2)
    return contrib


@struct.dataclass
class Capture:
    """Read activations of every block at `positions` (B, P); positions=None reads every position (P = T).

    Flags (static) and what each adds to `Output.captured` (H query heads, S keys: T, or the cache size):
      residual      "residual"      (L+1, B, P, D)   block inputs, and the last block's output
      heads         "heads"         (L, B, P, H, Dh) per-head attention output before o_proj
      patterns      "patterns"      (L, B, H, P, S)  softmax attention probabilities (float32), query rows at
                                                     `positions`; masked keys are 0, rows sum to 1
      attn_out      "attn_out"      (L, B, P, D)     attention block output (after o_proj and its bias)
      mlp_out       "mlp_out"       (L, B, P, D)     MLP block output
      head_contrib  "head_contrib"  (L, B, P, H, D)  head h's output through its slice of o_proj
    `patterns` needs the XLA attention path: the Pallas decode kernel (`use_kernel=True`) does not form probs.
    """

    positions: jax.Array | None = None
    residual: bool = struct.field(pytree_node=False, default=True)
    heads: bool = struct.field(pytree_node=False, default=True)
    patterns: bool = struct.field(pytree_node=False, default=False)
    attn_out: bool = struct.field(pytree_node=False, default=False)
    mlp_out: bool = struct.field(pytree_node=False, default=False)
    head_contrib: bool = struct.field(pytree_node=False, default=False)

    def gather(self, x: jax.Array, axis: int = 1) -> jax.Array:
        """x[b, ..., positions[b, p], ...] along `axis` (the position axis); identity when positions is None."""
        if self.positions is None:
            return x
        pos = jnp.asarray(self.positions, jnp.int32)
        if pos.ndim != 2 or pos.shape[0] != x.shape[0]:
            raise ValueError(f"Capture.positions shape {pos.shape}: expected (B, P) with B={x.shape[0]}")
        idx = pos.reshape(pos.shape[:1] + (1,) * (axis - 1) + pos.shape[1:] + (1,) * (x.ndim - axis - 1))
        return jnp.take_along_axis(x, idx, axis=axis)


@struct.dataclass
class Hooks:
    """All interventions of one forward pass. Every field is optional; `Hooks()` is the identity.

    steer: `Steer`s; patch: `PatchHead`s (static layer/head) and/or `PatchHeadAt`s (traced layer/head, applied
    in every block); capture: what to read (`Capture`)."""

    steer: tuple = ()
    patch: tuple = ()
    capture: Capture | None = None
    residual_fn: Callable[[int, jax.Array], jax.Array] | None = struct.field(pytree_node=False, default=None)
    head_fn: Callable[[int, jax.Array], jax.Array] | None = struct.field(pytree_node=False, default=None)
    kv_fn: Callable[[int, jax.Array, jax.Array], tuple[jax.Array, jax.Array]] | None = struct.field(
        pytree_node=False, default=None)

    def on_residual(self, layer: int, x: jax.Array) -> jax.Array:
        for s in self.steer:
            if s.layer == layer:
                x = s.apply(x)
        if self.residual_fn is not None:
            x = self.residual_fn(layer, x)
        return x

    def on_heads(self, layer: int, heads: jax.Array) -> jax.Array:
        for p in self.patch:
            if isinstance(p, PatchHeadAt):
                heads = p.apply_at(layer, heads)
            elif p.layer == layer:
                heads = p.apply(heads)
        if self.head_fn is not None:
            heads = self.head_fn(layer, heads)
        return heads

    def on_kv(self, layer: int, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
        if self.kv_fn is not None:
            k, v = self.kv_fn(layer, k, v)
        return k, v

    def validate(self, num_layers: int) -> None:
        for s in self.steer:
            if not isinstance(s, Steer) or not 0 <= s.layer <= num_layers:
                raise ValueError(f"steer entry {s!r}: expected Steer with layer in [0, {num_layers}]")
        for p in self.patch:
            if isinstance(p, PatchHeadAt):
                continue  # traced layer/head: an out-of-range one patches nothing
            if not isinstance(p, PatchHead) or not 0 <= p.layer < num_layers:
                raise ValueError(f"patch entry {p!r}: expected PatchHead with layer in [0, {num_layers}) "
                                 "or PatchHeadAt")


def no_hooks() -> Hooks:
    return Hooks()

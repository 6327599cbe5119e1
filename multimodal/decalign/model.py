"""DecAlign's network (flax nnx): projections, unique/common encoders, cross-modal transformers, head.

Shapes: text (B, L, Dt), audio (B, L, Da), vision (B, L, Dv) -> prediction (B, num_outputs), with the
unique s and common c features (3, B, L, d), the fused representation (B, 6d) and the distribution-encoded
pooled common features (3, B, p) that the losses use. Dropout takes an explicit key (None = evaluation),
so the module is a pure function of (params, inputs, key) once split with `nnx.split`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from .configs import ModelConfig

MODALITIES = ("text", "audio", "vision")


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def sinusoid(length: int, d: int) -> jax.Array:
    """(length, d) sinusoidal positions, as in MulT's encoder."""
    pos = jnp.arange(length)[:, None]
    i = jnp.arange(d // 2 + d % 2)[None]
    angle = pos / (10000.0 ** (2 * i / d))
    pe = jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], -1)
    return pe[:, :d]


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float = 1e-6) -> jax.Array:
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.var(x, -1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * scale + bias


def cross_layer(p: dict, q: jax.Array, kv: jax.Array, heads: int, rate: float, key: jax.Array | None) -> jax.Array:
    """One pre-norm cross-modal layer: q (B, Lq, d) attends to kv (B, Lk, d), then a ReLU feed-forward."""
    b, lq, d = q.shape
    k1, k2 = jax.random.split(key) if key is not None else (None, None)
    qn = layer_norm(q, p["ln_q_s"], p["ln_q_b"])
    kvn = layer_norm(kv, p["ln_kv_s"], p["ln_kv_b"])
    split = lambda x: x.reshape(b, x.shape[1], heads, d // heads)
    qh, kh, vh = split(qn @ p["wq"] + p["bq"]), split(kvn @ p["wk"] + p["bk"]), split(kvn @ p["wv"] + p["bv"])
    att = jax.nn.softmax(jnp.einsum("bqhe,bkhe->bhqk", qh, kh) / jnp.sqrt(d // heads), axis=-1)
    o = jnp.einsum("bhqk,bkhe->bqhe", att, vh).reshape(b, lq, d) @ p["wo"] + p["bo"]
    q = q + dropout(o, rate, k1)
    f = jax.nn.relu(layer_norm(q, p["ln_f_s"], p["ln_f_b"]) @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return q + dropout(f, rate, k2)


def init_cross_layers(key: jax.Array, shape: tuple[int, ...], d: int, ff: int) -> dict:
    """Parameters of `shape` (e.g. (modalities, layers)) stacked cross-modal layers (LeCun-normal weights)."""
    ks = jax.random.split(key, 6)
    w = lambda k, i, o: jax.random.normal(k, (*shape, i, o)) / jnp.sqrt(i)
    z = lambda n: jnp.zeros((*shape, n))
    o = lambda n: jnp.ones((*shape, n))
    return {"ln_q_s": o(d), "ln_q_b": z(d), "ln_kv_s": o(d), "ln_kv_b": z(d), "ln_f_s": o(d), "ln_f_b": z(d),
            "wq": w(ks[0], d, d), "bq": z(d), "wk": w(ks[1], d, d), "bk": z(d), "wv": w(ks[2], d, d), "bv": z(d),
            "wo": w(ks[3], d, d), "bo": z(d), "w1": w(ks[4], d, ff), "b1": z(ff), "w2": w(ks[5], ff, d), "b2": z(d)}


class CrossModalTransformers(nnx.Module):
    """The three per-modality cross-modal transformers (MulT-style), stored stacked (3, layers, ...) so the
    computation is one vmap over modalities of one scan over layers (one trace, fast compiles)."""

    def __init__(self, d: int, heads: int, layers: int, ff_mult: int, rate: float, *, rngs: nnx.Rngs):
        for name, value in init_cross_layers(rngs.params(), (3, layers), d, ff_mult * d).items():
            setattr(self, f"layer_{name}", nnx.Param(value))
        self.names = tuple(init_cross_layers(jax.random.key(0), (1, 1), 1, 1))
        self.ln_s = nnx.Param(jnp.ones((3, d)))
        self.ln_b = nnx.Param(jnp.zeros((3, d)))
        self.heads, self.rate, self.num_layers = heads, rate, layers

    def __call__(self, q: jax.Array, kv: jax.Array, key: jax.Array | None) -> jax.Array:
        """q (3, B, L, d), kv (3, B, Lk, d) -> (3, B, L, d)."""
        keys = None if key is None else jax.random.split(key, (3, self.num_layers))

        def one(p, q, kv, ln_s, ln_b, ks):
            def body(q, x):
                lp, k = x
                return cross_layer(lp, q, kv, self.heads, self.rate, k), None
            q, _ = jax.lax.scan(body, q, (p, ks))
            return layer_norm(q, ln_s, ln_b)

        layers = {name: getattr(self, f"layer_{name}")[...] for name in self.names}
        if keys is None:
            return jax.vmap(lambda p, q, kv, s, b: one(p, q, kv, s, b, None))(
                layers, q, kv, self.ln_s[...], self.ln_b[...])
        return jax.vmap(one)(layers, q, kv, self.ln_s[...], self.ln_b[...], keys)


class DecAlign(nnx.Module):
    def __init__(self, config: ModelConfig, input_dims: tuple[int, int, int], *, rngs: nnx.Rngs):
        d = config.d_model
        self.config = config
        # Conv1d with kernel 1 == a per-timestep linear map (no bias, as the reference).
        self.proj = nnx.List([nnx.Linear(di, d, use_bias=False, rngs=rngs) for di in input_dims])
        self.unique = nnx.List([nnx.Linear(d, d, use_bias=False, rngs=rngs) for _ in input_dims])
        self.common = nnx.Linear(d, d, use_bias=False, rngs=rngs)  # shared across modalities
        self.fusion = CrossModalTransformers(d, config.num_heads, config.num_layers, config.ff_mult,
                                             config.dropout, rngs=rngs)
        p = config.proto_dim
        self.dist_enc = nnx.List([nnx.Sequential(nnx.Linear(d, p, rngs=rngs), jax.nn.relu, nnx.Linear(p, p, rngs=rngs))
                                  for _ in input_dims])
        self.head = nnx.Linear(6 * d, config.num_outputs, rngs=rngs)

    def __call__(self, text: jax.Array, audio: jax.Array, vision: jax.Array, key: jax.Array | None = None) -> dict:
        xs = (text, audio, vision)
        keys = list(jax.random.split(key, 4)) if key is not None else [None] * 4
        p = [self.proj[m](dropout(x, self.config.dropout, None if keys[3] is None else jax.random.fold_in(keys[3], m)))
             for m, x in enumerate(xs)]
        s = [self.unique[m](p[m]) for m in range(3)]
        c = [self.common(p[m]) for m in range(3)]
        pe = sinusoid(text.shape[1], self.config.d_model)
        sp = jnp.stack(s) + pe  # (3, B, L, d)
        others = jnp.stack([jnp.concatenate([sp[n] for n in range(3) if n != m], axis=1) for m in range(3)])
        h = jnp.mean(self.fusion(sp, others, keys[0]), axis=2)  # (3, B, d): s_m attends to the other two
        c_pooled = [jnp.mean(cm, axis=1) for cm in c]
        rep = jnp.concatenate(list(h) + c_pooled, axis=-1)  # (B, 6d)
        out = self.head(rep)
        z = jnp.stack([self.dist_enc[m](c_pooled[m]) for m in range(3)])  # (3, B, p)
        return {"out": out, "s": jnp.stack(s), "c": jnp.stack(c), "rep": rep, "z": z}

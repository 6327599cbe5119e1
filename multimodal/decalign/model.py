"""DecAlign's network (flax nnx): projections, unique/common encoders, cross-modal transformers, head.

Shapes: text (B, Lt, Dt), audio (B, La, Da), vision (B, Lv, Dv) -> prediction (B, num_outputs), with the
unique s and common c features (3, B, L, d) on the common padded length L = max(Lt, La, Lv), their validity
mask (3, B, L), the fused representation (B, 6d) and the distribution-encoded pooled common features (3, B, p)
that the losses use. Unaligned data (MMSA `unaligned_*.pkl`: a different length per modality and per clip)
passes `lengths` (3, B): positions at or past a clip's length are padding, masked out of attention (as keys),
of every pooling and of the decoupling loss, so a clip's outputs do not depend on how much padding it carries.
Dropout takes an explicit key (None = evaluation), so the module is a pure function of (params, inputs, key)
once split with `nnx.split`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from .bert import BertConfig, BertEncoder
from .configs import ModelConfig

MODALITIES = ("text", "audio", "vision")
_MASKED = -1e9  # attention logit of a padded key: exp underflows to exactly 0 next to any valid key


def dropout(x: jax.Array, rate, key: jax.Array | None) -> jax.Array:
    """Inverted dropout; `rate` may be a traced scalar (per-modality rates inside a vmap); rate 0 is the identity."""
    if key is None or (isinstance(rate, (int, float)) and rate == 0.0):
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


def masked_mean(x: jax.Array, mask: jax.Array | None, axis: int = 1) -> jax.Array:
    """Mean of x (..., L, d) over the time axis counting only mask (..., L) positions (all when mask is None)."""
    if mask is None:
        return jnp.mean(x, axis=axis)
    m = mask.astype(x.dtype)[..., None]
    return jnp.sum(x * m, axis=axis) / jnp.maximum(jnp.sum(m, axis=axis), 1.0)


def length_mask(lengths: jax.Array, length: int) -> jax.Array:
    """(..., ) lengths -> (..., length) boolean mask of the valid (non-padding) positions."""
    return jnp.arange(length) < lengths[..., None]


def cross_layer(p: dict, q: jax.Array, kv: jax.Array, heads: int, rate, key: jax.Array | None, *,
                kv_mask: jax.Array | None = None, post_norm: bool = False, attn_rate=0.0, relu_rate=0.0,
                attn_dropout: bool = False) -> jax.Array:
    """One cross-modal layer: q (B, Lq, d) attends to kv (B, Lk, d) (keys where kv_mask (B, Lk) is False are
    ignored), then a ReLU feed-forward.

    Pre-norm (default): q + Drop(Att(LN q, LN kv)), then x + Drop(FF(LN x)).
    Post-norm (the official code's `TransformerEncoderLayer`): LN(q + Drop(Att(q, kv))), then LN(x + Drop(FF x)),
    with no key/value normalisation. `attn_rate` drops attention weights (the official per-modality
    attn_dropout), `relu_rate` the hidden ReLU units (relu_dropout), `rate` the residual branches (res_dropout).
    """
    b, lq, d = q.shape
    k1, k2, k3, k4 = jax.random.split(key, 4) if key is not None else (None,) * 4
    qn = q if post_norm else layer_norm(q, p["ln_q_s"], p["ln_q_b"])
    kvn = kv if post_norm else layer_norm(kv, p["ln_kv_s"], p["ln_kv_b"])
    split = lambda x: x.reshape(b, x.shape[1], heads, d // heads)
    qh, kh, vh = split(qn @ p["wq"] + p["bq"]), split(kvn @ p["wk"] + p["bk"]), split(kvn @ p["wv"] + p["bv"])
    logits = jnp.einsum("bqhe,bkhe->bhqk", qh, kh) / jnp.sqrt(d // heads)
    if kv_mask is not None:
        logits = jnp.where(kv_mask[:, None, None, :], logits, _MASKED)
    att = jax.nn.softmax(logits, axis=-1)
    if attn_dropout:
        att = dropout(att, attn_rate, k3)
    o = jnp.einsum("bhqk,bkhe->bqhe", att, vh).reshape(b, lq, d) @ p["wo"] + p["bo"]
    q = q + dropout(o, rate, k1)
    if post_norm:
        q = layer_norm(q, p["ln_q_s"], p["ln_q_b"])
    hidden = jax.nn.relu((q if post_norm else layer_norm(q, p["ln_f_s"], p["ln_f_b"])) @ p["w1"] + p["b1"])
    f = dropout(hidden, relu_rate, k4) @ p["w2"] + p["b2"]
    q = q + dropout(f, rate, k2)
    return layer_norm(q, p["ln_f_s"], p["ln_f_b"]) if post_norm else q


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

    def __init__(self, d: int, heads: int, layers: int, ff_mult: int, rate: float, *, rngs: nnx.Rngs,
                 post_norm: bool = False, attn_dropout: tuple[float, float, float] = (0.0, 0.0, 0.0),
                 relu_dropout: float = 0.0):
        for name, value in init_cross_layers(rngs.params(), (3, layers), d, ff_mult * d).items():
            setattr(self, f"layer_{name}", nnx.Param(value))
        self.names = tuple(init_cross_layers(jax.random.key(0), (1, 1), 1, 1))
        self.ln_s = nnx.Param(jnp.ones((3, d)))
        self.ln_b = nnx.Param(jnp.zeros((3, d)))
        self.heads, self.rate, self.num_layers = heads, rate, layers
        self.post_norm, self.attn_rates, self.relu_rate = post_norm, tuple(attn_dropout), relu_dropout

    def __call__(self, q: jax.Array, kv: jax.Array, key: jax.Array | None, kv_mask: jax.Array | None = None,
                 ) -> jax.Array:
        """q (3, B, L, d), kv (3, B, Lk, d), kv_mask (3, B, Lk) or None -> (3, B, L, d)."""
        keys = None if key is None else jax.random.split(key, (3, self.num_layers))
        use_attn_dropout = key is not None and any(r > 0 for r in self.attn_rates)

        def one(p, q, kv, mask, ln_s, ln_b, attn_rate, ks):
            def body(q, x):
                lp, k = x
                return cross_layer(lp, q, kv, self.heads, self.rate, k, kv_mask=mask, post_norm=self.post_norm,
                                   attn_rate=attn_rate, relu_rate=self.relu_rate,
                                   attn_dropout=use_attn_dropout), None
            q, _ = jax.lax.scan(body, q, (p, ks))
            # the official post-norm encoder ends on its last layer's norm; pre-norm needs a final one
            return q if self.post_norm else layer_norm(q, ln_s, ln_b)

        layers = {name: getattr(self, f"layer_{name}")[...] for name in self.names}
        rates = jnp.asarray(self.attn_rates, jnp.float32)
        axes = (0, 0, 0, None if kv_mask is None else 0, 0, 0, 0, None if keys is None else 0)
        return jax.vmap(one, in_axes=axes)(layers, q, kv, kv_mask, self.ln_s[...], self.ln_b[...], rates, keys)


class DecAlign(nnx.Module):
    def __init__(self, config: ModelConfig, input_dims: tuple[int, int, int], *, rngs: nnx.Rngs):
        d = config.d_model
        self.config = config
        if config.text_encoder:  # token ids in, BERT features out: the projection sees BERT's hidden size
            bert = BertConfig.from_hf(config.text_encoder)
            self.text_encoder = BertEncoder(bert, rngs=rngs)
            input_dims = (bert.hidden_size, *input_dims[1:])
        # Conv1d with kernel 1 == a per-timestep linear map (no bias, as the reference).
        self.proj = nnx.List([nnx.Linear(di, d, use_bias=False, rngs=rngs) for di in input_dims])
        self.unique = nnx.List([nnx.Linear(d, d, use_bias=False, rngs=rngs) for _ in input_dims])
        self.common = nnx.Linear(d, d, use_bias=False, rngs=rngs)  # shared across modalities
        self.fusion = CrossModalTransformers(d, config.num_heads, config.num_layers, config.ff_mult,
                                             config.dropout, rngs=rngs, post_norm=config.norm == "post",
                                             attn_dropout=config.attn_dropout, relu_dropout=config.relu_dropout)
        p = config.proto_dim
        self.dist_enc = nnx.List([nnx.Sequential(nnx.Linear(d, p, rngs=rngs), jax.nn.relu, nnx.Linear(p, p, rngs=rngs))
                                  for _ in input_dims])
        self.head = nnx.Linear(6 * d, config.num_outputs, rngs=rngs)

    def input_rates(self) -> tuple[float, float, float]:
        c = self.config
        return tuple(c.input_dropout) if c.input_dropout is not None else (c.dropout,) * 3

    def __call__(self, text: jax.Array, audio: jax.Array, vision: jax.Array, key: jax.Array | None = None,
                 lengths: jax.Array | None = None) -> dict:
        """lengths: (3, B) valid lengths of text, audio, vision (None = every position is valid). With a text
        encoder, text is (B, L, 3) token ids, mask and segment ids."""
        if self.config.text_encoder:
            text = self.text_encoder(text)
        xs = (text, audio, vision)
        big = max(x.shape[1] for x in xs)
        keys = list(jax.random.split(key, 5)) if key is not None else [None] * 5
        rates = self.input_rates()
        p = [self.proj[m](dropout(x, rates[m], None if keys[3] is None else jax.random.fold_in(keys[3], m)))
             for m, x in enumerate(xs)]
        # one common padded length so the three modalities stack (and run as one vmap)
        p = [jnp.pad(pm, ((0, 0), (0, big - pm.shape[1]), (0, 0))) for pm in p]
        if lengths is None and all(x.shape[1] == big for x in xs):
            mask = None
        else:
            full = jnp.array([x.shape[1] for x in xs], jnp.int32)[:, None]
            lens = full if lengths is None else jnp.minimum(jnp.asarray(lengths, jnp.int32), full)
            mask = length_mask(jnp.broadcast_to(lens, (3, text.shape[0])), big)  # (3, B, L)
        keep = (lambda v, m: v) if mask is None else (lambda v, m: v * mask[m][..., None].astype(v.dtype))
        s = [keep(self.unique[m](p[m]), m) for m in range(3)]
        c = [keep(self.common(p[m]), m) for m in range(3)]
        pe = sinusoid(big, self.config.d_model)
        sp = dropout(jnp.stack(s) + pe, self.config.embed_dropout, keys[4])  # (3, B, L, d)
        others = jnp.stack([jnp.concatenate([sp[n] for n in range(3) if n != m], axis=1) for m in range(3)])
        kv_mask = None if mask is None else jnp.stack(
            [jnp.concatenate([mask[n] for n in range(3) if n != m], axis=1) for m in range(3)])
        fused = self.fusion(sp, others, keys[0], kv_mask)  # (3, B, L, d): s_m attends to the other two
        h = masked_mean(fused, mask, axis=2)  # (3, B, d)
        c_pooled = [masked_mean(cm, None if mask is None else mask[m]) for m, cm in enumerate(c)]
        s_pooled = jnp.stack([masked_mean(sm, None if mask is None else mask[m]) for m, sm in enumerate(s)])
        rep = jnp.concatenate(list(h) + c_pooled, axis=-1)  # (B, 6d)
        out = self.head(rep)
        z = jnp.stack([self.dist_enc[m](c_pooled[m]) for m in range(3)])  # (3, B, p)
        return {"out": out, "s": jnp.stack(s), "c": jnp.stack(c), "s_pooled": s_pooled, "rep": rep, "z": z,
                "mask": mask}

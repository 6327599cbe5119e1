"""A Qwen2/Llama-family decoder in flax nnx, with a static-shape KV cache and intervention hooks.

Parameters carry logical axis names (`vocab`, `embed`, `heads`, `kv_heads`, `head_dim`, `mlp`, `norm`) that
`core.lm.sharding` maps onto a ("data", "model") mesh. The forward is pure: `apply(graphdef, params, tokens,
...)` merges and calls the module without mutating it, so it runs under `jax.jit` with hooks and caches as
explicit inputs and outputs.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.lm.configs import LMConfig
from core.lm.hooks import Hooks, head_contributions
from core.lm.lora import LayerLora, LoraInputs
from core.lm.sharding import constrain

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def dtype_of(name: str):
    return _DTYPES[name]


def _param(rngs: nnx.Rngs | None, init, shape, names, dtype) -> nnx.Param:
    value = init(rngs.params() if rngs is not None else jax.random.key(0), shape, dtype)
    return nnx.Param(value, out_sharding=names, eager_sharding=False)


_normal = nnx.initializers.normal(0.02)
_zeros = nnx.initializers.zeros
_ones = nnx.initializers.ones


# --- rotary embeddings ---------------------------------------------------------------------------


def rope_inv_freq(config: LMConfig) -> np.ndarray:
    """Inverse frequencies (head_dim/2,) in float32, with linear or Llama-3 scaling applied."""
    dim = config.head_dim
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (np.float32(1.0) / (np.float32(config.rope_theta) ** exponent)).astype(np.float32)
    rs = config.rope_scaling
    if rs.rope_type == "linear":
        inv_freq = inv_freq / np.float32(rs.factor)
    elif rs.rope_type == "llama3":
        old = rs.original_max_position_embeddings
        low_wavelen = old / rs.low_freq_factor
        high_wavelen = old / rs.high_freq_factor
        wavelen = 2 * np.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / rs.factor, inv_freq)
        smooth = (old / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
        smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = np.where(medium, smoothed, scaled).astype(np.float32)
    return inv_freq.astype(np.float32)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: np.ndarray) -> jax.Array:
    """Rotate-half rotary embedding. x: (B, T, H, Dh); positions: (B, T) int."""
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)[None, None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(emb).astype(x.dtype), jnp.sin(emb).astype(x.dtype)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


# --- KV cache ------------------------------------------------------------------------------------


class KVCache(NamedTuple):
    """Static-shape cache. k, v: (L, B, S, KVH, Dh) after rotary; valid: (B, S) bool slots holding a real
    token; positions: (B, S) int32 rotary position of each slot's key (0 where not valid); index: () int32,
    the next slot to write (shared by the batch); lengths: (B,) int32 real tokens so far (the next token's
    position)."""

    k: jax.Array
    v: jax.Array
    valid: jax.Array
    positions: jax.Array
    index: jax.Array
    lengths: jax.Array

    @property
    def size(self) -> int:
        return self.k.shape[2]


class DecodeCache(NamedTuple):
    """A KV cache in the layout a decode loop reads fastest: per layer, keys (B, KVH, S, Dh) and values
    transposed, (B, KVH, Dh, S), each its own array. XLA:CPU's attention products then read them in place,
    where the stacked (L, B, S, KVH, Dh) layout costs a slice and two transpose copies per layer and token
    (measured in `benchmarks/lm_decode_layout.py`: it matters over long caches). `generate.decode` converts in
    and out (`to_decode_cache`, `from_decode_cache`); the model takes either. Other fields as KVCache."""

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    valid: jax.Array
    positions: jax.Array
    index: jax.Array
    lengths: jax.Array

    @property
    def size(self) -> int:
        return self.k[0].shape[2]


def to_decode_cache(cache: KVCache) -> DecodeCache:
    """The same cache in DecodeCache's per-layer layout."""
    L = cache.k.shape[0]
    return DecodeCache(k=tuple(jnp.swapaxes(cache.k[i], 1, 2) for i in range(L)),
                       v=tuple(jnp.transpose(cache.v[i], (0, 2, 3, 1)) for i in range(L)),
                       valid=cache.valid, positions=cache.positions, index=cache.index, lengths=cache.lengths)


def from_decode_cache(cache: DecodeCache) -> KVCache:
    """The same cache back in KVCache's stacked (L, B, S, KVH, Dh) layout."""
    return KVCache(k=jnp.stack([jnp.swapaxes(k, 1, 2) for k in cache.k]),
                   v=jnp.stack([jnp.transpose(v, (0, 3, 1, 2)) for v in cache.v]),
                   valid=cache.valid, positions=cache.positions, index=cache.index, lengths=cache.lengths)


def init_cache(config: LMConfig, batch: int, size: int, dtype=None) -> KVCache:
    """An empty cache of `size` slots."""
    dtype = dtype or dtype_of(config.dtype)
    shape = (config.num_layers, batch, size, config.num_kv_heads, config.head_dim)
    return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), valid=jnp.zeros((batch, size), bool),
                   positions=jnp.zeros((batch, size), jnp.int32), index=jnp.zeros((), jnp.int32),
                   lengths=jnp.zeros((batch,), jnp.int32))


def read_kv(cache: KVCache, layer: int) -> tuple[jax.Array, jax.Array]:
    """Layer `layer`'s keys and values, each (B, S, KVH, Dh)."""
    return cache.k[layer], cache.v[layer]


def write_kv(cache: KVCache, layer: int, k: jax.Array, v: jax.Array) -> KVCache:
    """A cache with layer `layer`'s keys and values replaced (shapes must match)."""
    if k.shape != cache.k.shape[1:] or v.shape != cache.v.shape[1:]:
        raise ValueError(f"write_kv shapes k={k.shape}, v={v.shape}: expected {cache.k.shape[1:]}")
    return cache._replace(k=cache.k.at[layer].set(k.astype(cache.k.dtype)),
                          v=cache.v.at[layer].set(v.astype(cache.v.dtype)))


# --- modules -------------------------------------------------------------------------------------


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, *, param_dtype, rngs: nnx.Rngs | None = None):
        self.eps = eps
        self.weight = _param(rngs, _ones, (dim,), ("norm",), param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = x.dtype
        x32 = x.astype(jnp.float32)
        var = jnp.mean(x32 * x32, axis=-1, keepdims=True)
        y = (x32 * jax.lax.rsqrt(var + self.eps)).astype(dtype)
        return self.weight[...].astype(dtype) * y


class Attention(nnx.Module):
    """Grouped-query attention projections; `__call__` returns per-head outputs before `o_proj`."""

    def __init__(self, config: LMConfig, *, rngs: nnx.Rngs | None = None):
        c = config
        pd = dtype_of(c.param_dtype)
        D, H, KVH, Dh = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
        self.q_proj = _param(rngs, _normal, (D, H, Dh), ("embed", "heads", "head_dim"), pd)
        self.k_proj = _param(rngs, _normal, (D, KVH, Dh), ("embed", "kv_heads", "head_dim"), pd)
        self.v_proj = _param(rngs, _normal, (D, KVH, Dh), ("embed", "kv_heads", "head_dim"), pd)
        self.o_proj = _param(rngs, _normal, (H, Dh, D), ("heads", "head_dim", "embed"), pd)
        if c.attention_bias:
            self.q_bias = _param(rngs, _zeros, (H, Dh), ("heads", "head_dim"), pd)
            self.k_bias = _param(rngs, _zeros, (KVH, Dh), ("kv_heads", "head_dim"), pd)
            self.v_bias = _param(rngs, _zeros, (KVH, Dh), ("kv_heads", "head_dim"), pd)
        else:
            self.q_bias = self.k_bias = self.v_bias = None
        # Llama's and Qwen3's attention_bias also put a bias on o_proj; Qwen2's q/k/v bias does not.
        if c.attention_bias and c.architecture in ("llama", "qwen3"):
            self.o_bias = _param(rngs, _zeros, (D,), ("embed",), pd)
        else:
            self.o_bias = None
        if c.qk_norm:  # Qwen3: RMSNorm over head_dim on every query/key head, before rotary
            self.q_norm = RMSNorm(Dh, c.rms_norm_eps, param_dtype=pd, rngs=rngs)
            self.k_norm = RMSNorm(Dh, c.rms_norm_eps, param_dtype=pd, rngs=rngs)
        else:
            self.q_norm = self.k_norm = None

    def qkv(self, x: jax.Array, lora: LayerLora | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
        dt = x.dtype
        q = jnp.einsum("btd,dhk->bthk", x, self.q_proj[...].astype(dt))
        k = jnp.einsum("btd,dhk->bthk", x, self.k_proj[...].astype(dt))
        v = jnp.einsum("btd,dhk->bthk", x, self.v_proj[...].astype(dt))
        if lora is not None:  # on the linear map itself, before q/k norm (PEFT wraps the Linear)
            q, k, v = lora("q_proj", x, q), lora("k_proj", x, k), lora("v_proj", x, v)
        if self.q_bias is not None:
            q = q + self.q_bias[...].astype(dt)
            k = k + self.k_bias[...].astype(dt)
            v = v + self.v_bias[...].astype(dt)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def out(self, heads: jax.Array, lora: LayerLora | None = None) -> jax.Array:
        y = jnp.einsum("bthk,hkd->btd", heads, self.o_proj[...].astype(heads.dtype))
        if lora is not None:
            y = lora("o_proj", heads, y)
        if self.o_bias is not None:
            y = y + self.o_bias[...].astype(heads.dtype)
        return y


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, return_probs: bool = False, *,
              kv_major: bool = False) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Softmax attention with GQA. q: (B, T, H, Dh); k, v: (B, S, KVH, Dh), or with `kv_major` DecodeCache's
    layer layout, k (B, KVH, S, Dh) and v (B, KVH, Dh, S); mask: (B, T, S) bool.

    Returns the per-head output (B, T, H, Dh), and with `return_probs` also the float32 probabilities
    (B, H, T, S) (query head h reads KV head h // (H // KVH); masked keys get exactly 0 unless a row has no
    visible key, which is then uniform).
    """
    B, T, H, Dh = q.shape
    KVH, S = (k.shape[1], k.shape[2]) if kv_major else (k.shape[2], k.shape[1])
    G = H // KVH
    qg = q.reshape(B, T, KVH, G, Dh)
    scores = jnp.einsum("btkgd,bksd->bkgts" if kv_major else "btkgd,bskd->bkgts", qg, k)
    scores = scores.astype(jnp.float32) * (Dh ** -0.5)
    scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs32 = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bkgts,bkds->btkgd" if kv_major else "bkgts,bskd->btkgd", probs32.astype(v.dtype), v)
    out = out.reshape(B, T, H, Dh)
    if return_probs:
        return out, probs32.reshape(B, H, T, S)
    return out


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: LMConfig, *, rngs: nnx.Rngs | None = None):
        pd = dtype_of(config.param_dtype)
        D, F = config.hidden_size, config.intermediate_size
        self.gate_proj = _param(rngs, _normal, (D, F), ("embed", "mlp"), pd)
        self.up_proj = _param(rngs, _normal, (D, F), ("embed", "mlp"), pd)
        self.down_proj = _param(rngs, _normal, (F, D), ("mlp", "embed"), pd)

    def __call__(self, x: jax.Array, lora: LayerLora | None = None) -> jax.Array:
        dt = x.dtype
        g = x @ self.gate_proj[...].astype(dt)
        u = x @ self.up_proj[...].astype(dt)
        if lora is None:
            return (jax.nn.silu(g) * u) @ self.down_proj[...].astype(dt)
        h = jax.nn.silu(lora("gate_proj", x, g)) * lora("up_proj", x, u)
        return lora("down_proj", h, h @ self.down_proj[...].astype(dt))


class Block(nnx.Module):
    def __init__(self, config: LMConfig, *, rngs: nnx.Rngs | None = None):
        pd = dtype_of(config.param_dtype)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, param_dtype=pd, rngs=rngs)
        self.self_attn = Attention(config, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, param_dtype=pd, rngs=rngs)
        self.mlp = MLP(config, rngs=rngs)


class Output(NamedTuple):
    """logits: (B, T, V) float32, or None with `return_hidden`; cache: the updated KVCache or None;
    captured: dict of hook reads; hidden: (B, T, D) final hidden states (after the final norm, before the LM
    head) with `return_hidden`, else None."""

    logits: jax.Array | None
    cache: KVCache | None
    captured: dict
    hidden: jax.Array | None = None


REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch", "everything")


def remat_policy(name: str):
    """A `jax.checkpoint` policy by name: "full" saves nothing inside a block (recompute it all), "dots"
    saves matmul outputs, "dots_no_batch" saves matmuls without batch dims (maxtext's `minimal`),
    "everything" saves all (remat with no savings, for testing)."""
    policies = {"full": jax.checkpoint_policies.nothing_saveable,
                "dots": jax.checkpoint_policies.dots_saveable,
                "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
                "everything": jax.checkpoint_policies.everything_saveable}
    if name not in policies:
        raise ValueError(f"remat={name!r}: expected one of {REMAT_POLICIES}")
    return policies[name]


class _Context(NamedTuple):
    """What every block of one forward pass shares (static flags are plain Python values)."""

    positions: jax.Array
    mask: jax.Array
    inv_freq: np.ndarray
    cache_index: jax.Array | None
    hooks: Hooks
    use_kernel: bool
    lora: LoraInputs | None = None


class Transformer(nnx.Module):
    """Decoder-only transformer (Qwen2 / Llama). Call it through `apply` under jit."""

    def __init__(self, config: LMConfig, *, rngs: nnx.Rngs | None = None):
        self.config = config
        pd = dtype_of(config.param_dtype)
        self.embed_tokens = _param(rngs, _normal, (config.vocab_size, config.hidden_size), ("vocab", "embed"), pd)
        self.layers = nnx.List([Block(config, rngs=rngs) for _ in range(config.num_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, param_dtype=pd, rngs=rngs)
        if config.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = _param(rngs, _normal, (config.hidden_size, config.vocab_size), ("embed", "vocab"), pd)

    def embed(self, tokens: jax.Array) -> jax.Array:
        """Token embeddings (B, T, D) in the compute dtype (to build `inputs_embeds` with a prefix)."""
        return jnp.take(self.embed_tokens[...], tokens, axis=0).astype(dtype_of(self.config.dtype))

    def unembedding(self) -> jax.Array:
        """The LM head as (D, V) in the compute dtype (the transposed embedding when tied)."""
        dt = dtype_of(self.config.dtype)
        if self.lm_head is None:
            return self.embed_tokens[...].astype(dt).T
        return self.lm_head[...].astype(dt)

    def _block(self, i: int, x: jax.Array, cache_k: jax.Array | None, cache_v: jax.Array | None,
               ctx: _Context) -> tuple[jax.Array, jax.Array | None, jax.Array | None, dict]:
        """Block `i` on residual x (B, T, D), with every layer's cache keys / values (L, B, S, KVH, Dh) or None:
        returns (new x, the caches with this layer's new keys / values written in place, reads)."""
        layer, hooks, dt = self.layers[i], ctx.hooks, x.dtype
        reads = {}
        x = hooks.on_residual(i, x)
        if hooks.capture is not None and hooks.capture.residual:
            reads["residual"] = hooks.capture.gather(x)
        h = layer.input_layernorm(x)
        lora = None if ctx.lora is None else ctx.lora.layer(i)
        q, k, v = layer.self_attn.qkv(h, lora)
        q = apply_rope(q, ctx.positions, ctx.inv_freq)
        k = apply_rope(k, ctx.positions, ctx.inv_freq)
        k, v = hooks.on_kv(i, k, v)
        cap = hooks.capture
        want_probs = cap is not None and cap.patterns
        if cache_k is None:
            heads = attention(q, k, v, ctx.mask, return_probs=want_probs)
        elif isinstance(cache_k, tuple):  # a DecodeCache: this layer's own arrays, keys and values KV-head major
            if ctx.use_kernel:
                raise ValueError("use_kernel=True with a DecodeCache: the Pallas decode kernel reads the stacked "
                                 "KVCache layout; expected a KVCache")
            layer_k = jax.lax.dynamic_update_slice(cache_k[i], jnp.swapaxes(k, 1, 2).astype(cache_k[i].dtype),
                                                   (0, 0, ctx.cache_index, 0))
            layer_v = jax.lax.dynamic_update_slice(cache_v[i], jnp.transpose(v, (0, 2, 3, 1)).astype(cache_v[i].dtype),
                                                   (0, 0, 0, ctx.cache_index))
            cache_k = cache_k[:i] + (layer_k,) + cache_k[i + 1:]
            cache_v = cache_v[:i] + (layer_v,) + cache_v[i + 1:]
            heads = attention(q, layer_k.astype(dt), layer_v.astype(dt), ctx.mask, return_probs=want_probs,
                              kv_major=True)
        else:
            # written into the stacked caches (in place), not into a layer copy restacked afterwards
            at = (i, 0, ctx.cache_index, 0, 0)
            cache_k = jax.lax.dynamic_update_slice(cache_k, k.astype(cache_k.dtype)[None], at)
            cache_v = jax.lax.dynamic_update_slice(cache_v, v.astype(cache_v.dtype)[None], at)
            layer_k, layer_v = cache_k[i].astype(dt), cache_v[i].astype(dt)
            if ctx.use_kernel and q.shape[1] == 1:
                if want_probs:
                    raise ValueError("Capture(patterns=True) with use_kernel=True: the Pallas decode kernel does not "
                                     "form attention probabilities; expected use_kernel=False to capture them")
                from core.lm.kernels import decode_attention

                heads = decode_attention(q[:, 0], layer_k, layer_v, ctx.mask[:, 0])[:, None]
            else:
                heads = attention(q, layer_k, layer_v, ctx.mask, return_probs=want_probs)
        if want_probs:
            heads, probs = heads
            reads["patterns"] = cap.gather(probs, axis=2)
        heads = hooks.on_heads(i, heads)
        if cap is not None and cap.heads:
            reads["heads"] = cap.gather(heads)
        if cap is not None and cap.head_contrib:
            o_lora = None if lora is None else (  # an o_proj adapter's branch alone (zero base output)
                lambda z: lora("o_proj", z, jnp.zeros(z.shape[:2] + x.shape[-1:], z.dtype)))
            reads["head_contrib"] = head_contributions(cap.gather(heads), layer.self_attn.o_proj[...], o_lora)
        attn_out = layer.self_attn.out(heads, lora)
        x = x + attn_out
        mlp_out = layer.mlp(layer.post_attention_layernorm(x), lora)
        x = x + mlp_out
        if cap is not None and cap.attn_out:
            reads["attn_out"] = cap.gather(attn_out)
        if cap is not None and cap.mlp_out:
            reads["mlp_out"] = cap.gather(mlp_out)
        x = constrain(x, ("batch", "seq", "embed"))  # block output: batch over "data" under a mesh
        return x, cache_k, cache_v, reads

    def __call__(self, tokens: jax.Array | None = None, *, inputs_embeds: jax.Array | None = None,
                 positions: jax.Array | None = None, attention_mask: jax.Array | None = None,
                 segment_ids: jax.Array | None = None, cache: KVCache | DecodeCache | None = None,
                 hooks: Hooks | None = None,
                 use_kernel: bool = False, logits_positions: jax.Array | None = None,
                 return_hidden: bool = False, remat: str = "none", lora: LoraInputs | None = None,
                 unembedding: jax.Array | None = None) -> Output:
        """tokens: (B, T) int, or inputs_embeds: (B, T, D) (e.g. an encoder's prefix concatenated with
        `embed(tokens)`); positions then follow attention_mask as for tokens.
        attention_mask: (B, T), True for real tokens (padding may be anywhere).
        segment_ids: (B, T) packed-sequence ids (no cache); positions restart in each segment.
        cache: write the T new keys/values at `cache.index` and attend over the whole cache (a KVCache, or a
        DecodeCache, which comes back as one).
        logits_positions: (B, P) int, compute logits (or hidden states) only there.
        return_hidden: return the final hidden states (after the final norm) and skip the LM head.
        remat: rematerialise each block in the backward pass with a `remat_policy` ("none" = off).
        lora: `core.lm.lora.LoraInputs` (adapters, config, dropout key): add the LoRA branches.
        unembedding: the (D, V) LM head to use instead of `self.unembedding()` (the same values; `generate` on
        a CPU passes a row-major copy of a tied embedding's transpose, which XLA:CPU streams faster).
        """
        c = self.config
        if unembedding is not None and tuple(unembedding.shape) != (c.hidden_size, c.vocab_size):
            raise ValueError(f"unembedding shape {tuple(unembedding.shape)}: expected (hidden_size, vocab_size) = "
                             f"{(c.hidden_size, c.vocab_size)}")
        hooks = hooks if hooks is not None else Hooks()
        hooks.validate(c.num_layers)
        x = self._input(tokens, inputs_embeds)
        x = constrain(x, ("batch", "seq", "embed"))  # embedding output: batch over "data" under a mesh
        B, T = x.shape[:2]
        mask_t = (jnp.ones((B, T), bool) if attention_mask is None else jnp.asarray(attention_mask).astype(bool))
        if mask_t.shape != (B, T):
            raise ValueError(f"attention_mask shape {mask_t.shape}: expected (B, T) = {(B, T)}")
        if segment_ids is not None and cache is not None:
            raise ValueError("segment_ids with a cache: expected one or the other (packing is for training)")

        if cache is None:
            if positions is None:
                if segment_ids is not None:
                    positions = _segment_positions(segment_ids)
                else:
                    positions = jnp.maximum(jnp.cumsum(mask_t, axis=1) - 1, 0)
            causal = jnp.tril(jnp.ones((T, T), bool))
            mask = causal[None] & mask_t[:, None, :]
            if segment_ids is not None:
                mask = mask & (segment_ids[:, :, None] == segment_ids[:, None, :])
            new_valid = None
        else:
            _check_cache(cache, c, B)
            S = cache.size
            if positions is None:
                positions = cache.lengths[:, None] + jnp.maximum(jnp.cumsum(mask_t, axis=1) - 1, 0)
            slots = cache.index + jnp.arange(T)
            new_valid = jax.lax.dynamic_update_slice(cache.valid, mask_t, (0, cache.index))
            mask = new_valid[:, None, :] & (jnp.arange(S)[None, None, :] <= slots[None, :, None])
        positions = jnp.asarray(positions, jnp.int32)
        ctx = _Context(positions=positions, mask=mask, inv_freq=rope_inv_freq(c),
                       cache_index=None if cache is None else cache.index, hooks=hooks, use_kernel=use_kernel,
                       lora=lora)

        policy = remat_policy(remat) if remat != "none" else None
        reads = []
        cache_k, cache_v = (None, None) if cache is None else (cache.k, cache.v)
        for i in range(c.num_layers):
            block = functools.partial(self._block, i, ctx=ctx)
            if policy is not None:  # the weights and ctx are closed over: only activations are rematerialised
                block = jax.checkpoint(block, policy=policy)
            x, cache_k, cache_v, r = block(x, cache_k, cache_v)
            reads.append(r)
        x = hooks.on_residual(c.num_layers, x)
        captured = {}
        if hooks.capture is not None and hooks.capture.residual:
            captured["residual"] = jnp.stack([r["residual"] for r in reads] + [hooks.capture.gather(x)])
        for name in ("heads", "patterns", "head_contrib", "attn_out", "mlp_out"):  # per block: (L, ...)
            if reads and name in reads[0]:
                captured[name] = jnp.stack([r[name] for r in reads])
        if logits_positions is not None:
            x = jnp.take_along_axis(x, jnp.asarray(logits_positions, jnp.int32)[..., None], axis=1)
        x = self.norm(x)
        x = constrain(x, ("batch", "seq", "embed"))  # hidden output / LM head input: batch over "data"
        new_cache = None
        if cache is not None:
            new_positions = jax.lax.dynamic_update_slice(cache.positions, jnp.where(mask_t, positions, 0),
                                                         (0, cache.index))
            new_cache = type(cache)(k=cache_k, v=cache_v, valid=new_valid, positions=new_positions,
                                    index=cache.index + T, lengths=cache.lengths + mask_t.sum(axis=1).astype(jnp.int32))
        if return_hidden:
            return Output(logits=None, cache=new_cache, captured=captured, hidden=x)
        logits = x @ (self.unembedding() if unembedding is None else unembedding.astype(x.dtype))
        return Output(logits=logits.astype(jnp.float32), cache=new_cache, captured=captured)

    def _input(self, tokens: jax.Array | None, inputs_embeds: jax.Array | None) -> jax.Array:
        c = self.config
        if (tokens is None) == (inputs_embeds is None):
            raise ValueError("tokens and inputs_embeds: expected exactly one of them")
        if inputs_embeds is None:
            tokens = jnp.asarray(tokens)
            if tokens.ndim != 2:
                raise ValueError(f"tokens shape {tokens.shape}: expected (B, T)")
            return self.embed(tokens)
        if inputs_embeds.ndim != 3 or inputs_embeds.shape[-1] != c.hidden_size:
            raise ValueError(f"inputs_embeds shape {inputs_embeds.shape}: expected (B, T, hidden_size={c.hidden_size})")
        return inputs_embeds.astype(dtype_of(c.dtype))


def _check_cache(cache: KVCache | DecodeCache, config: LMConfig, batch: int) -> None:
    if isinstance(cache, DecodeCache):
        B, KVH, S, Dh = batch, config.num_kv_heads, cache.size, config.head_dim
        layer = (B, KVH, S, Dh)
        want_k, want_v = [layer] * config.num_layers, [(B, KVH, Dh, S)] * config.num_layers
        if [k.shape for k in cache.k] != want_k or [v.shape for v in cache.v] != want_v:
            raise ValueError(f"decode cache k {[k.shape for k in cache.k]}: expected {config.num_layers} layers of "
                             f"(batch, kv_heads, slots, head_dim) = {layer} (a cache from another config or batch)")
        return
    want = (config.num_layers, batch, cache.size, config.num_kv_heads, config.head_dim)
    if cache.k.shape != want or cache.v.shape != want:
        raise ValueError(f"cache k {cache.k.shape}: expected (layers, batch, slots, kv_heads, head_dim) = {want} "
                         "(a cache from another config or batch)")


def _segment_positions(segment_ids: jax.Array) -> jax.Array:
    """Position within each contiguous segment. segment_ids: (B, T) -> (B, T) int32."""
    T = segment_ids.shape[1]
    idx = jnp.arange(T)[None, :]
    start = jnp.concatenate([jnp.ones_like(segment_ids[:, :1], bool), segment_ids[:, 1:] != segment_ids[:, :-1]],
                            axis=1)
    seg_start = jax.lax.cummax(jnp.where(start, idx, 0), axis=1)
    return (idx - seg_start).astype(jnp.int32)


# --- pure API ------------------------------------------------------------------------------------


def init(config: LMConfig, key: jax.Array) -> tuple[nnx.GraphDef, nnx.State]:
    """Random-init (normal(0.02) weights, zero biases, unit norms): returns (graphdef, params)."""
    model = Transformer(config, rngs=nnx.Rngs(params=key))
    return nnx.split(model, nnx.Param)


def abstract(config: LMConfig) -> tuple[nnx.GraphDef, nnx.State]:
    """(graphdef, params of ShapeDtypeStructs): no memory allocated (for loaders and checkpoints)."""
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(params=0)))
    return nnx.split(model, nnx.Param)


def apply(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array | None = None, **kwargs) -> Output:
    """Pure forward: `Transformer.__call__` on merged (graphdef, params). Jittable; see Transformer."""
    model = nnx.merge(graphdef, params, copy=True)
    return model(tokens, **kwargs)


def embed(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array) -> jax.Array:
    """Token embeddings (B, T, D) in the compute dtype: concatenate a prefix to them for `inputs_embeds`."""
    return nnx.merge(graphdef, params, copy=True).embed(jnp.asarray(tokens))

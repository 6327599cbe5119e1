"""PhaseFormer (Niu, Deng, Tong, ICLR 2026) and the two linear baselines on the same pipeline.

All three models are channel-independent: an input ``(B, L, C)`` becomes ``B*C`` univariate series that share
every weight, and the output is ``(B, H, C)``. Weights follow PyTorch's default initialisation (uniform
+-1/sqrt(fan_in) for linear layers) so that training dynamics match the released code; the routers and the
phase positional embedding use a truncated normal with std 0.02 as in the paper.

Dropout is explicit: ``__call__(x, key=None)`` is deterministic when ``key`` is None.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from forecasting.phaseformer import kernels

LN_EPS = 1e-5


def _uniform(key, shape, bound):
    return jax.random.uniform(key, shape, jnp.float32, -bound, bound)


class Linear(nnx.Module):
    """y = x @ w + b with PyTorch's default init (w: (in, out))."""

    def __init__(self, fan_in: int, fan_out: int, *, key: jax.Array, bias: bool = True):
        k1, k2 = jax.random.split(key)
        bound = 1.0 / math.sqrt(fan_in)
        self.w = nnx.Param(_uniform(k1, (fan_in, fan_out), bound))
        self.b = nnx.Param(_uniform(k2, (fan_out,), bound)) if bias else None

    def __call__(self, x):
        y = x @ self.w[...]
        return y if self.b is None else y + self.b[...]


class LayerNorm(nnx.Module):
    def __init__(self, dim: int):
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((dim,), jnp.float32))

    def __call__(self, x):
        return layer_norm(x, self.scale[...], self.bias[...])


def layer_norm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + LN_EPS) * scale + bias


def dropout(x, rate: float, key):
    if key is None or rate == 0.0:
        return x
    return jnp.where(kernels.keep_mask(key, x.shape, rate), x / (1.0 - rate), 0.0)


def revin_normalize(x: jax.Array, eps: float = 1e-5):
    """Non-affine RevIN over time: x (B, L, C) -> (x - mu) / sigma, sigma = sqrt(var + eps) (ddof 0)."""
    mu = x.mean(axis=1, keepdims=True)
    sigma = jnp.sqrt(x.var(axis=1, keepdims=True) + eps)
    return (x - mu) / sigma, (mu, sigma)


def revin_denormalize(y: jax.Array, stats) -> jax.Array:
    mu, sigma = stats
    return y * sigma + mu


def to_phase_tokens(x: jax.Array, period: int) -> jax.Array:
    """(N, L) -> (N, P, K): circular right-padding to K*P = ceil(L/P)*P, then token p = values at offset p."""
    n, length = x.shape
    k = -(-length // period)
    pad = k * period - length
    if pad:
        x = jnp.concatenate([x, jnp.tile(x, (1, -(-pad // length)))[:, :pad]], axis=1)  # torch 'circular'
    return x.reshape(n, k, period).transpose(0, 2, 1)


def from_phase_tokens(y: jax.Array, horizon: int) -> jax.Array:
    """(N, P, K_out) phase predictions -> (N, H): reassemble cycles (time = k*P + p) and truncate to H."""
    n = y.shape[0]
    return y.transpose(0, 2, 1).reshape(n, -1)[:, :horizon]


class MHA(nnx.Module):
    """Multi-head attention with four D x D projections (with bias), no mask."""

    def __init__(self, dim: int, num_heads: int, *, key: jax.Array):
        ks = jax.random.split(key, 4)
        self.q, self.k, self.v, self.o = (Linear(dim, dim, key=k) for k in ks)
        self.num_heads = num_heads

    def weights(self):
        return tuple(t[...] for lin in (self.q, self.k, self.v, self.o) for t in (lin.w, lin.b))


class RoutingLayer(nnx.Module):
    """Cross-phase routing (paper Sec. 3.3): routers aggregate from the phase tokens, then distribute back.

    Z <- Z + E_pos; B = MHA(U, Z, Z); Z' = MHA(Z, B, B); Z <- LN(Z + Drop(Z')); Z <- LN(Z + Drop(MLP(Z))).
    """

    def __init__(self, dim: int, num_routers: int, num_heads: int, period: int, *, dropout: float,
                 use_kernel: bool, kernel_block: int, kernel_interpret: bool, key: jax.Array):
        if dim % num_heads:
            raise ValueError(f"latent_dim={dim}: expected a multiple of num_heads={num_heads}")
        ks = jax.random.split(key, 6)
        self.pos = nnx.Param(0.02 * jax.random.truncated_normal(ks[0], -2.0, 2.0, (period, dim)))
        self.routers = nnx.Param(0.02 * jax.random.truncated_normal(ks[1], -2.0, 2.0, (num_routers, dim)))
        self.send = MHA(dim, num_heads, key=ks[2])
        self.receive = MHA(dim, num_heads, key=ks[3])
        self.norm1 = LayerNorm(dim)
        self.norm2 = LayerNorm(dim)
        self.fc1 = Linear(dim, 4 * dim, key=ks[4])
        self.fc2 = Linear(4 * dim, dim, key=ks[5])
        self.num_heads = num_heads
        self.dropout = dropout
        self.use_kernel = use_kernel
        self.kernel_block = kernel_block
        self.kernel_interpret = kernel_interpret

    def __call__(self, z: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """z: (N, P, D) -> (N, P, D)."""
        n, p, _ = z.shape
        r = self.routers[...].shape[0]
        z = z + self.pos[...]
        keys = jax.random.split(key, 4) if key is not None else (None,) * 4
        masks = None
        if key is not None and self.dropout > 0:
            masks = kernels.attention_dropout_masks(keys[0], n, self.num_heads, r, p, self.dropout)
        args = (z, self.routers[...], self.send.weights(), self.receive.weights(), masks)
        if self.use_kernel:
            routed = kernels.routing_attention(*args, num_heads=self.num_heads, block_n=self.kernel_block,
                                               interpret=self.kernel_interpret)
        else:
            routed = kernels.routing_attention_reference(*args, num_heads=self.num_heads)
        z = self.norm1(z + dropout(routed, self.dropout, keys[1]))
        h = self.fc2(jax.nn.gelu(self.fc1(z), approximate=False))
        return self.norm2(z + dropout(h, self.dropout, keys[2]))


class PhaseFormer(nnx.Module):
    """PhaseFormer: RevIN -> phase tokens -> shared embedding + LN -> routing layers (stacked through
    re-projection to the phase series) -> shared cycle predictor -> reassemble -> de-normalise."""

    def __init__(self, *, seq_len: int, pred_len: int, period: int = 24, latent_dim: int = 8, num_layers: int = 1,
                 num_routers: int = 8, num_heads: int = 4, dropout: float = 0.1, revin_eps: float = 1e-5,
                 use_kernel: bool = False, kernel_block: int = 0, kernel_interpret: bool = True,
                 key: jax.Array):
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers}: expected >= 1")
        self.seq_len, self.pred_len, self.period = seq_len, pred_len, period
        self.k_in = -(-seq_len // period)
        self.k_out = -(-pred_len // period)
        self.revin_eps = revin_eps
        ks = jax.random.split(key, 3 * num_layers + 2)
        self.embed = Linear(self.k_in, latent_dim, key=ks[0])
        self.embed_norm = LayerNorm(latent_dim)
        self.layers = nnx.List([
            RoutingLayer(latent_dim, num_routers, num_heads, period, dropout=dropout, use_kernel=use_kernel,
                         kernel_block=kernel_block, kernel_interpret=kernel_interpret, key=ks[1 + i])
            for i in range(num_layers)])
        # layer i > 0 re-embeds the previous layer's re-projection W_out z (D -> K) and adds it
        self.in_proj = nnx.List([Linear(self.k_in, latent_dim, key=ks[1 + num_layers + i])
                                 for i in range(num_layers - 1)])
        self.in_norm = nnx.List([LayerNorm(latent_dim) for _ in range(num_layers - 1)])
        self.out_proj = nnx.List([Linear(latent_dim, self.k_in, key=ks[2 * num_layers + i])
                                  for i in range(num_layers - 1)])
        self.predictor = Linear(latent_dim, self.k_out, key=ks[-1])

    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """x: (B, L, C) -> forecast (B, H, C)."""
        b, length, c = x.shape
        if length != self.seq_len:
            raise ValueError(f"input length {length}: expected seq_len={self.seq_len}")
        xn, stats = revin_normalize(x, self.revin_eps)
        tokens = to_phase_tokens(xn.transpose(0, 2, 1).reshape(b * c, length), self.period)  # (N, P, K)
        z = self.embed_norm(self.embed(tokens))
        keys = jax.random.split(key, len(self.layers)) if key is not None else [None] * len(self.layers)
        for i, layer in enumerate(self.layers):
            if i > 0:
                series = self.out_proj[i - 1](z)  # (N, P, K): the previous layer re-projected to phase series
                z = z + self.in_norm[i - 1](self.in_proj[i - 1](series))
            z = layer(z, keys[i])
        y = from_phase_tokens(self.predictor(z), self.pred_len)  # (N, H)
        y = y.reshape(b, c, self.pred_len).transpose(0, 2, 1)
        return revin_denormalize(y, stats)


class SparseTSF(nnx.Module):
    """SparseTSF (linear variant, Lin et al. 2024): subtract the window mean, sliding aggregation (a
    1+2*floor(w/2) conv, residual), downsample by period w, one shared linear map seg_x -> seg_y per phase."""

    def __init__(self, *, seq_len: int, pred_len: int, period: int, key: jax.Array):
        if seq_len % period:
            raise ValueError(f"seq_len={seq_len}: expected a multiple of the SparseTSF period {period}")
        self.seq_len, self.pred_len, self.period = seq_len, pred_len, period
        self.seg_x = seq_len // period
        self.seg_y = -(-pred_len // period)
        k1, k2 = jax.random.split(key)
        width = 1 + 2 * (period // 2)
        self.conv = nnx.Param(_uniform(k1, (width,), 1.0 / math.sqrt(width)))
        self.linear = Linear(self.seg_x, self.seg_y, key=k2, bias=False)

    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        b, length, c = x.shape
        mean = x.mean(axis=1, keepdims=True)
        s = (x - mean).transpose(0, 2, 1).reshape(b * c, length)
        half = self.period // 2
        padded = jnp.pad(s, ((0, 0), (half, half)))
        w = self.conv[...]
        agg = sum(w[j] * padded[:, j:j + length] for j in range(w.shape[0]))  # cross-correlation, zero padding
        s = agg + s
        seg = s.reshape(b * c, self.seg_x, self.period).transpose(0, 2, 1)  # (N, w, seg_x)
        y = self.linear(seg).transpose(0, 2, 1).reshape(b * c, -1)[:, :self.pred_len]
        return y.reshape(b, c, self.pred_len).transpose(0, 2, 1) + mean


class DLinear(nnx.Module):
    """DLinear (Zeng et al. 2023), shared across channels: moving-average trend (replicate padding) and the
    seasonal remainder each mapped L -> H by a linear layer, summed."""

    def __init__(self, *, seq_len: int, pred_len: int, moving_avg: int = 25, key: jax.Array):
        if moving_avg % 2 == 0:
            raise ValueError(f"moving_avg={moving_avg}: expected an odd kernel size")
        self.seq_len, self.pred_len, self.moving_avg = seq_len, pred_len, moving_avg
        k1, k2 = jax.random.split(key)
        self.seasonal = Linear(seq_len, pred_len, key=k1)
        self.trend = Linear(seq_len, pred_len, key=k2)

    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        half = (self.moving_avg - 1) // 2
        padded = jnp.concatenate([jnp.repeat(x[:, :1], half, axis=1), x, jnp.repeat(x[:, -1:], half, axis=1)], 1)
        length = x.shape[1]
        trend = sum(padded[:, j:j + length] for j in range(self.moving_avg)) / self.moving_avg
        seasonal = x - trend
        out = self.seasonal(seasonal.transpose(0, 2, 1)) + self.trend(trend.transpose(0, 2, 1))
        return out.transpose(0, 2, 1)


def count_params(model: nnx.Module) -> int:
    return sum(int(p.size) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))

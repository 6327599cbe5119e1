"""The EG3D-family generator and discriminator, written for BalanceHead's conditioning study.

Generator: mapping network MLP([z, embed(c_G)]) -> w; style-modulated conv synthesis from a learned constant
to a tri-plane (3 x R x R x C); a decoder MLP from the summed plane features to (density, features); volume
rendering along camera rays with stratified + importance sampling (`volume_render`); a small
super-resolution stage (modulated convs on the upsampled feature image plus the upsampled raw RGB).
Discriminator: the PanoHead-style dual/mask discriminator on (super-resolved RGB, upsampled raw RGB,
upsampled mask), conditioned by a projection head on an embedding of c_D.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from .configs import ModelConfig
from .render import BOUND_RADIUS, camera_rays, ray_sphere

CAM_DIM = 4  # camera condition: (sin yaw, cos yaw, sin pitch, cos pitch); EG3D uses 25 numbers


def camera_code(yaw: jax.Array, pitch: jax.Array) -> jax.Array:
    """(..., 4) camera condition from yaw and pitch (radians)."""
    return jnp.stack([jnp.sin(yaw), jnp.cos(yaw), jnp.sin(pitch), jnp.cos(pitch)], -1)


def lrelu(x):
    return jax.nn.leaky_relu(x, 0.2) * math.sqrt(2.0)


# ---------------------------------------------------------------------------------------------- rendering


def sample_triplane(planes: jax.Array, points: jax.Array) -> jax.Array:
    """Mean of bilinear samples of the xy, xz and zy planes. planes (3, R, R, C), points (N, 3) in [-1, 1]^3.

    Plane p is indexed [row, col]; row follows the second coordinate of its pair, col the first; texel (i, j)
    has its centre at ((j + 0.5) / R * 2 - 1, (i + 0.5) / R * 2 - 1); samples outside are clamped to the edge.
    """
    r = planes.shape[1]
    pairs = jnp.stack([points[:, [0, 1]], points[:, [0, 2]], points[:, [2, 1]]])  # (3, N, 2) as (col, row)
    pix = (pairs + 1.0) / 2.0 * r - 0.5
    pix = jnp.clip(pix, 0.0, r - 1.0)
    lo = jnp.clip(jnp.floor(pix), 0, r - 2).astype(jnp.int32)
    frac = pix - lo
    c0, r0 = lo[..., 0], lo[..., 1]
    fc, fr = frac[..., 0:1], frac[..., 1:2]

    def gather(p, rr, cc):  # per plane
        return p[rr, cc]

    g = jax.vmap(gather)
    v00, v01 = g(planes, r0, c0), g(planes, r0, c0 + 1)
    v10, v11 = g(planes, r0 + 1, c0), g(planes, r0 + 1, c0 + 1)
    out = (v00 * (1 - fc) + v01 * fc) * (1 - fr) + (v10 * (1 - fc) + v11 * fc) * fr
    return out.mean(0)


def composite(sigma: jax.Array, feats: jax.Array, t: jax.Array, far: jax.Array):
    """Alpha compositing along rays. sigma (..., S), feats (..., S, F), sorted t (..., S), far (...,).

    Sample i stands for the interval [t_i, t_{i+1}] (the last one ends at `far`): alpha_i = 1 - exp(-sigma_i
    delta_i), weights w_i = alpha_i prod_{j<i} (1 - alpha_j). Returns (features (..., F), opacity, depth, w).
    """
    delta = jnp.concatenate([t[..., 1:] - t[..., :-1], far[..., None] - t[..., -1:]], -1)
    tau = sigma * jnp.maximum(delta, 0.0)
    alpha = 1.0 - jnp.exp(-tau)
    trans = jnp.exp(-(jnp.cumsum(tau, -1) - tau))
    w = alpha * trans
    return jnp.sum(w[..., None] * feats, -2), jnp.sum(w, -1), jnp.sum(w * t, -1), w


def sample_pdf(edges: jax.Array, weights: jax.Array, u: jax.Array) -> jax.Array:
    """Inverse-CDF samples from the piecewise-constant density `weights` (..., S) on `edges` (..., S + 1).

    u (..., K) in [0, 1); a small floor keeps empty rays sampled uniformly.
    """
    w = weights + 1e-5
    pdf = w / jnp.sum(w, -1, keepdims=True)
    cdf = jnp.concatenate([jnp.zeros_like(pdf[..., :1]), jnp.cumsum(pdf, -1)], -1)
    cdf = cdf.at[..., -1].set(1.0)
    idx = jnp.sum(u[..., :, None] >= cdf[..., None, :], -1) - 1  # searchsorted(cdf, u, 'right') - 1
    idx = jnp.clip(idx, 0, w.shape[-1] - 1)
    c_lo = jnp.take_along_axis(cdf, idx, -1)
    p = jnp.take_along_axis(pdf, idx, -1)
    e_lo = jnp.take_along_axis(edges, idx, -1)
    e_hi = jnp.take_along_axis(edges, idx + 1, -1)
    return e_lo + jnp.clip((u - c_lo) / jnp.maximum(p, 1e-8), 0.0, 1.0) * (e_hi - e_lo)


def volume_render(field, origins: jax.Array, dirs: jax.Array, key: jax.Array | None, n_coarse: int, n_fine: int,
                  bound: float = BOUND_RADIUS):
    """Render rays (..., 3) through `field(points (..., S, 3)) -> (sigma (..., S), feats (..., S, F))`.

    Stratified sampling of `n_coarse` depths in the ray's chord through the bounding sphere (jittered when
    `key` is given, else bin starts), then `n_fine` importance samples from the coarse weights (positions
    without gradient, as in NeRF/EG3D), merged and sorted. Rays that miss the sphere render as empty.
    Returns dict(features, opacity, depth).
    """
    near, far, hit = ray_sphere(origins, dirs, bound)
    far = jnp.where(hit, far, near)
    span = (far - near)[..., None]
    bins = jnp.arange(n_coarse, dtype=jnp.float32) / n_coarse
    if key is not None:
        k1, k2 = jax.random.split(key)
        jitter = jax.random.uniform(k1, near.shape + (n_coarse,)) / n_coarse
    else:
        k2, jitter = None, 0.0
    t_c = near[..., None] + span * (bins + jitter)
    pts = origins[..., None, :] + t_c[..., None] * dirs[..., None, :]
    sigma, feats = field(pts)
    t = t_c
    if n_fine > 0:
        _, _, _, w_c = composite(sigma, feats, t_c, far)
        edges = jnp.concatenate([t_c, far[..., None]], -1)
        base = (jnp.arange(n_fine, dtype=jnp.float32) + 0.5) / n_fine
        u = base if k2 is None else (jnp.arange(n_fine) + jax.random.uniform(k2, near.shape + (n_fine,))) / n_fine
        u = jnp.broadcast_to(u, near.shape + (n_fine,))
        t_f = jax.lax.stop_gradient(sample_pdf(jax.lax.stop_gradient(edges), jax.lax.stop_gradient(w_c), u))
        s_f, f_f = field(origins[..., None, :] + t_f[..., None] * dirs[..., None, :])
        t_all = jnp.concatenate([t_c, t_f], -1)
        order = jnp.argsort(t_all, -1)
        t = jnp.take_along_axis(t_all, order, -1)
        sigma = jnp.take_along_axis(jnp.concatenate([sigma, s_f], -1), order, -1)
        feats = jnp.take_along_axis(jnp.concatenate([feats, f_f], -2), order[..., None], -2)
    out, opacity, depth, _ = composite(sigma, feats, t, far)
    hitf = hit.astype(out.dtype)
    return {"features": out * hitf[..., None], "opacity": opacity * hitf, "depth": depth * hitf}


# ---------------------------------------------------------------------------------------------- layers


class ModConv(nnx.Module):
    """StyleGAN2 modulated 3x3 (or 1x1) convolution with demodulation, equalised learning rate."""

    def __init__(self, cin: int, cout: int, w_dim: int, k: int = 3, *, demod: bool = True, rngs: nnx.Rngs):
        self.k, self.demod = k, demod
        self.weight = nnx.Param(jax.random.normal(rngs.params(), (k, k, cin, cout)))
        self.bias = nnx.Param(jnp.zeros((cout,)))
        self.style = nnx.Linear(w_dim, cin, rngs=rngs, bias_init=nnx.initializers.ones)

    def __call__(self, x: jax.Array, w: jax.Array) -> jax.Array:
        s = self.style(w)  # (B, cin)
        wt = self.weight[...] / math.sqrt(self.k * self.k * self.weight.shape[2])
        y = jax.lax.conv_general_dilated(x * s[:, None, None, :], wt, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        if self.demod:  # modulated conv == conv of the modulated input; demodulation is per (sample, cout)
            d = jax.lax.rsqrt(jnp.einsum("hwio,bi->bo", wt * wt, s * s) + 1e-8)
            y = y * d[:, None, None, :]
        return y + self.bias[...]


class MLP(nnx.Module):
    def __init__(self, sizes: list[int], *, rngs: nnx.Rngs, final_act: bool = False):
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.final_act = final_act

    def __call__(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1 or self.final_act:
                x = lrelu(x)
        return x


def upsample(x: jax.Array, factor: int) -> jax.Array:
    b, h, w, c = x.shape
    return jax.image.resize(x, (b, h * factor, w * factor, c), "bilinear")


# ---------------------------------------------------------------------------------------------- networks


class Generator(nnx.Module):
    """G(z, c_G, camera) -> dict(image (B, res, res, 3) in ~[-1, 1], raw (B, r, r, 3), mask (B, r, r, 1))."""

    def __init__(self, cfg: ModelConfig, cond_dim: int, out_res: int, *, rngs: nnx.Rngs):
        self.cfg, self.out_res = cfg, out_res
        self.cond = nnx.Linear(cond_dim, cfg.cond_embed, rngs=rngs)
        self.mapping = MLP([cfg.z_dim + cfg.cond_embed] + [cfg.w_dim] * cfg.map_layers, rngs=rngs, final_act=True)
        c = cfg.syn_channels
        self.const = nnx.Param(jax.random.normal(rngs.params(), (4, 4, c)))
        n_up = int(math.log2(cfg.plane_res // 4))
        self.syn = nnx.List([ModConv(c, c, cfg.w_dim, rngs=rngs) for _ in range(n_up + 1)])
        self.to_planes = ModConv(c, 3 * cfg.plane_channels, cfg.w_dim, k=1, demod=False, rngs=rngs)
        self.decoder = MLP([cfg.plane_channels, cfg.decoder_hidden, 1 + cfg.feat_dim], rngs=rngs)
        s = cfg.sr_channels
        self.sr = nnx.List([ModConv(cfg.feat_dim, s, cfg.w_dim, rngs=rngs), ModConv(s, s, cfg.w_dim, rngs=rngs)])
        self.to_rgb = ModConv(s, 3, cfg.w_dim, k=1, demod=False, rngs=rngs)

    def map(self, z: jax.Array, cond: jax.Array) -> jax.Array:
        """Mapping network: w = MLP([normalize(z), embed(c)])."""
        z = z * jax.lax.rsqrt(jnp.mean(z * z, -1, keepdims=True) + 1e-8)
        e = self.cond(cond)
        e = e * jax.lax.rsqrt(jnp.mean(e * e, -1, keepdims=True) + 1e-8)
        return self.mapping(jnp.concatenate([z, e], -1))

    def planes(self, w: jax.Array) -> jax.Array:
        """Tri-planes (B, 3, R, R, C) from w (B, w_dim)."""
        x = jnp.broadcast_to(self.const[...], (w.shape[0],) + self.const.shape)
        for i, layer in enumerate(self.syn):
            if i > 0:
                x = upsample(x, 2)
            x = lrelu(layer(x, w))
        p = self.to_planes(x, w)
        b, r = p.shape[0], p.shape[1]
        return p.reshape(b, r, r, 3, -1).transpose(0, 3, 1, 2, 4)

    def field(self, planes: jax.Array, points: jax.Array):
        """Decoder on one head: planes (3, R, R, C), points (..., 3) -> (sigma (...), features (..., F))."""
        flat = points.reshape(-1, 3) / BOUND_RADIUS
        h = self.decoder(sample_triplane(planes, flat))
        sigma = jax.nn.softplus(h[:, 0] - 1.0)
        feats = jax.nn.sigmoid(h[:, 1:]) * (1 + 2e-3) - 1e-3
        return sigma.reshape(points.shape[:-1]), feats.reshape(points.shape[:-1] + (-1,))

    def __call__(self, z, cond, yaw, pitch, key: jax.Array | None = None) -> dict:
        return self.synthesize(self.map(z, cond), yaw, pitch, key)

    def synthesize(self, w, yaw, pitch, key: jax.Array | None = None) -> dict:
        """Render w (B, w_dim) from cameras (yaw, pitch) (B,): the generator after the mapping network (the
        space GAN inversion optimises)."""
        cfg = self.cfg
        planes = self.planes(w)
        keys = jax.random.split(key, w.shape[0]) if key is not None else None

        def one(p, yw, pt, k):
            o, d = camera_rays(yw, pt, cfg.raw_res)
            return volume_render(lambda x: self.field(p, x), o, d, k, cfg.n_coarse, cfg.n_fine)

        if keys is None:
            r = jax.vmap(lambda p, yw, pt: one(p, yw, pt, None))(planes, yaw, pitch)
        else:
            r = jax.vmap(one)(planes, yaw, pitch, keys)
        feat = r["features"]  # (B, r, r, F) in [0, 1], black background
        raw = feat[..., :3] * 2 - 1
        x = upsample(feat, self.out_res // cfg.raw_res)
        for layer in self.sr:
            x = lrelu(layer(x, w))
        image = self.to_rgb(x, w) + upsample(raw, self.out_res // cfg.raw_res)
        return {"image": image, "raw": raw, "mask": r["opacity"][..., None], "depth": r["depth"]}


def minibatch_std(x: jax.Array, group: int) -> jax.Array:
    """StyleGAN2's minibatch-stddev feature (B, H, W, 1): the std of each feature over a group of `group`
    examples (consecutive in the batch), averaged over features and positions, broadcast to every member of the
    group. A collapsed generator's batch has a std near 0 where real batches do not, so D can tell them apart."""
    b, h, w, c = x.shape
    g = min(group, b)
    if b % g:
        raise ValueError(f"batch of {b}: the minibatch-stddev group {g} must divide it")
    y = x.reshape(b // g, g, h, w, c)
    s = jnp.sqrt(jnp.var(y, axis=1) + 1e-8).mean((1, 2, 3))  # (B / g,)
    return jnp.broadcast_to(jnp.repeat(s, g)[:, None, None, None], (b, h, w, 1))


class Discriminator(nnx.Module):
    """Dual discriminator on concat(image, upsampled raw, upsampled mask) with a projection condition head; the
    last 4x4 features carry one more channel, the minibatch stddev, scaled by `mbstd` (0: switched off, the
    network without it)."""

    def __init__(self, cfg: ModelConfig, cond_dim: int, res: int, *, rngs: nnx.Rngs):
        c = cfg.d_channels
        n_down = int(math.log2(res // 4))
        chans = [7] + [min(c * 2 ** max(i - 1, 0), 4 * c) for i in range(n_down + 1)]
        self.convs = nnx.List([nnx.Conv(a, b, (3, 3), rngs=rngs) for a, b in zip(chans[:-1], chans[1:])])
        self.fc = nnx.Linear(4 * 4 * (chans[-1] + 1), cfg.d_embed, rngs=rngs)
        self.out = nnx.Linear(cfg.d_embed, 1, rngs=rngs)
        self.cmap = MLP([cond_dim, cfg.d_embed, cfg.d_embed], rngs=rngs)
        self.res, self.group = res, cfg.mbstd_group

    def __call__(self, image, raw, mask, cond, mbstd: jax.Array | float = 0.0) -> jax.Array:
        f = self.res // raw.shape[1]
        x = jnp.concatenate([image, upsample(raw, f), upsample(mask, f) * 2 - 1], -1)
        for i, conv in enumerate(self.convs):
            x = lrelu(conv(x))
            if i > 0:
                b, h, w, c = x.shape
                x = x.reshape(b, h // 2, 2, w // 2, 2, c).mean((2, 4))
        x = jnp.concatenate([x, minibatch_std(x, self.group) * mbstd], -1)
        h = lrelu(self.fc(x.reshape(x.shape[0], -1)))
        e = self.cmap(cond)
        return self.out(h)[:, 0] + jnp.sum(h * e, -1) / math.sqrt(h.shape[-1])


class Encoder(nnx.Module):
    """Small conv encoder (the semantic stand-in and the metric feature network): image -> (embedding, head)."""

    def __init__(self, res: int, channels: int, embed: int, n_out: int, *, rngs: nnx.Rngs):
        n_down = int(math.log2(res // 4))
        chans = [3] + [channels * min(2**i, 4) for i in range(n_down)]
        self.convs = nnx.List([nnx.Conv(a, b, (3, 3), strides=2, rngs=rngs) for a, b in zip(chans[:-1], chans[1:])])
        self.fc = nnx.Linear(16 * chans[-1], embed, rngs=rngs)
        self.head = nnx.Linear(embed, n_out, rngs=rngs)

    def embed(self, x: jax.Array) -> jax.Array:
        for conv in self.convs:
            x = jax.nn.relu(conv(x))
        return jnp.tanh(self.fc(x.reshape(x.shape[0], -1)))

    def __call__(self, x):
        e = self.embed(x)
        return e, self.head(e)

"""The two HeadsLite datasets and the frozen encoders trained once on renders.

- imbalanced single-view ("in the wild", FFHQ-like): one view per identity, ~70 % of yaws within +-45 deg,
  ~10 % from the back, the rest from the side;
- balanced multi-view (BalanceHead360-like): `views_per_id` views per identity, stratified over 360 deg.
Both hold the same number of images. Each image carries its camera (yaw, pitch) and its identity's semantic
condition: the embedding of the identity's *frontal* render by the semantic encoder, a small conv network
trained once on frontal renders to regress identity parameters. It stands in for the CLIP image embedding
of the paper (no CLIP weights here); like CLIP of a frontal photo, it cannot see the back-only cue.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core.config import BadInputError

from .configs import DataConfig, EncoderConfig
from .model import Encoder
from .render import NUM_PARAMS, chunked, render_batch


def sample_yaws(key: jax.Array, n: int, regime: str, cfg: DataConfig) -> jax.Array:
    """Yaws (n,) in [-pi, pi): the imbalanced mixture or, for `balanced`, one stratified set per identity."""
    k1, k2, k3 = jax.random.split(key, 3)
    if regime == "imbalanced":
        u = jax.random.uniform(k1, (n,))
        sign = jnp.where(jax.random.bernoulli(k2, 0.5, (n,)), 1.0, -1.0)
        a = jax.random.uniform(k3, (n,))
        front = a * math.pi / 4
        side = math.pi / 4 + a * math.pi / 2
        back = 3 * math.pi / 4 + a * math.pi / 4
        mag = jnp.where(u < cfg.frontal_fraction, front, jnp.where(u < 1 - cfg.back_fraction, side, back))
        return jnp.clip(sign * mag, -math.pi, math.pi - 1e-6)
    if regime == "balanced":
        v = cfg.views_per_id
        k = jnp.arange(n) % v
        return -math.pi + 2 * math.pi * (k + jax.random.uniform(k1, (n,))) / v
    raise BadInputError(f"regime={regime!r}: expected 'imbalanced' or 'balanced'")


def make_dataset(cfg: DataConfig, regime: str, seed_offset: int = 0) -> dict[str, np.ndarray]:
    """Render one regime's dataset: images uint8 (N, res, res, 3), masks uint8 (N, res, res), yaw, pitch (N,),
    ident (N,) index into params (n_id, NUM_PARAMS)."""
    key = jax.random.fold_in(jax.random.key(cfg.seed), 1000 * seed_offset + (0 if regime == "imbalanced" else 1))
    kp, ky, kpi = jax.random.split(key, 3)
    n = cfg.n_images
    n_id = n if regime == "imbalanced" else n // cfg.views_per_id
    params = jax.random.uniform(kp, (n_id, NUM_PARAMS))
    ident = np.arange(n) // (1 if regime == "imbalanced" else cfg.views_per_id)
    yaw = sample_yaws(ky, n, regime, cfg)
    pitch = jnp.deg2rad(cfg.pitch_deg) * jax.random.uniform(kpi, (n,), minval=-1.0, maxval=1.0)
    rgb, mask = render_batch(params[ident], yaw, pitch, res=cfg.res)
    return {"images": np.asarray(jnp.round(rgb * 255)).astype(np.uint8),
            "masks": np.asarray(jnp.round(mask * 255)).astype(np.uint8),
            "yaw": np.asarray(yaw, np.float32), "pitch": np.asarray(pitch, np.float32),
            "ident": ident.astype(np.int32), "params": np.asarray(params)}


def to_float(images: jax.Array) -> jax.Array:
    """uint8 images -> float in [-1, 1]."""
    return images.astype(jnp.float32) / 127.5 - 1.0


# ---------------------------------------------------------------------------------------------- encoders


def train_encoder(images: np.ndarray, targets: np.ndarray, *, res: int, embed: int, cfg: EncoderConfig,
                  seed: int) -> tuple[nnx.GraphDef, nnx.State, dict]:
    """Fit `Encoder` to regress `targets` from uint8 `images` (MSE, Adam, `cfg.steps` steps, one lax.scan)."""
    model = Encoder(res, cfg.channels, embed, targets.shape[-1], rngs=nnx.Rngs(seed))
    graphdef, params = nnx.split(model, nnx.Param)
    tx = optax.adam(cfg.lr)
    x, y = jnp.asarray(images), jnp.asarray(targets, jnp.float32)
    n = x.shape[0]

    def loss_fn(p, xb, yb):
        _, pred = nnx.merge(graphdef, p)(to_float(xb))
        return jnp.mean((pred - yb) ** 2)

    @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0} if cfg.fast_compile else None)
    def fit(p, key, x, y):
        def body(carry, k):
            p, o = carry
            idx = jax.random.randint(k, (min(cfg.batch_size, n),), 0, n)
            loss, g = jax.value_and_grad(loss_fn)(p, x[idx], y[idx])
            u, o = tx.update(g, o, p)
            return (optax.apply_updates(p, u), o), loss
        (p, _), losses = jax.lax.scan(body, (p, tx.init(p)), jax.random.split(key, cfg.steps))
        return p, losses

    params, losses = fit(params, jax.random.key(seed), x, y)
    losses = np.asarray(losses)
    return graphdef, params, {"first_loss": float(losses[:10].mean()), "final_loss": float(losses[-20:].mean())}


def make_embed_fn(graphdef, params, *, normalize: bool, chunk: int = 128):
    """uint8-or-float images (N, H, W, 3) -> embeddings (L2-normalised for the semantic encoder, as CLIP's),
    jitted in fixed-size chunks."""

    @jax.jit
    def embed(images):
        x = to_float(images) if images.dtype == jnp.uint8 else images
        e = nnx.merge(graphdef, params).embed(x)
        return e / jnp.linalg.norm(e, axis=-1, keepdims=True) if normalize else e

    return chunked(embed, chunk)


def make_predict_fn(graphdef, params, chunk: int = 128):
    @jax.jit
    def predict(images):
        x = to_float(images) if images.dtype == jnp.uint8 else images
        return nnx.merge(graphdef, params)(x)[1]
    return chunked(predict, chunk)


def train_semantic_encoder(data_cfg: DataConfig, enc_cfg: EncoderConfig):
    """The CLIP stand-in: trained once on frontal renders (yaw 0, pitch 0) of fresh identities to regress their
    parameters; returns (embed_fn, info). Frozen afterwards."""
    key = jax.random.fold_in(jax.random.key(data_cfg.seed), 77)
    params = jax.random.uniform(key, (enc_cfg.n_train, NUM_PARAMS))
    zeros = jnp.zeros((enc_cfg.n_train,))
    rgb, _ = render_batch(params, zeros, zeros, res=data_cfg.res)
    images = np.asarray(jnp.round(rgb * 255)).astype(np.uint8)
    graphdef, p, info = train_encoder(images, np.asarray(params), res=data_cfg.res, embed=enc_cfg.sem_dim,
                                      cfg=enc_cfg, seed=data_cfg.seed + 1)
    return make_embed_fn(graphdef, p, normalize=True), info


def frontal_semantics(embed_fn, params: np.ndarray, res: int) -> np.ndarray:
    """Semantic condition (n_id, sem_dim) of each identity: the embedding of its canonical frontal render."""
    zeros = jnp.zeros((params.shape[0],))
    rgb, _ = render_batch(jnp.asarray(params), zeros, zeros, res=res)
    return np.asarray(embed_fn(jnp.round(rgb * 255).astype(jnp.uint8)))


def prepare(data_cfg: DataConfig, enc_cfg: EncoderConfig, regimes=("imbalanced", "balanced")) -> dict:
    """Both datasets with their per-image semantic conditions, and the semantic encoder."""
    embed_fn, info = train_semantic_encoder(data_cfg, enc_cfg)
    out = {"semantic_encoder": embed_fn, "semantic_info": info}
    for regime in regimes:
        d = make_dataset(data_cfg, regime)
        sem_id = frontal_semantics(embed_fn, d["params"], data_cfg.res)
        d["sem"] = sem_id[d["ident"]]
        out[regime] = d
    return out

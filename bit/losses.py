"""Pure loss functions over the encoder's split state: span masking, masked Poisson-NLL (or MSE)
reconstruction for self-supervised pretraining, and phoneme CTC (`optax.ctc_loss`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from bit.configs import Config
from bit.sessions import pretrain_feature_mask


def span_mask(key: jax.Array, batch: int, num_patches: int, ratio: float, max_span: int) -> jax.Array:
    """Boolean (B, P) mask made of spans of 1..max_span patches; each patch starts a span with probability q,
    q chosen so the expected masked fraction is `ratio` (1 - (1-q)^E[len] = ratio)."""
    if ratio <= 0.0:
        return jnp.zeros((batch, num_patches), bool)
    mean_len = (1 + max_span) / 2
    q = 1.0 - (1.0 - ratio) ** (1.0 / mean_len)
    k1, k2 = jax.random.split(key)
    starts = jax.random.bernoulli(k1, q, (batch, num_patches))
    lengths = jax.random.randint(k2, (batch, num_patches), 1, max_span + 1)
    pos = jnp.arange(num_patches)
    offset = pos[None, None, :] - pos[None, :, None]  # (1, start, position)
    covered = starts[:, :, None] & (offset >= 0) & (offset < lengths[:, :, None])
    return covered.any(1)


def augment(x: jax.Array, key: jax.Array, noise_sd: float, offset_sd: float) -> jax.Array:
    """Training noise: white noise per bin and a constant per-channel offset per trial."""
    k1, k2 = jax.random.split(key)
    return (x + noise_sd * jax.random.normal(k1, x.shape)
            + offset_sd * jax.random.normal(k2, (x.shape[0], 1, x.shape[2])))


def poisson_nll(log_rate: jax.Array, counts: jax.Array) -> jax.Array:
    """Elementwise Poisson NLL without the log(y!) constant: exp(r) - y r."""
    return jnp.exp(log_rate) - counts * log_rate


def make_pretrain_loss(config: Config, graphdef: nnx.GraphDef, channel_mask: jax.Array):
    """loss_fn(params, batch, key): masked-patch reconstruction over patches that are masked and valid.
    `channel_mask` (S, C) marks the count channels each session really has. With train.pretrain_features="tx"
    the encoder sees only the threshold-crossing columns (the rest zeroed) and, for the MSE, reconstructs only
    them; the Poisson target is the tx1 counts either way."""
    m, t = config.model, config.train
    feature_mask = jnp.asarray(pretrain_feature_mask(config))

    def loss_fn(params, batch, key):
        model = nnx.merge(graphdef, params)
        ka, km, kd = jax.random.split(key, 3)
        x = augment(batch["x"], ka, t.noise_sd, t.offset_sd) * feature_mask
        b, tb, _ = x.shape
        p = tb // m.patch
        mask = span_mask(km, b, p, m.mask_ratio, m.max_span)
        h = model.encode(x, batch["session"], batch["length"], mask, kd, batch["dataset"])
        bins_valid = jnp.arange(tb)[None] < batch["length"][:, None]
        sel = jnp.repeat(mask, m.patch, axis=1) & bins_valid  # (B, T)
        pred = model.reconstruct(h, batch["dataset"])
        if t.recon_loss == "poisson":
            elem = poisson_nll(pred, batch["counts"])
            w = sel[..., None] * channel_mask[batch["session"]][:, None, :]
        else:  # features (e.g. the normalised '25 release); the read-out was built with num_counts = F
            elem = (pred - batch["x"]) ** 2
            w = sel[..., None] * feature_mask
        loss = (elem * w).sum() / jnp.maximum(w.sum(), 1.0)
        return loss, {"masked_fraction": (mask & (jnp.arange(p)[None] * m.patch < batch["length"][:, None])).mean()}

    return loss_fn


def ctc_min_frames(labels: jax.Array, label_length: jax.Array) -> jax.Array:
    """(B,) the fewest CTC frames that can emit each label sequence: its length plus one blank between every pair
    of equal neighbours. labels (B, L), label_length (B,)."""
    valid = jnp.arange(labels.shape[1] - 1)[None] < (label_length[:, None] - 1)
    repeats = ((labels[:, 1:] == labels[:, :-1]) & valid).sum(1)
    return label_length + repeats


def ctc_loss(model, batch, key: jax.Array | None, config: Config, *, train: bool) -> tuple[jax.Array, jax.Array]:
    """Mean per-sentence CTC loss normalised by label length, and the log-probs (B, frames, 41). With
    train.ctc_zero_infinity (torch's `zero_infinity=True`) a trial with fewer frames than `ctc_min_frames` adds 0
    loss and 0 gradient; without it, optax's ~1e5 stand-in for an infinite loss."""
    m, t = config.model, config.train
    x = batch["x"]
    mask = None
    kd = None
    if train:
        ka, km, kd = jax.random.split(key, 3)
        x = augment(x, ka, t.noise_sd, t.offset_sd)
        if m.finetune_masking:
            mask = span_mask(km, x.shape[0], x.shape[1] // m.patch, m.mask_ratio, m.max_span)
    h = model.encode(x, batch["session"], batch["length"], mask, kd, batch["dataset"])
    logp = model.ctc_logits(h)
    pad = model.frame_paddings(batch["length"], h.shape[1])
    labels = batch["labels"]
    label_pad = (jnp.arange(labels.shape[1])[None] >= batch["label_length"][:, None]).astype(jnp.float32)
    per = optax.ctc_loss(logp, pad, labels, label_pad, blank_id=0)
    if t.ctc_zero_infinity:
        frames = (1.0 - pad).sum(1)
        per = jnp.where(frames >= ctc_min_frames(labels, batch["label_length"]), per, 0.0)
    return (per / jnp.maximum(batch["label_length"], 1)).mean(), logp


def make_ctc_loss(config: Config, graphdef: nnx.GraphDef):
    def loss_fn(params, batch, key):
        loss, _ = ctc_loss(nnx.merge(graphdef, params), batch, key, config, train=True)
        return loss, {}

    return loss_fn

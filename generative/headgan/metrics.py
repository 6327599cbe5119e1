"""Evaluation: FD-random, FD per view bin under the fixed-frontal-condition protocol, FD-front, diversity and
cross-view identity consistency.

FD is the Frechet distance between Gaussian fits of features from a small encoder that the project trains
once on HeadsLite renders from *all* views (it regresses identity parameters and the view; 64-d features
stand in for Inception's 2048-d). Reference images are fresh renders of unseen identities.

Protocols (c_con: the generator's condition, c_ren: the render camera):
- FD-random: c_con from the arm's training data (its camera and semantic), c_ren drawn independently and
  uniformly over 360 deg yaw and the pitch band; reference: uniform-view renders.
- FD-{front, side, back}: the fixed-frontal-condition protocol (PanoHead's `back` mode): a camera-conditioned
  G gets the frontal camera (yaw 0, pitch 0), semantics come from the data; c_ren in the bin
  (|yaw| <= 45, 45..135, >= 135 deg); reference: renders in that bin.
- FD-front: the standard protocol on frontal views: c_ren in the front bin and c_con = c_ren for the camera.
- diversity_<bin>: mean pairwise feature distance of generated images in the bin (fixed-frontal protocol).
- xview_spread: for heads rendered at 8 yaws, the spread of the view-invariant attributes the feature
  encoder predicts (skull shape, skin and hair colour) across a head's views, over their spread across heads
  (lower = more coherent heads; real renders give the floor).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from .configs import MODES, Config, parse_arm
from .data import make_embed_fn, make_predict_fn, train_encoder
from .model import camera_code
from .render import NUM_PARAMS, VIEW_INVARIANT, render_batch

BINS = {"front": (0.0, math.pi / 4), "side": (math.pi / 4, 3 * math.pi / 4), "back": (3 * math.pi / 4, math.pi)}


def frechet_distance(mu1, cov1, mu2, cov2) -> float:
    """||mu1 - mu2||^2 + tr(C1 + C2 - 2 (C1 C2)^(1/2))."""
    mu1, mu2, cov1, cov2 = (np.asarray(a, np.float64) for a in (mu1, mu2, cov1, cov2))
    covmean = scipy.linalg.sqrtm(cov1 @ cov2)
    if not np.all(np.isfinite(covmean)):
        eps = 1e-6 * np.eye(cov1.shape[0])
        covmean = scipy.linalg.sqrtm((cov1 + eps) @ (cov2 + eps))
    covmean = np.real(covmean)
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(cov1) + np.trace(cov2) - 2 * np.trace(covmean))


def gaussian_fit(feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    f = np.asarray(feats, np.float64)
    return f.mean(0), np.cov(f, rowvar=False)


def mean_pairwise_distance(feats: np.ndarray) -> float:
    f = np.asarray(feats, np.float64)
    d = np.sqrt(np.maximum(((f[:, None] - f[None]) ** 2).sum(-1), 0.0))
    n = len(f)
    return float(d.sum() / (n * (n - 1)))


def cross_view_spread(attrs: np.ndarray) -> float:
    """attrs (heads, views, A): mean over attributes of (mean within-head std over views) / (std over all)."""
    a = np.asarray(attrs, np.float64)
    within = a.std(1).mean(0)
    total = a.reshape(-1, a.shape[-1]).std(0) + 1e-8
    return float(np.mean(within / total))


def sample_bin_cameras(key, n: int, bin_name: str | None, pitch_deg: float):
    """Yaw uniform in the bin (either side) or, with bin None, over 360 deg; pitch uniform in the band."""
    k1, k2, k3 = jax.random.split(key, 3)
    if bin_name is None:
        yaw = jax.random.uniform(k1, (n,), minval=-math.pi, maxval=math.pi)
    else:
        lo, hi = BINS[bin_name]
        yaw = jax.random.uniform(k1, (n,), minval=lo, maxval=hi) * jnp.where(jax.random.bernoulli(k2, 0.5, (n,)), 1, -1)
    pitch = jnp.deg2rad(pitch_deg) * jax.random.uniform(k3, (n,), minval=-1.0, maxval=1.0)
    return yaw, pitch


class Evaluator:
    """Holds the feature encoder, the reference statistics and each regime's condition pools."""

    def __init__(self, config: Config, prepared: dict):
        self.config, self.prepared = config, prepared
        dc, ec, n = config.data, config.encoder, config.train.eval_samples
        self.n = n
        key = jax.random.fold_in(jax.random.key(dc.seed), 555)
        kp, kc = jax.random.split(key)
        m = max(ec.n_train, 2 * n)
        params = jax.random.uniform(kp, (m, NUM_PARAMS))
        yaw, pitch = sample_bin_cameras(kc, m, None, dc.pitch_deg)
        rgb, _ = render_batch(params, yaw, pitch, res=dc.res)
        images = np.asarray(jnp.round(rgb * 255)).astype(np.uint8)
        targets = np.concatenate([np.asarray(params), np.stack([np.sin(yaw), np.cos(yaw)], -1)], -1)
        graphdef, p, self.info = train_encoder(images, targets, res=dc.res, embed=ec.feat_dim, cfg=ec,
                                               seed=dc.seed + 2)
        self.features = make_embed_fn(graphdef, p, normalize=False)
        self.predict = make_predict_fn(graphdef, p)
        # reference statistics on unseen identities
        self.ref, self.ref_div = {}, {}
        for j, name in enumerate([None, *BINS]):
            kk = jax.random.fold_in(key, 10 + j)
            pr = jax.random.uniform(kk, (n, NUM_PARAMS))
            y, pi = sample_bin_cameras(jax.random.fold_in(kk, 1), n, name, dc.pitch_deg)
            rgb, _ = render_batch(pr, y, pi, res=dc.res)
            f = np.asarray(self.features(rgb * 2 - 1))
            self.ref[name or "random"] = gaussian_fit(f)
            self.ref_div[name or "random"] = mean_pairwise_distance(f)
        # FD of n fresh real renders per bin against the reference: the finite-sample floor, which differs by bin
        # (frontal views vary more), so bins are compared by their FD above it
        self.real_fd = {}
        for j, name in enumerate(BINS):
            kk = jax.random.fold_in(key, 30 + j)
            y, pi = sample_bin_cameras(jax.random.fold_in(kk, 1), n, name, dc.pitch_deg)
            rgb, _ = render_batch(jax.random.uniform(kk, (n, NUM_PARAMS)), y, pi, res=dc.res)
            self.real_fd[name] = frechet_distance(*gaussian_fit(np.asarray(self.features(rgb * 2 - 1))),
                                                  *self.ref[name])
        pr = jax.random.uniform(jax.random.fold_in(key, 20), (32, NUM_PARAMS))
        yaws = jnp.linspace(-math.pi, math.pi, 8, endpoint=False)
        rgb, _ = render_batch(jnp.repeat(pr, 8, 0), jnp.tile(yaws, 32), jnp.zeros(256), res=dc.res)
        self.real_spread = cross_view_spread(self._attrs(rgb * 2 - 1).reshape(32, 8, -1))

    def _attrs(self, images) -> np.ndarray:
        return np.asarray(self.predict(images))[:, list(VIEW_INVARIANT)]

    def conditions(self, arm: str, key, n: int, *, cam_yaw=None, cam_pitch=None, frontal: bool = False):
        """G's conditions for n samples of `arm`: camera (data, given, or frontal) and semantic from the data."""
        a = parse_arm(arm)
        m = MODES[a.mode]
        d = self.prepared[a.regime]
        idx = np.asarray(jax.random.randint(key, (n,), 0, len(d["yaw"])))
        if frontal:
            cam = camera_code(jnp.zeros(n), jnp.zeros(n))
        elif cam_yaw is not None:
            cam = camera_code(cam_yaw, cam_pitch)
        else:
            cam = camera_code(jnp.asarray(d["yaw"][idx]), jnp.asarray(d["pitch"][idx]))
        return jnp.concatenate([cam * m["g_cam"], jnp.asarray(d["sem"][idx]) * m["g_sem"]], -1)

    def _fd(self, generate, gp, arm, key, bin_name, *, frontal: bool, cond_is_render: bool = False):
        n, dc = self.n, self.config.data
        kz, kc, kr = jax.random.split(key, 3)
        yaw, pitch = sample_bin_cameras(kr, n, bin_name, dc.pitch_deg)
        if cond_is_render:
            cond = self.conditions(arm, kc, n, cam_yaw=yaw, cam_pitch=pitch)
        else:
            cond = self.conditions(arm, kc, n, frontal=frontal)
        z = jax.random.normal(kz, (n, self.config.model.z_dim))
        images, masks = generate(gp, z, cond, yaw, pitch)
        f = np.asarray(self.features(images))
        mu, cov = gaussian_fit(f)
        return frechet_distance(mu, cov, *self.ref[bin_name or "random"]), f, float(jnp.mean(masks))

    def fd_random(self, generate, gp, arm: str, seed: int = 0) -> float:
        key = jax.random.fold_in(jax.random.key(self.config.data.seed + 999), seed)
        return self._fd(generate, gp, arm, key, None, frontal=False)[0]

    def evaluate(self, generate, gp, arm: str, seed: int = 12345) -> dict:
        key = jax.random.fold_in(jax.random.key(self.config.data.seed + 999), seed)
        out = {}
        out["fd_random"], _, out["mask_mean"] = self._fd(generate, gp, arm, jax.random.fold_in(key, 0), None,
                                                         frontal=False)
        out["fd_front_std"] = self._fd(generate, gp, arm, jax.random.fold_in(key, 1), "front", frontal=False,
                                       cond_is_render=True)[0]
        for j, b in enumerate(BINS):
            fd, f, _ = self._fd(generate, gp, arm, jax.random.fold_in(key, 2 + j), b, frontal=True)
            out[f"fd_{b}"] = fd
            out[f"diversity_{b}"] = mean_pairwise_distance(f)
            out[f"real_diversity_{b}"] = self.ref_div[b]
            out[f"real_fd_{b}"] = self.real_fd[b]
        out["back_front_gap"] = out["fd_back"] - out["fd_front"]
        out["back_front_excess_gap"] = ((out["fd_back"] - self.real_fd["back"])
                                        - (out["fd_front"] - self.real_fd["front"]))
        heads = 32
        kz, kc = jax.random.split(jax.random.fold_in(key, 9))
        z = jnp.repeat(jax.random.normal(kz, (heads, self.config.model.z_dim)), 8, 0)
        cond = jnp.repeat(self.conditions(arm, kc, heads, frontal=True), 8, 0)
        yaws = jnp.tile(jnp.linspace(-math.pi, math.pi, 8, endpoint=False), heads)
        images, _ = generate(gp, z, cond, yaws, jnp.zeros_like(yaws))
        out["xview_spread"] = cross_view_spread(self._attrs(images).reshape(heads, 8, -1))
        out["real_xview_spread"] = self.real_spread
        return out


def rotation_images(config: Config, generate, gp, arm: str, evaluator: Evaluator, heads: int = 4):
    """Generated heads (fixed-frontal protocol) rotated through 360 deg: (heads * 8) images in [0, 1], titles."""
    key = jax.random.key(config.data.seed + 4242)
    kz, kc = jax.random.split(key)
    yaws = jnp.linspace(-math.pi, math.pi, 8, endpoint=False) + math.pi  # start at the front: 0, 45, ..., 315
    yaws = jnp.where(yaws > math.pi, yaws - 2 * math.pi, yaws)
    z = jnp.repeat(jax.random.normal(kz, (heads, config.model.z_dim)), 8, 0)
    cond = jnp.repeat(evaluator.conditions(arm, kc, heads, frontal=True), 8, 0)
    images, _ = generate(gp, z, cond, jnp.tile(yaws, heads), jnp.zeros(heads * 8))
    images = np.clip((np.asarray(images) + 1) / 2, 0, 1)
    titles = [f"{arm}\nyaw {int(round(np.degrees(float(y)))) % 360}" if i == 0 else
              f"yaw {int(round(np.degrees(float(y)))) % 360}" for i, y in enumerate(np.tile(np.asarray(yaws), heads))]
    titles = [t if i < 8 else "" for i, t in enumerate(titles)]
    return list(images), titles

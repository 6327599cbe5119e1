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
- zdiv_<bin> (z-diversity at a fixed condition): the bin's samples come in groups of Z_GROUP that share the
  render camera and G's condition and differ only in z; the mean pairwise feature (and pixel) distance within
  a group, divided by that of real renders of Z_GROUP random identities at one camera of the bin. A generator
  collapsed on z scores 0; one as diverse as the data, 1. (The bin FDs use the same grouped samples.)
- diversity_<bin>: mean pairwise feature distance of all generated images in the bin (fixed-frontal protocol).
- xview_spread: for heads rendered at 8 yaws, the within-head std over views of the view-invariant attributes
  the feature encoder predicts (skull shape, skin and hair colour), divided by the std of those attributes over
  REAL heads (not the generator's own spread, which a collapsed G shrinks); lower = more coherent heads, real
  renders give the floor.
- single-view GAN inversion (`make_inverter`, `inversion_scores`): optimise w and the camera to fit one real
  view of an unseen identity, render the other 7 views, score them against the held-out real views.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.linalg
from flax import nnx

from .configs import MODES, Config, parse_arm
from .data import make_embed_fn, make_predict_fn, train_encoder
from .model import camera_code
from .render import NUM_PARAMS, VIEW_INVARIANT, render_batch

BINS = {"front": (0.0, math.pi / 4), "side": (math.pi / 4, 3 * math.pi / 4), "back": (3 * math.pi / 4, math.pi)}
Z_GROUP = 4  # z-diversity: samples per fixed (camera, condition) group
XVIEW_HEADS = 64  # cross-view consistency: heads rendered at 8 yaws each


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


def group_pairwise_distance(x: np.ndarray) -> float:
    """x (groups, g, ...): mean Euclidean distance between the members of a group, over all pairs and groups."""
    f = np.asarray(x, np.float64).reshape(x.shape[0], x.shape[1], -1)
    g = f.shape[1]
    if g < 2:
        raise ValueError(f"groups of {g}: a within-group distance needs at least 2 members")
    d = np.sqrt(np.maximum(((f[:, :, None] - f[:, None]) ** 2).sum(-1), 0.0))
    return float(d.sum() / (f.shape[0] * g * (g - 1)))


def cross_view_spread(attrs: np.ndarray, scale: np.ndarray | None = None) -> float:
    """attrs (heads, views, A): mean over attributes of (mean within-head std over views) / scale, where scale
    (A,) is the attributes' std over REAL heads (default: over `attrs` themselves, for the real renders)."""
    a = np.asarray(attrs, np.float64)
    within = a.std(1).mean(0)
    total = a.reshape(-1, a.shape[-1]).std(0) if scale is None else np.asarray(scale, np.float64)
    return float(np.mean(within / (total + 1e-8)))


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
        # n fresh real renders per bin in groups of Z_GROUP identities sharing one camera: their FD against the
        # reference is the finite-sample floor (it differs by bin: frontal views vary more, so bins are compared
        # by their FD above it); their within-group distance is the data's spread at a fixed view (z-diversity)
        self.real_fd, self.real_zdiv, self.real_zdiv_pix = {}, {}, {}
        g = Z_GROUP
        for j, name in enumerate(BINS):
            kk = jax.random.fold_in(key, 30 + j)
            y, pi = sample_bin_cameras(jax.random.fold_in(kk, 1), n // g, name, dc.pitch_deg)
            rgb, _ = render_batch(jax.random.uniform(kk, (n // g * g, NUM_PARAMS)), jnp.repeat(y, g),
                                  jnp.repeat(pi, g), res=dc.res)
            f = np.asarray(self.features(rgb * 2 - 1))
            self.real_fd[name] = frechet_distance(*gaussian_fit(f), *self.ref[name])
            self.real_zdiv[name] = group_pairwise_distance(f.reshape(n // g, g, -1))
            self.real_zdiv_pix[name] = group_pairwise_distance(np.asarray(rgb * 2 - 1).reshape(n // g, g, -1))
        h = XVIEW_HEADS
        pr = jax.random.uniform(jax.random.fold_in(key, 20), (h, NUM_PARAMS))
        yaws = jnp.linspace(-math.pi, math.pi, 8, endpoint=False)
        rgb, _ = render_batch(jnp.repeat(pr, 8, 0), jnp.tile(yaws, h), jnp.zeros(8 * h), res=dc.res)
        real_attrs = self._attrs(rgb * 2 - 1).reshape(h, 8, -1)
        self.attr_scale = real_attrs.reshape(-1, real_attrs.shape[-1]).std(0)  # over real heads and views
        self.real_spread = cross_view_spread(real_attrs, self.attr_scale)

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

    def _fd(self, generate, gp, arm, key, bin_name, *, frontal: bool, cond_is_render: bool = False,
            n: int | None = None, group: int = 1):
        """FD of n samples against the reference; with group > 1 the samples come in groups sharing the render
        camera and G's condition (different z). Returns (fd, features, images, mean mask)."""
        n, dc = n or self.n, self.config.data
        m = n // group
        kz, kc, kr = jax.random.split(key, 3)
        yaw, pitch = sample_bin_cameras(kr, m, bin_name, dc.pitch_deg)
        if cond_is_render:
            cond = self.conditions(arm, kc, m, cam_yaw=yaw, cam_pitch=pitch)
        else:
            cond = self.conditions(arm, kc, m, frontal=frontal)
        if group > 1:
            yaw, pitch, cond = jnp.repeat(yaw, group), jnp.repeat(pitch, group), jnp.repeat(cond, group, 0)
        z = jax.random.normal(kz, (m * group, self.config.model.z_dim))
        images, masks = generate(gp, z, cond, yaw, pitch)
        f = np.asarray(self.features(images))
        mu, cov = gaussian_fit(f)
        return frechet_distance(mu, cov, *self.ref[bin_name or "random"]), f, images, float(jnp.mean(masks))

    def fd_random(self, generate, gp, arm: str, seed: int = 0, n: int | None = None) -> float:
        key = jax.random.fold_in(jax.random.key(self.config.data.seed + 999), seed)
        return self._fd(generate, gp, arm, key, None, frontal=False, n=n)[0]

    def evaluate(self, generate, gp, arm: str, seed: int = 12345) -> dict:
        key = jax.random.fold_in(jax.random.key(self.config.data.seed + 999), seed)
        out = {}
        out["fd_random"], _, _, out["mask_mean"] = self._fd(generate, gp, arm, jax.random.fold_in(key, 0), None,
                                                            frontal=False)
        out["fd_front_std"] = self._fd(generate, gp, arm, jax.random.fold_in(key, 1), "front", frontal=False,
                                       cond_is_render=True)[0]
        g = Z_GROUP
        for j, b in enumerate(BINS):
            fd, f, images, _ = self._fd(generate, gp, arm, jax.random.fold_in(key, 2 + j), b, frontal=True,
                                        group=g)
            out[f"fd_{b}"] = fd
            out[f"diversity_{b}"] = mean_pairwise_distance(f)
            out[f"real_diversity_{b}"] = self.ref_div[b]
            out[f"real_fd_{b}"] = self.real_fd[b]
            m = len(f) // g
            out[f"zdiv_{b}"] = group_pairwise_distance(f[: m * g].reshape(m, g, -1)) / self.real_zdiv[b]
            out[f"zdiv_pix_{b}"] = (group_pairwise_distance(np.asarray(images)[: m * g].reshape(m, g, -1))
                                    / self.real_zdiv_pix[b])
        out["zdiv"] = float(np.mean([out[f"zdiv_{b}"] for b in BINS]))
        out["zdiv_pix"] = float(np.mean([out[f"zdiv_pix_{b}"] for b in BINS]))
        out["back_front_gap"] = out["fd_back"] - out["fd_front"]
        out["back_front_excess_gap"] = ((out["fd_back"] - self.real_fd["back"])
                                        - (out["fd_front"] - self.real_fd["front"]))
        heads = XVIEW_HEADS
        kz, kc = jax.random.split(jax.random.fold_in(key, 9))
        z = jnp.repeat(jax.random.normal(kz, (heads, self.config.model.z_dim)), 8, 0)
        cond = jnp.repeat(self.conditions(arm, kc, heads, frontal=True), 8, 0)
        yaws = jnp.tile(jnp.linspace(-math.pi, math.pi, 8, endpoint=False), heads)
        images, _ = generate(gp, z, cond, yaws, jnp.zeros_like(yaws))
        out["xview_spread"] = cross_view_spread(self._attrs(images).reshape(heads, 8, -1), self.attr_scale)
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


# ---------------------------------------------------------------------------------------------- GAN inversion

INVERT_VIEWS = 8  # the input view and 7 held-out views, 45 deg apart


def make_inverter(config: Config, g_graphdef, *, steps: int = 60, lr: float = 0.03, n_avg: int = 64):
    """invert(gp, cond (B, C), target (B, res, res, 3) in [-1, 1], key) -> dict(w, yaw, pitch, fit_mse, ...).

    Single-view GAN inversion in W (EG3D/PTI's first stage without the generator fine-tuning): w starts at the
    mean of `n_avg` mapped z under the condition, the camera at yaw = pitch = 0; Adam on (w, yaw, pitch) for
    `steps` steps minimises the pixel MSE between G's render and the target. Jitted; one compile per shape."""
    tx = optax.adam(lr)
    z_dim = config.model.z_dim
    opts = {"xla_backend_optimization_level": 0} if config.train.fast_compile else None

    @functools.partial(jax.jit, compiler_options=opts)
    def invert(gp, cond, target, key):
        g = nnx.merge(g_graphdef, gp)
        b = target.shape[0]
        z = jax.random.normal(key, (n_avg, z_dim))
        w0 = jax.vmap(lambda c: g.map(z, jnp.broadcast_to(c, (n_avg, c.shape[0]))).mean(0))(cond)
        x0 = {"w": w0, "yaw": jnp.zeros(b), "pitch": jnp.zeros(b)}

        def loss(x):
            out = g.synthesize(x["w"], x["yaw"], x["pitch"])
            return jnp.mean((out["image"] - target) ** 2)

        def body(carry, _):
            x, o = carry
            v, gr = jax.value_and_grad(loss)(x)
            u, o = tx.update(gr, o, x)
            return (optax.apply_updates(x, u), o), v

        (x, _), curve = jax.lax.scan(body, (x0, tx.init(x0)), None, length=steps)
        per = jnp.mean((g.synthesize(x["w"], x["yaw"], x["pitch"])["image"] - target) ** 2, (1, 2, 3))
        return {**x, "fit_mse": per, "w0": w0, "loss_curve": curve}

    return invert


def inversion_scores(config: Config, evaluator: Evaluator, generate_w, invert, gp, arm: str, *, n: int = 16,
                     seed: int = 0) -> dict:
    """Single-view inversion of n unseen identities seen from one near-frontal view (|yaw| <= 30 deg, pitch 0),
    then the 7 other views (input yaw + k 45 deg, from the estimated camera) rendered and scored against the
    held-out real renders: pixel MSE and the mean absolute error of the view-invariant attributes (in units of
    their std over real heads). G's condition comes from the input alone: its semantic embedding (the CLIP
    stand-in of the input view) and, for camera-conditioned G, the frontal camera (the fixed-frontal protocol).
    `generate_w(gp, w, yaw, pitch) -> images` renders given w. The un-optimised mean head (w0) is the
    baseline."""
    dc = config.data
    key = jax.random.fold_in(jax.random.key(dc.seed + 777), seed)
    kp, ky, kz = jax.random.split(key, 3)
    params = jax.random.uniform(kp, (n, NUM_PARAMS))
    yaw0 = jax.random.uniform(ky, (n,), minval=-math.radians(30), maxval=math.radians(30))
    offs = jnp.arange(INVERT_VIEWS) * (2 * math.pi / INVERT_VIEWS)

    def wrap(a):
        return jnp.mod(a + math.pi, 2 * math.pi) - math.pi

    yaws = wrap(yaw0[:, None] + offs[None])  # (n, V); view 0 is the input
    rgb, _ = render_batch(jnp.repeat(params, INVERT_VIEWS, 0), yaws.reshape(-1), jnp.zeros(n * INVERT_VIEWS),
                          res=dc.res)
    real = (rgb * 2 - 1).reshape(n, INVERT_VIEWS, dc.res, dc.res, 3)
    target = real[:, 0]
    a = parse_arm(arm)
    m = MODES[a.mode]
    sem = jnp.asarray(evaluator.prepared["semantic_encoder"](jnp.round((target + 1) * 127.5).astype(jnp.uint8)))
    cond = jnp.concatenate([camera_code(jnp.zeros(n), jnp.zeros(n)) * m["g_cam"], sem * m["g_sem"]], -1)
    x = invert(gp, cond, target, kz)
    out = {}
    for name, w, y, p in (("inv", x["w"], x["yaw"], x["pitch"]), ("mean_head", x["w0"], jnp.zeros(n), jnp.zeros(n))):
        ry = wrap(y[:, None] + offs[None]).reshape(-1)
        imgs = generate_w(gp, jnp.repeat(w, INVERT_VIEWS, 0), ry, jnp.repeat(p, INVERT_VIEWS))
        imgs = jnp.asarray(imgs).reshape(real.shape)
        held, held_real = imgs[:, 1:].reshape((-1,) + real.shape[2:]), real[:, 1:].reshape((-1,) + real.shape[2:])
        out[f"{name}_heldout_mse"] = float(jnp.mean((held - held_real) ** 2))
        err = np.abs(evaluator._attrs(held) - evaluator._attrs(held_real)) / (evaluator.attr_scale + 1e-8)
        out[f"{name}_heldout_attr_err"] = float(err.mean())
        out[f"{name}_input_mse"] = float(jnp.mean((imgs[:, 0] - target) ** 2))
    out["inv_yaw_err_deg"] = float(np.degrees(np.mean(np.abs(np.asarray(wrap(x["yaw"] - yaw0))))))
    return out


def make_generate_w_fn(config: Config, g_graphdef, chunk: int = 64):
    """generate_w(gp, w, yaw, pitch) -> images: G after the mapping network, jitted in fixed-size chunks."""
    from .render import chunked

    @functools.partial(jax.jit)
    def gen(gp, w, yaw, pitch):
        return nnx.merge(g_graphdef, gp).synthesize(w, yaw, pitch)["image"]

    def generate_w(gp, w, yaw, pitch):
        return chunked(lambda *a: gen(gp, *a), chunk)(w, jnp.asarray(yaw), jnp.asarray(pitch))

    return generate_w


def w_z_share(config: Config, g_graphdef, gp, cond: jax.Array, n_z: int = 128, seed: int = 0) -> float:
    """The z path's share of the mapping network's output: the variance of w over z at a fixed condition
    (averaged over the conditions `cond` (K, C)) over the variance of w over z and the conditions together. Near
    0: w (hence the head) is set by the condition alone, the mapping network has collapsed on z."""
    g = nnx.merge(g_graphdef, gp)
    z = jax.random.normal(jax.random.key(seed), (n_z, config.model.z_dim))
    w = jax.vmap(lambda c: g.map(z, jnp.broadcast_to(c, (n_z, c.shape[0]))))(cond)  # (K, n_z, w_dim)
    within = jnp.var(w, axis=1).sum(-1).mean()
    total = jnp.var(w.reshape(-1, w.shape[-1]), axis=0).sum()
    return float(within / (total + 1e-12))

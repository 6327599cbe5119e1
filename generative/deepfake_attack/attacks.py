"""The attacks at a hard, shared PSNR budget, in three readings of "multiplicative" and the additive counterpart.

Every attack acts through a parameter map theta (N, S, S, 1) and a perturbation d(x, theta) that is LINEAR in
theta, so one scalar per image puts any direction on the budget. The budget is on the image the attack delivers:
||clip(x + d, 0, 1) - x||_2 = radius (= S 10^(-PSNR/20), the L2 distance at which an image sits at the target
PSNR before 8-bit rounding). The clip matters on MNIST's black background: it absorbs whatever a perturbation
pushes below 0, and it absorbs more of some readings than of others, so a budget taken before the clip would
give the readings different delivered PSNRs (the first committed run: 30.4 dB additive, 33.2 dB spectral gain
at a nominal 28 dB). `to_budget` therefore finds each image's scale by bisection on the delivered norm:

- `additive`:      d = theta                                  x' = x + theta
- `pixel_gain`:    d = x * theta                              x' = x (1 + theta)        (gain in [1-eps, 1+eps])
- `spectral_gain`: d = Re F^-1(F(x) * theta)                  F(x') = F(x) (1 + theta)  (a per-frequency gain:
  a filter that can divide out a generator's up-sampling peaks, which scale with the image's content)

The reading is a one-hot weight vector (traced), so one compiled program serves all three.

Three attack settings use these readings:
- white-box PGD per attribution model (`pgd_step`, through its defence): the upper bound;
- the universal white-box attack: one network f trained against the real (undefended) attribution models;
- the black-box universal attack (the paper's threat model): f trained on REAL images only, against a surrogate
  attributor over random pseudo-generators that is trained first on clean images and then frozen.
For the learned attacks theta = tanh(f(x) + w) (w a learned image-independent map) rescaled per image to the
budget (`to_budget`), so training runs at exactly the evaluated budget; nothing is recalibrated afterwards.
PGD projects onto the same delivered-norm ball (`project`) and starts at a random point in it when given a key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core.config import BadInputError

from . import losses as L
from . import ops
from .configs import KINDS, READINGS  # noqa: F401  (re-exported)

IMAGE_AXES = (-3, -2, -1)
NO_BOX = 1e3  # the additive reading has no box on theta (only the [0, 1] clip of the image)
MAX_GROWTH = 8.0  # how far `to_budget` may grow a direction whose pre-clip norm the clip partly absorbs
BISECTION_STEPS = 24  # per-image scale to a relative precision of about MAX_GROWTH / 2**24


def one_hot(reading: str) -> jax.Array:
    if reading not in READINGS:
        raise BadInputError(f"attack reading {reading!r}: expected one of {READINGS}")
    return jnp.asarray(np.eye(len(READINGS), dtype=np.float32)[READINGS.index(reading)])


def perturbation(x: jax.Array, theta: jax.Array, w: jax.Array) -> jax.Array:
    """d(x, theta) for the reading weights w (3,): w0 theta + w1 x theta + w2 Re F^-1(F(x) theta).

    x and theta are (..., S, S, 1); the spectral term uses the unshifted 2-D DFT of each image."""
    spec = jnp.real(jnp.fft.ifft2(jnp.fft.fft2(x[..., 0]) * theta[..., 0]))[..., None]
    return w[0] * theta + w[1] * x * theta + w[2] * spec


def norm(d: jax.Array) -> jax.Array:
    return jnp.sqrt(jnp.sum(d**2, axis=IMAGE_AXES, keepdims=True))


def box(w: jax.Array, gain_eps: float, spectral_eps: float) -> jax.Array:
    """The bound on |theta| for the reading: none (additive), the pixel gain's eps, the spectral gain's eps."""
    return w[0] * NO_BOX + w[1] * gain_eps + w[2] * spectral_eps


def delivered_norm(x: jax.Array, theta: jax.Array, w: jax.Array) -> jax.Array:
    """||clip(x + d(x, theta), 0, 1) - x||_2 per image: the perturbation the attacked image actually carries."""
    return norm(jnp.clip(x + perturbation(x, theta, w), 0.0, 1.0) - x)


def scale_to_radius(x: jax.Array, theta: jax.Array, w: jax.Array, radius: float, bound: jax.Array | float,
                    hi: float) -> jax.Array:
    """Per image the largest k in [0, hi] (bisection) with delivered_norm(x, clip(k theta, +-bound)) <= radius, shape
    (N, 1, 1, 1); k = hi where even hi stays inside the radius. No gradient flows through k.

    The delivered norm grows with k pixel by pixel for the additive reading and the pixel gain (a clip or a box
    only stops a pixel's growth), so k puts the image on the radius exactly; for the spectral gain the box can
    make it non-monotone, and the bisection still returns a k on the radius (one of its crossings)."""
    theta = jax.lax.stop_gradient(theta)
    x = jax.lax.stop_gradient(x)

    def inside(k):
        return delivered_norm(x, jnp.clip(k * theta, -bound, bound), w) <= radius

    def halve(_, lo_hi):
        lo, hi_ = lo_hi
        mid = 0.5 * (lo + hi_)
        ok = inside(mid)
        return jnp.where(ok, mid, lo), jnp.where(ok, hi_, mid)

    top = jnp.full(x.shape[:-3] + (1, 1, 1), hi, x.dtype)
    lo, _ = jax.lax.fori_loop(0, BISECTION_STEPS, halve, (jnp.zeros_like(top), top))
    return jnp.where(inside(top), top, lo)


def to_budget(x: jax.Array, theta: jax.Array, w: jax.Array, radius: float, bound: jax.Array | float) -> jax.Array:
    """theta rescaled per image so that the delivered perturbation ||clip(x + d(x, theta), 0, 1) - x||_2 is radius,
    inside the reading's box. First ||d||_2 = radius (differentiable: the gradient moves the direction, not the
    length), then one more per-image factor up to MAX_GROWTH for what the [0, 1] clip absorbs (found by
    bisection, no gradient; at least 1 wherever the clip and the box only absorb). A box that stops a gain before
    the radius, or a clip that absorbs more than MAX_GROWTH can make up, leaves the PSNR above the target."""
    theta = radius / (norm(perturbation(x, theta, w)) + 1e-8) * theta
    return jnp.clip(scale_to_radius(x, theta, w, radius, bound, MAX_GROWTH) * theta, -bound, bound)


def project(x: jax.Array, theta: jax.Array, w: jax.Array, radius: float, bound: jax.Array | float) -> jax.Array:
    """Projection for PGD: clip theta to the box, then shrink it (never grow) until the delivered perturbation
    ||clip(x + d, 0, 1) - x||_2 is at most radius."""
    theta = jnp.clip(theta, -bound, bound)
    return scale_to_radius(x, theta, w, radius, bound, 1.0) * theta


def random_start(key: jax.Array, x: jax.Array, w: jax.Array, radius: float, bound: jax.Array | float) -> jax.Array:
    """A random PGD start inside the budget: a Gaussian direction at a uniform fraction of the radius (the L2
    random start of Madry et al.), projected like every PGD iterate."""
    kd, ku = jax.random.split(key)
    theta = jax.random.normal(kd, x.shape, x.dtype)
    u = jax.random.uniform(ku, x.shape[:-3] + (1, 1, 1), x.dtype)
    theta = u * radius / (norm(perturbation(x, theta, w)) + 1e-8) * theta
    return project(x, theta, w, radius, bound)


def attacked(x: jax.Array, theta: jax.Array, w: jax.Array, straight_through: bool = False) -> jax.Array:
    """x + d(x, theta) clipped to [0, 1] and rounded to 8 bits (with a straight-through gradient in training)."""
    y = jnp.clip(x + perturbation(x, theta, w), 0.0, 1.0)
    return ops.straight_through(y, ops.quantize8(y)) if straight_through else ops.quantize8(y)


def leave_source_loss(logits: jax.Array, source: jax.Array) -> jax.Array:
    """Untargeted attack loss -log(1 - p(source | x')): zero once the source is no longer predicted."""
    logp = jax.nn.log_softmax(logits, -1)
    lp = jnp.take_along_axis(logp, source[..., None], axis=-1)[..., 0]
    return -jnp.mean(jnp.log1p(-jnp.exp(jnp.minimum(lp, -1e-6))))


# --------------------------------------------------------------------------------------------- white-box PGD

def pgd_step(logits_fn: Callable, theta: jax.Array, x: jax.Array, labels: jax.Array, w: jax.Array, radius: float,
             step_size: float, bound: jax.Array | float) -> jax.Array:
    """One PGD ascent step on CE(logits_fn(x + d(x, theta)), label) in theta, then `project`.

    The gradient g is normalised by ||d(x, g)||, so each step moves the image by `step_size` in L2 whatever the
    reading (for the additive reading this is the usual normalised-gradient L2 PGD). Images are the last three
    axes; leading axes (one copy per attribution model) are independent."""
    def loss(th):
        xa = jnp.clip(x + perturbation(x, th, w), 0.0, 1.0)
        return L.cross_entropy(logits_fn(xa), labels) * labels.size

    g = jax.grad(loss)(theta)
    g = g / (norm(perturbation(x, g, w)) + 1e-12)
    return project(x, theta + step_size * g, w, radius, bound)


def pgd(logits_fn: Callable, x: jax.Array, labels: jax.Array, w: jax.Array, radius: float, steps: int,
        bound: jax.Array | float, step_fn: Callable | None = None, start: jax.Array | None = None) -> jax.Array:
    """PGD from `start` (theta = 0 if None; `random_start` for a random one) for `steps` steps of
    2.5 radius / steps; returns the attacked (8-bit) images.
    A Python loop over `step_fn(theta, x, labels, w, radius, step_size, bound)` (callers pass a jitted one)."""
    step_fn = step_fn or functools.partial(pgd_step, logits_fn)
    theta = jnp.zeros_like(x) if start is None else start
    for _ in range(steps):
        theta = step_fn(theta, x, labels, w, radius, 2.5 * radius / steps, bound)
    return attacked(x, theta, w)


# --------------------------------------------------------------------------------------------- learned attacks

def learned_theta(apply_f: Callable, pf: dict, x: jax.Array, w: jax.Array, radius: float,
                  bound: jax.Array | float) -> jax.Array:
    """theta of a learned attack: tanh(f(x) + w_map) on the budget (pf = {"net": U-Net params, "map": (S, S, 1)})."""
    raw = jnp.tanh(apply_f(pf["net"], x) + pf["map"])
    return to_budget(x, raw, w, radius, bound)


def make_learned_step(apply_f: Callable, fool_loss: Callable, tx: optax.GradientTransformation, radius: float,
                      gain_eps: float, spectral_eps: float) -> Callable:
    """step((pf, opt), x, target, w, frozen) -> ((pf, opt), metrics): one Adam step of the attack network on
    fool_loss(frozen, x'(x), target); the attacked model's parameters `frozen` get no gradient (never updated)."""

    def step(carry, x, target, w, frozen):
        pf, opt = carry
        bound = box(w, gain_eps, spectral_eps)

        def loss(p):
            xa = attacked(x, learned_theta(apply_f, p, x, w, radius, bound), w, straight_through=True)
            fl = fool_loss(jax.lax.stop_gradient(frozen), xa, target)
            return fl, jnp.mean((xa - x) ** 2)

        (fl, mse), g = jax.value_and_grad(loss, has_aux=True)(pf)
        u, opt = tx.update(g, opt, pf)
        return (optax.apply_updates(pf, u), opt), {"fool": fl, "mse": mse}

    return step

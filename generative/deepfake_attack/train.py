"""Training of every model in the benchmark, each a Python loop over one jitted step, and the whole pipeline `run`.

Pipeline: real pools -> generator zoo (6 families) with samples and FID -> 4 attribution models -> the
attack U-Net trained on real images only (additive and multiplicative, one program each; with the denoising AE
in a background thread while the zoo trains) -> budgets matched
by PSNR -> references (white-box PGD, blur, DCT) -> defences (retraining, blur, DCT, denoising AE, spectrum
normalisation) -> ASR / to-real / PSNR / SSIM tables, plots, metrics.json.
"""

from __future__ import annotations

import functools
import json
import pathlib
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core.compilation import jit_run_once
from core.config import BadInputError
from core.plots import bar_plot, image_grid
from core.train import init_train_state, make_train_step, progress, write_metrics

from . import attacks as A
from . import losses as L
from . import metrics as M
from . import ops, traces
from .configs import ATTRIBUTORS, GENERATORS, AMConfig, AttackConfig, Config, GenConfig
from .data import load_fake_folders, load_pools
from .model import (
    MADE,
    ConvClassifier,
    ConvVAE,
    DCGANGenerator,
    DenoisingAE,
    Discriminator,
    MLPClassifier,
    SmallUNet,
    apply,
    init,
    split,
)

UPSAMPLE = {"dcgan_transposed": "transposed", "dcgan_nearest": "nearest", "dcgan_bilinear": "bilinear"}


# --------------------------------------------------------------------------------------------- training loops

def run_steps(step: Callable, carry: Any, steps: int, *args: Any, desc: str | None = None) -> tuple[Any, Any]:
    """`steps` calls of the jitted `step(carry, i, *args) -> (carry, out)`; returns (carry, outs stacked on axis 0).

    A Python loop, not `lax.scan`: XLA:CPU runs convolutions inside a while-loop body about 10x slower than the
    same step dispatched on its own (jax-ml/jax#12868; measured here on the attack step: 5.9 s vs 0.55 s), and
    every model of this benchmark is convolutional. Steps are dispatched asynchronously, so the loop costs
    little on any backend."""
    outs = []
    for i in progress(range(steps), desc=desc, disable=desc is None, leave=False):
        carry, out = step(carry, jnp.int32(i), *args)
        outs.append(out)
    return carry, jax.tree.map(lambda *o: np.stack(o), *jax.device_get(outs))


def make_fit(loss_fn: Callable, tx: optax.GradientTransformation, batch_size: int
             ) -> Callable[..., tuple[Any, np.ndarray]]:
    """fit(params, arrays, key, steps, desc=None) -> (params, per-step losses): train `loss_fn(params, batch,
    key)` with one compiled step. Each step draws `batch_size` indices uniformly from the arrays with
    fold_in(fold_in(key, 7), step); the loss key is core's fold_in(state.key, step)."""
    train_step = make_train_step(loss_fn, tx, donate=False)

    @functools.partial(jax.jit, donate_argnums=0)
    def step(state, i, arrays, data_key):  # data as an argument, never a compile-time constant
        n = jax.tree.leaves(arrays)[0].shape[0]
        idx = jax.random.randint(jax.random.fold_in(data_key, i), (batch_size,), 0, n)
        state, m = train_step(state, jax.tree.map(lambda a: a[idx], arrays))
        return state, m["loss"]

    def fit(params, arrays, key, steps, desc=None):
        state = init_train_state(jax.tree.map(jnp.array, params), tx, key)  # a copy: the step donates its state
        state, losses = run_steps(step, state, steps, arrays, jax.random.fold_in(key, 7), desc=desc)
        return state.params, losses

    return fit


# --------------------------------------------------------------------------------------------- generators

def build_generator(name: str, gen: GenConfig, size: int, key: jax.Array):
    """(graphdef, params) of a generator family; GANs hold {"g": ..., "d": ...} params."""
    if name in UPSAMPLE:
        kg, kd = jax.random.split(key)
        gd_g, pg = init(lambda r: DCGANGenerator(gen.latent, gen.width, size, UPSAMPLE[name], rngs=r), kg)
        gd_d, pd = init(lambda r: Discriminator(gen.width, size, rngs=r), kd)
        return (gd_g, gd_d), {"g": pg, "d": pd}
    if name == "vae":
        return init(lambda r: ConvVAE(gen.latent, gen.width, size, rngs=r), key)
    if name == "made":
        return init(lambda r: MADE((size // 2) ** 2, gen.made_hidden, rngs=r), key)
    if name == "ddpm":
        return init(lambda r: SmallUNet(gen.width, time_dim=gen.width, rngs=r), key)
    raise BadInputError(f"generator {name!r}: expected one of {GENERATORS}")


def make_sampler(name: str, graphdef, gen: GenConfig, size: int) -> Callable[[Any, jax.Array, int], jax.Array]:
    """sample(params, key, n) -> (n, size, size, 1) 8-bit-quantised images in [0, 1]; jitted with n static
    (the DDPM: a Python loop over its jitted denoising step)."""
    if name in UPSAMPLE:
        def sample(params, key, n):
            z = jax.random.normal(key, (n, gen.latent))
            return apply(graphdef[0], params["g"], z)
    elif name == "vae":
        def sample(params, key, n):
            z = jax.random.normal(key, (n, gen.latent))
            return jax.nn.sigmoid(apply(graphdef, params, z, method="decode"))
    elif name == "made":
        half = size // 2
        dim = half * half

        def sample(params, key, n):
            def body(d, carry):
                x, k = carry
                k, sub = jax.random.split(k)
                p = jax.nn.sigmoid(apply(graphdef, params, x)[:, d])
                return x.at[:, d].set(jax.random.bernoulli(sub, p).astype(jnp.float32)), k

            x, _ = jax.lax.fori_loop(0, dim, body, (jnp.zeros((n, dim)), key))
            return ops.resize(x.reshape(n, half, half, 1), size, "bilinear")
    elif name == "ddpm":
        ab = jnp.asarray(L.cosine_alpha_bar(gen.ddpm_timesteps))
        ab_prev = jnp.concatenate([jnp.ones(1), ab[:-1]])

        @jax.jit
        def denoise(x, i, params, key):  # one ancestral step; a Python loop over it (see `run_steps`)
            t = gen.ddpm_timesteps - 1 - i
            eps = apply(graphdef, params, x, jnp.full((x.shape[0],), t))
            a_t, a_prev = ab[t], ab_prev[t]
            beta = 1.0 - a_t / a_prev
            x0 = jnp.clip((x - jnp.sqrt(1 - a_t) * eps) / jnp.sqrt(a_t), -1.0, 1.0)
            mean = (jnp.sqrt(a_prev) * beta / (1 - a_t)) * x0 + (jnp.sqrt(1 - beta) * (1 - a_prev) / (1 - a_t)) * x
            var = beta * (1 - a_prev) / (1 - a_t)
            z = jax.random.normal(jax.random.fold_in(key, i), x.shape)
            return mean + jnp.where(t > 0, jnp.sqrt(var), 0.0) * z

        def sample(params, key, n):
            k0, key = jax.random.split(key)
            x = jax.random.normal(k0, (n, size, size, 1))
            for i in range(gen.ddpm_timesteps):
                x = denoise(x, jnp.int32(i), params, key)
            return (x + 1.0) / 2.0

        return lambda params, key, n: ops.quantize8(sample(params, key, n))
    else:
        raise BadInputError(f"generator {name!r}: expected one of {GENERATORS}")

    def quantized(params, key, n):
        return ops.quantize8(sample(params, key, n))

    # a handful of calls per run: compiled without XLA's optimisation passes (MADE's 196-step sampling loop
    # compiled in 4.5 s by default)
    return jit_run_once(quantized, static_argnums=2)


def train_generator(name: str, gen: GenConfig, x: np.ndarray, key: jax.Array):
    """Train one generator on real images x (N, S, S, 1). Returns (graphdef, params, per-step losses)."""
    size = x.shape[1]
    k_init, k_train = jax.random.split(key)
    graphdef, params = build_generator(name, gen, size, k_init)
    arrays = {"image": jnp.asarray(x)}
    if name in UPSAMPLE:
        return (graphdef, *_train_gan(graphdef, params, gen, arrays, k_train))
    if name == "vae":
        def loss_fn(p, batch, k):
            xb = batch["image"]
            mu, logvar = apply(graphdef, p, xb, method="encode")
            z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(k, mu.shape)
            loss = L.vae_loss(apply(graphdef, p, z, method="decode"), xb, mu, logvar)
            return loss, {}
        steps = gen.vae_steps
    elif name == "made":
        def loss_fn(p, batch, k):
            half = ops.avg_pool2(batch["image"]).reshape(batch["image"].shape[0], -1)
            xb = jax.random.bernoulli(k, half).astype(jnp.float32)  # dynamic binarisation
            return L.bernoulli_nll(apply(graphdef, p, xb), xb), {}
        steps = gen.made_steps
    else:
        ab = jnp.asarray(L.cosine_alpha_bar(gen.ddpm_timesteps))

        def loss_fn(p, batch, k):
            x0 = 2.0 * batch["image"] - 1.0
            kt, ke = jax.random.split(k)
            t = jax.random.randint(kt, (x0.shape[0],), 0, gen.ddpm_timesteps)
            eps = jax.random.normal(ke, x0.shape)
            a = ab[t][:, None, None, None]
            xt = jnp.sqrt(a) * x0 + jnp.sqrt(1 - a) * eps
            return L.ddpm_loss(apply(graphdef, p, xt, t), eps), {}
        steps = gen.ddpm_steps
    params, losses = make_fit(loss_fn, optax.adam(gen.lr), gen.batch_size)(params, arrays, k_train, steps, desc=name)
    return graphdef, params, losses


def _train_gan(graphdef, params, gen: GenConfig, arrays: dict, key: jax.Array):
    gd_g, gd_d = graphdef
    tx = optax.adam(gen.lr_gan, b1=0.5)
    n = arrays["image"].shape[0]

    @functools.partial(jax.jit, donate_argnums=0)
    def step(carry, i, key, images):  # data as an argument, never a compile-time constant
        p, og, od = carry
        kz, ki = jax.random.split(jax.random.fold_in(key, i))
        real = images[jax.random.randint(ki, (gen.batch_size,), 0, n)]
        z = jax.random.normal(kz, (gen.batch_size, gen.latent))

        def d_loss(pd):
            fake = jax.lax.stop_gradient(apply(gd_g, p["g"], z))
            return L.gan_losses(apply(gd_d, pd, real), apply(gd_d, pd, fake))[0]

        def g_loss(pg):
            return L.gan_losses(jnp.zeros(1), apply(gd_d, p["d"], apply(gd_g, pg, z)))[1]

        ld, gd = jax.value_and_grad(d_loss)(p["d"])
        lg, gg = jax.value_and_grad(g_loss)(p["g"])
        ud, od = tx.update(gd, od, p["d"])
        ug, og = tx.update(gg, og, p["g"])
        p = {"g": optax.apply_updates(p["g"], ug), "d": optax.apply_updates(p["d"], ud)}
        return (p, og, od), jnp.stack([ld, lg])

    carry = (params, tx.init(params["g"]), tx.init(params["d"]))
    (p, _, _), losses = run_steps(step, carry, gen.gan_steps, key, arrays["image"], desc="gan")
    return p, losses


# --------------------------------------------------------------------------------------------- FID classifier

def train_digit_classifier(x: np.ndarray, y: np.ndarray, gen: GenConfig, key: jax.Array):
    """The project's small digit classifier whose hidden features define FID. Returns (graphdef, params)."""
    graphdef, params = init(lambda r: ConvClassifier(16, x.shape[1], 10, rngs=r), key)

    def loss_fn(p, batch, k):
        return L.cross_entropy(apply(graphdef, p, batch["image"]), batch["label"]), {}

    params, _ = make_fit(loss_fn, optax.adam(1e-3), 64)(params, {"image": jnp.asarray(x), "label": jnp.asarray(y)},
                                                         key, gen.fid_steps, desc="fid classifier")
    return graphdef, params


def batched(fn: Callable, x: np.ndarray | jax.Array, batch: int) -> np.ndarray:
    """Apply a jitted fn over the leading axis in chunks (the last chunk padded, so one shape compiles)."""
    n = x.shape[0]
    outs = []
    for i in range(0, n, batch):
        chunk = x[i:i + batch]
        pad = batch - chunk.shape[0]
        if pad:
            chunk = np.concatenate([np.asarray(chunk), np.repeat(np.asarray(chunk[-1:]), pad, axis=0)])
        outs.append(np.asarray(fn(chunk))[: batch - pad])
    return np.concatenate(outs)


# --------------------------------------------------------------------------------------------- attributors

def am_input(name: str, x: jax.Array, block: int) -> jax.Array:
    """The input each attribution model sees: pixels, x - median3x3(x), the centred log-amplitude spectrum
    (flat), or log|block-DCT| (flat); the MLPs standardise their features with training-set statistics."""
    if name == "pixel_cnn":
        return x
    if name == "residual_cnn":
        return 10.0 * (x - ops.median3x3(x))
    if name == "spectrum_mlp":
        return ops.log_spectrum(x).reshape(x.shape[0], -1)
    if name == "dct_mlp":
        return jnp.log(jnp.abs(ops.block_dct(x, block)) + 1e-2).reshape(x.shape[0], -1)
    raise BadInputError(f"attribution model {name!r}: expected one of {ATTRIBUTORS}")


def build_attributors(am: AMConfig, size: int, classes: int, key: jax.Array):
    """({name: graphdef}, {name: params}) for the four attribution models."""
    graphdefs, init_fn = _am_init(am, size, classes)
    return graphdefs, init_fn(key)


@functools.cache
def _am_init(am: AMConfig, size: int, classes: int):
    """Graphdefs and ONE jitted initialiser per attribution setting (retraining for each defence reuses it)."""
    def ctor(r):
        return {name: (ConvClassifier(am.width, size, classes, am.hidden, rngs=r) if name.endswith("cnn")
                       else MLPClassifier(size * size, am.hidden, classes, rngs=r)) for name in ATTRIBUTORS}

    graphdefs = {n: split(m)[0] for n, m in nnx.eval_shape(lambda: ctor(nnx.Rngs(0))).items()}
    return graphdefs, jit_run_once(lambda k: {n: split(m)[1] for n, m in ctor(nnx.Rngs(params=k)).items()})


def am_logits(graphdefs: dict, params: dict, x: jax.Array, block: int) -> dict[str, jax.Array]:
    return {n: apply(graphdefs[n], params[n], am_input(n, x, block)) for n in ATTRIBUTORS}


def make_am_loss(graphdefs: dict, am: AMConfig) -> Callable:
    """loss_fn(params, batch, key): the sum of the four models' cross-entropies (independent parameters, so
    each model gets its own gradient); metrics hold each model's loss."""

    def loss_fn(params, batch, key):
        logits = am_logits(graphdefs, params, batch["image"], am.dct_block)
        each = {n: L.cross_entropy(lg, batch["label"]) for n, lg in logits.items()}
        return sum(each.values()), each

    return loss_fn


def am_optimizer(am: AMConfig) -> optax.GradientTransformation:
    return optax.adam(am.lr)


@functools.cache
def _am_fitter(am: AMConfig, size: int, classes: int):
    graphdefs, _ = _am_init(am, size, classes)
    loss_fn = make_am_loss(graphdefs, am)
    return graphdefs, make_fit(loss_fn, am_optimizer(am), am.batch_size)


MLP_ATTRIBUTORS = tuple(n for n in ATTRIBUTORS if n.endswith("mlp"))
INPUT_STD_FLOOR = 0.1  # a feature that is (nearly) constant in training is not amplified more than 10x


def set_input_stats(params: dict, x: np.ndarray, block: int) -> dict:
    """params with each MLP attributor's fixed input standardisation set to the per-feature mean and std of
    its features on the training images x (std floored at INPUT_STD_FLOOR)."""
    stats = _input_stats(jnp.asarray(x), block)
    out = dict(params)
    for name in MLP_ATTRIBUTORS:
        p = jax.tree.map(lambda a: a, params[name])  # a new pytree: the caller's params are left as they were
        p["input_mean"][...] = stats[name][0]
        p["input_std"][...] = stats[name][1]
        out[name] = p
    return out


@functools.partial(jax.jit, static_argnums=1)
def _input_stats(x: jax.Array, block: int) -> dict:
    feats = {n: am_input(n, x, block) for n in MLP_ATTRIBUTORS}
    return {n: (f.mean(axis=0), jnp.maximum(f.std(axis=0), INPUT_STD_FLOOR)) for n, f in feats.items()}


def train_attributors(am: AMConfig, x: np.ndarray, y: np.ndarray, classes: int, key: jax.Array):
    """Train the four attribution models together on (x, y) (the MLPs' input standardisation is set from x
    first). Returns (graphdefs, params, losses)."""
    graphdefs, fit = _am_fitter(am, x.shape[1], classes)
    _, params = build_attributors(am, x.shape[1], classes, key)
    params = set_input_stats(params, x, am.dct_block)
    params, losses = fit(params, {"image": jnp.asarray(x), "label": jnp.asarray(y)},
                         jax.random.fold_in(key, 99), am.steps, desc="attribution models")
    return graphdefs, params, losses


# --------------------------------------------------------------------------------------------- attacks

def build_attack_net(attack: AttackConfig, size: int, key: jax.Array):
    """(graphdef, params) of a learned attack: {"net": the U-Net f, "map": an image-independent (S, S, 1) map},
    theta = tanh(f(x) + map) on the budget (`attacks.learned_theta`)."""
    gf, pf = init(lambda r: SmallUNet(attack.width, rngs=r), key)
    return gf, {"net": pf, "map": jnp.zeros((size, size, 1))}


def build_surrogate(attack: AttackConfig, size: int, key: jax.Array):
    """The black-box attacker's surrogate attributor over {real, pseudo-generator 1..K}."""
    return init(lambda r: ConvClassifier(attack.surrogate_width, size, attack.pseudo_gms + 1, 64, rngs=r), key)


def pseudo_batch(attack: AttackConfig, kernels: dict, x: jax.Array, key: jax.Array):
    """Half real images (class 0), half pseudo-fakes of the other half (class k of pseudo-generator k)."""
    b = x.shape[0] // 2
    kw, kn = jax.random.split(key)
    which = jax.random.randint(kw, (x.shape[0] - b,), 1, attack.pseudo_gms + 1)
    fakes = traces.fakes(kernels, x[b:], which, kn, attack.pseudo_residue)
    return jnp.concatenate([x[:b], fakes]), jnp.concatenate([jnp.zeros(b, jnp.int32), which])


def train_surrogate(attack: AttackConfig, x_real: np.ndarray, key: jax.Array, show_progress: bool = True):
    """Train the surrogate on CLEAN real images and pseudo-fakes of real images only (it is frozen afterwards:
    the attack never trains it). Returns (graphdef, params, kernels of the pseudo-generators, losses)."""
    size = x_real.shape[1]
    k_init, k_train = jax.random.split(key)
    kernels = traces.build(attack.pseudo_gms, attack.pseudo_beta, int(jax.random.randint(key, (), 0, 2**30)))
    gs, ps = build_surrogate(attack, size, k_init)

    def loss_fn(p, batch, k):
        xb, yb = pseudo_batch(attack, kernels, batch["image"], k)
        return L.cross_entropy(apply(gs, p, xb), yb), {}

    ps, losses = make_fit(loss_fn, optax.adam(attack.lr), 2 * attack.batch_size)(
        ps, {"image": jnp.asarray(x_real)}, k_train, attack.surrogate_steps,
        desc="surrogate" if show_progress else None)
    return gs, ps, kernels, losses


def radius_of(size: int, psnr: float) -> float:
    """The L2 radius at which an S x S image sits at `psnr` dB (peak 1): S 10^(-PSNR/20)."""
    return float(size * 10 ** (-psnr / 20))


def train_learned_attacks(attack: AttackConfig, size: int, arrays: dict, make_batch: Callable,
                          fool_loss: Callable, frozen: Any, steps: int, key: jax.Array, desc: str | None = None):
    """Train one attack network per reading (same init, same batches) against the frozen model `frozen`.

    make_batch(arrays, idx, key) -> (x, target) builds each batch; fool_loss(frozen, x', target) is minimised.
    One compiled step serves every reading (the reading is a traced one-hot). Returns (graphdef,
    {reading: params}, {reading: {"fool": (steps,), "mse": (steps,)}})."""
    k_init, k_train = jax.random.split(key)
    gf, p0 = build_attack_net(attack, size, k_init)
    apply_f = functools.partial(apply, gf)
    radius = radius_of(size, attack.target_psnr)
    tx = optax.adam(attack.lr)
    learned = A.make_learned_step(apply_f, fool_loss, tx, radius, attack.eps, attack.spectral_eps)
    n = jax.tree.leaves(arrays)[0].shape[0]

    @functools.partial(jax.jit, donate_argnums=0)
    def body(carry, i, w, frozen, arrays):
        k = jax.random.fold_in(k_train, i)
        ki, kb = jax.random.split(k)
        x, target = make_batch(arrays, jax.random.randint(ki, (attack.batch_size,), 0, n), kb)
        return learned(carry, x, target, w, frozen)

    params, hist = {}, {}
    for reading in attack.readings:
        carry = (jax.tree.map(jnp.array, p0), tx.init(p0))
        carry, h = run_steps(body, carry, steps, A.one_hot(reading), frozen, arrays,
                             desc=f"{desc} {reading}" if desc else None)
        params[reading], hist[reading] = carry[0], h
    return gf, params, hist


def train_blackbox_attacks(attack: AttackConfig, x_real: np.ndarray, key: jax.Array, show_progress: bool = True):
    """The black-box universal attack (our reconstruction): surrogate trained on clean real + pseudo-fakes and
    frozen, then f per reading trained on pseudo-fakes of REAL images to make the surrogate say "real".
    Returns {"graphdef", "params" {reading}, "surrogate" (gs, ps, kernels), "history"}."""
    k_s, k_a = jax.random.split(key)
    gs, ps, kernels, s_losses = train_surrogate(attack, x_real, k_s, show_progress)

    def make_batch(arrays, idx, k):  # pseudo-fakes only: the attack acts on fakes
        kw, kn = jax.random.split(k)
        which = jax.random.randint(kw, idx.shape, 1, attack.pseudo_gms + 1)
        fakes = traces.fakes(kernels, arrays["image"][idx], which, kn, attack.pseudo_residue)
        return fakes, jnp.zeros(idx.shape, jnp.int32)

    def fool(frozen_ps, xa, target):  # the surrogate attributes the attacked pseudo-fake to "real"
        return L.cross_entropy(apply(gs, frozen_ps, xa), target)

    gf, params, hist = train_learned_attacks(attack, x_real.shape[1], {"image": jnp.asarray(x_real)}, make_batch,
                                             fool, ps, attack.steps, k_a, "black-box" if show_progress else None)
    return {"graphdef": gf, "params": params, "surrogate": (gs, ps, kernels),
            "history": {"surrogate_ce": np.asarray(s_losses), **{f"fool_{r}": h["fool"] for r, h in hist.items()}}}


def train_universal_attacks(config: Config, graphdefs: dict, pam: dict, x_fake: np.ndarray, y_fake: np.ndarray,
                            key: jax.Array, show_progress: bool = True):
    """The universal white-box attack: f per reading trained on fakes (the attribution-training fakes, never the
    evaluation ones) to move each real attribution model away from the fake's source (mean over the models)."""
    block = config.am.dct_block

    def make_batch(arrays, idx, k):
        return arrays["image"][idx], arrays["label"][idx]

    def fool(frozen, xa, source):
        logits = am_logits(graphdefs, frozen, xa, block).values()
        return sum(A.leave_source_loss(lg, source) for lg in logits) / len(ATTRIBUTORS)

    gf, params, hist = train_learned_attacks(config.attack, x_fake.shape[1],
                                             {"image": jnp.asarray(x_fake), "label": jnp.asarray(y_fake)},
                                             make_batch, fool, pam, config.attack.universal_steps, key,
                                             "universal" if show_progress else None)
    return {"graphdef": gf, "params": params, "history": {f"fool_{r}": h["fool"] for r, h in hist.items()}}


@functools.cache
def _learned_apply(graphdef, radius: float, gain_eps: float, spectral_eps: float):
    apply_f = functools.partial(apply, graphdef)

    def fn(pf, w, x):
        return A.attacked(x, A.learned_theta(apply_f, pf, x, w, radius, A.box(w, gain_eps, spectral_eps)), w)

    return jax.jit(fn)


def apply_learned(attack: AttackConfig, graphdef, pf: dict, reading: str, x: np.ndarray, batch: int) -> np.ndarray:
    """The learned attack of one reading applied to images x (8-bit, on the budget)."""
    fn = _learned_apply(graphdef, radius_of(x.shape[1], attack.target_psnr), attack.eps, attack.spectral_eps)
    w = A.one_hot(reading)
    return batched(lambda xb: fn(pf, w, xb), x, batch)


def surrogate_report(attack: AttackConfig, bb: dict, x_real: np.ndarray, key: jax.Array, batch: int) -> dict:
    """The black-box attack against its OWN frozen surrogate on pseudo-fakes of held-out real images: the
    surrogate's accuracy on clean pseudo-fakes, and per reading its accuracy / "real" rate after the attack."""
    gs, ps, kernels = bb["surrogate"]
    which = np.asarray(jax.random.randint(key, (x_real.shape[0],), 1, attack.pseudo_gms + 1))
    fake = np.asarray(jax.jit(lambda xb, wb, k: traces.fakes(kernels, xb, wb, k, attack.pseudo_residue))(
        jnp.asarray(x_real), jnp.asarray(which), jax.random.fold_in(key, 1)))
    predict = jax.jit(lambda xb: jnp.argmax(apply(gs, ps, xb), -1))
    out = {"clean_acc": float(np.mean(batched(predict, fake, batch) == which)),
           "real_acc": float(np.mean(batched(predict, x_real, batch) == 0))}
    for r in attack.readings:
        pred = batched(predict, apply_learned(attack, bb["graphdef"], bb["params"][r], r, fake, batch), batch)
        out[r] = {"acc": float(np.mean(pred == which)), "to_real": float(np.mean(pred == 0))}
    return out


def calibrate_scale(x: np.ndarray, t: np.ndarray, mode: float, target_psnr: float, iters: int = 40) -> float:
    """The scale s at which clip(x + s t (mode x + 1 - mode)) has mean PSNR `target_psnr` (bisection on log s).

    Kept for the single-scale form x (1 + s tanh f) used before issue 39 (tested); the pipeline now puts every
    image exactly on the budget during training and evaluation (`attacks.to_budget`)."""
    gain = mode * x + (1.0 - mode)

    def mean_psnr(s):
        y = np.clip(x + s * t * gain, 0.0, 1.0)
        mse = np.maximum(((y - x) ** 2).mean(axis=(1, 2, 3)), 1e-10)
        return float(np.mean(10 * np.log10(1.0 / mse)))

    lo, hi = np.log(1e-4), np.log(4.0)
    if mean_psnr(np.exp(hi)) > target_psnr:
        return float(np.exp(hi))
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean_psnr(np.exp(mid)) > target_psnr else (lo, mid)
    return float(np.exp(0.5 * (lo + hi)))


def pgd_l2(logits_fn: Callable, x: jax.Array, labels: jax.Array, radius: float, steps: int,
           step_fn: Callable | None = None) -> jax.Array:
    """White-box L2 PGD (untargeted): maximise CE(logits_fn(x'), label) over ||x' - x||_2 <= radius, x' in [0, 1].

    radius = S * 10^(-PSNR/20) puts an image on the boundary at exactly the target PSNR. A Python loop over
    `step_fn(xa, x, labels, radius, step_size)` (default: `pgd_l2_step` on logits_fn; callers pass a jitted one),
    not a fori_loop, for the reason in `run_steps`."""
    step_fn = step_fn or functools.partial(pgd_l2_step, logits_fn)
    step_size = 2.5 * radius / steps
    xa = x
    for _ in range(steps):
        xa = step_fn(xa, x, labels, radius, step_size)
    return xa


def pgd_l2_step(logits_fn: Callable, xa: jax.Array, x: jax.Array, labels: jax.Array, radius: float,
                step_size: float) -> jax.Array:
    """One normalised-gradient ascent step on CE, projected onto the L2 ball around x and onto [0, 1].

    Images are the last three axes, so xa may carry leading axes (e.g. one copy per attribution model, with
    logits_fn returning (..., N, classes) and labels broadcast to (..., N)): each image's step is its own."""
    image_axes = (-3, -2, -1)
    g = jax.grad(lambda xb: L.cross_entropy(logits_fn(xb), labels) * labels.size)(xa)
    g = g / (jnp.sqrt(jnp.sum(g**2, axis=image_axes, keepdims=True)) + 1e-12)
    d = xa + step_size * g - x
    d = d * jnp.minimum(1.0, radius / (jnp.sqrt(jnp.sum(d**2, axis=image_axes, keepdims=True)) + 1e-12))
    return jnp.clip(x + d, 0.0, 1.0)


# --------------------------------------------------------------------------------------------- defences

def train_dae(x: np.ndarray, noise: float, steps: int, key: jax.Array, show_progress: bool = True):
    """The denoising-autoencoder purifier, trained on real images with Gaussian noise."""
    graphdef, params = init(lambda r: DenoisingAE(16, rngs=r), key)

    def loss_fn(p, batch, k):
        xb = batch["image"]
        noisy = jnp.clip(xb + noise * jax.random.normal(k, xb.shape), 0.0, 1.0)
        return jnp.mean((apply(graphdef, p, noisy) - xb) ** 2), {}

    params, _ = make_fit(loss_fn, optax.adam(1e-3), 64)(params, {"image": jnp.asarray(x)}, key, steps,
                                                         desc="denoising AE" if show_progress else None)
    return graphdef, params


DEFENCE_BRANCH = {"none": 0, "retrain": 0, "blur": 1, "dct": 2, "dae": 3, "specnorm": 4}


def dae_graphdef():
    """The (static) graph of the denoising autoencoder; its parameters travel as data."""
    return split(nnx.eval_shape(lambda: DenoisingAE(16, rngs=nnx.Rngs(0))))[0]


def apply_defence(config: Config, branch: jax.Array | int, x: jax.Array, aux: dict) -> jax.Array:
    """The input transformation of a defended attribution model, selected by `branch` with lax.switch so one
    compiled program serves every defence: 0 identity (none / retrain), 1 Gaussian blur, 2 DCT quantisation,
    3 the denoising AE (aux["dae"] params), 4 spectrum normalisation (aux["profile"])."""
    d = config.defence
    gd = dae_graphdef()
    branches = [lambda x: x,
                lambda x: ops.gaussian_blur(x, d.blur_sigma),
                lambda x: ops.dct_quantize(x, d.dct_step, config.am.dct_block),
                lambda x: apply(gd, aux["dae"], x),
                lambda x: ops.spectrum_normalize(x, aux["profile"])]
    return jax.lax.switch(branch, branches, x)


class Evaluator:
    """Jitted evaluation programs shared by every defence (parameters, aux and the branch are arguments)."""

    def __init__(self, config: Config, graphdefs: dict, radius: float):
        block = config.am.dct_block
        self.config = config

        def logits(pam, aux, branch, x):
            return am_logits(graphdefs, pam, apply_defence(config, branch, x, aux), block)

        def predict(pam, aux, branch, x):
            return jnp.stack([jnp.argmax(v, -1) for v in logits(pam, aux, branch, x).values()], axis=1)

        def each_model_logits(pam, aux, branch, xs):  # xs (models, N, S, S, 1): model a sees only xs[a]
            defended = apply_defence(config, branch, xs.reshape(-1, *xs.shape[2:]), aux).reshape(xs.shape)
            return jnp.stack([apply(graphdefs[n], pam[n], am_input(n, defended[a], block))
                              for a, n in enumerate(ATTRIBUTORS)])

        def pgd_step(pam, aux, branch, theta, x, y, w, radius, step_size, bound):
            return A.pgd_step(functools.partial(each_model_logits, pam, aux, branch), theta, x, y, w, radius,
                              step_size, bound)

        self.radius = radius
        self.preprocess = jax.jit(lambda aux, branch, x: apply_defence(config, branch, x, aux))
        self.predict = jax.jit(predict)
        self._pgd_step = jax.jit(pgd_step)
        self._pgd_start = jax.jit(A.random_start)

    def pgd(self, pam, aux, branch, x, y, reading: str, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """White-box PGD of one reading against each attribution model (through the defence), all four in one
        compiled step (one copy of the images per model), from a random start drawn with `key`:
        (predictions (N, 4), attacked images (4, N, ...))."""
        a = self.config.attack
        models = len(ATTRIBUTORS)
        xs = jnp.broadcast_to(x, (models, *x.shape))
        ys = jnp.broadcast_to(y, (models, *y.shape))
        w = A.one_hot(reading)
        bound = A.box(w, a.eps, a.spectral_eps)
        step = functools.partial(self._pgd_step, pam, aux, branch)
        start = self._pgd_start(key, xs, w, self.radius, bound)
        xa = A.pgd(None, xs, ys, w, self.radius, a.pgd_steps, bound, step_fn=step, start=start)
        preds = [self.predict(pam, aux, branch, xa[m])[:, m] for m in range(models)]
        return jnp.stack(preds, axis=1), xa


# --------------------------------------------------------------------------------------------- pipeline

def _stack_classes(real: np.ndarray, fakes: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Images and attribution labels: 0 real, then 1, 2, ... for the generators in `fakes`' order."""
    xs = [real, *fakes.values()]
    ys = [np.full(len(a), i, np.int32) for i, a in enumerate(xs)]
    return np.concatenate(xs), np.concatenate(ys)


def fidelity(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Mean PSNR / SSIM of y against x, over the whole image and over the stroke region."""
    return {k: float(v) for k, v in _fidelity(jnp.asarray(x), jnp.asarray(y)).items()}


@jax.jit
def _fidelity(x, y):
    mask = M.stroke_mask(x)
    return {"psnr": jnp.mean(M.psnr(x, y)), "psnr_stroke": jnp.mean(M.psnr(x, y, mask)),
            "ssim": jnp.mean(M.ssim(x, y)), "ssim_stroke": jnp.mean(M.ssim(x, y, mask))}


def spectral_distance(x: np.ndarray, real_spectrum: np.ndarray) -> float:
    """Mean absolute difference between the mean log-amplitude spectrum of images x and the real one: how much
    of a generator's spectral trace is left (0 = the mean spectrum of real images)."""
    return float(np.mean(np.abs(np.asarray(_mean_spectrum(jnp.asarray(x))) - real_spectrum)))


_AM_CACHE: dict = {}  # attribution models per defence, reused across runs in one process (`reuse_attributors`)


def attack_names(config: Config) -> list[str]:
    kinds = [k for k in ("pgd", "universal", "blackbox") if k in config.attack.kinds]
    return [f"{k}_{r}" for k in kinds for r in config.attack.readings] + ["blur", "dct"]


def train_and_evaluate(config: Config, workdir: pathlib.Path | str, *, log: Callable[[str], None] = print,
                       reuse_attributors: bool = False) -> dict[str, Any]:
    """The whole benchmark; returns a JSON-able record (tables, per-cell ASR, timings) and writes plots.

    reuse_attributors: the attribution models of every defence except `retrain` (which depends on the attack)
    are trained once per process and reused by later runs with the same data / generator / AM / defence config
    (the benchmark's seeds then vary the attacks and the retrained defence only)."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    timings: dict[str, float] = {}

    def tick(name, t0):
        timings[name] = round(time.time() - t0, 1)
        log(f"[deepfake_attack] {name}: {timings[name]:.1f} s")

    pools = load_pools(config.data)
    size = config.data.image_size
    root = jax.random.key(config.gen.seed)
    eb = config.eval_batch
    ac = config.attack
    readings = ac.readings

    # 1. generator zoo ------------------------------------------------------------------------------
    t0 = time.time()
    cls_gd, cls_p = train_digit_classifier(pools["gm"]["image"], pools["gm"]["label"], config.gen,
                                           jax.random.fold_in(root, 1000))
    feats_fn = jax.jit(lambda p, xb: apply(cls_gd, p, xb, method="features"))
    feats = lambda xb: feats_fn(cls_p, xb)  # noqa: E731
    real_feats = batched(feats, pools["eval"]["image"], eb)
    head = lambda f: np.argmax(np.asarray(f) @ np.asarray(cls_p["head"]["kernel"][...])  # noqa: E731
                               + np.asarray(cls_p["head"]["bias"][...]), -1)
    digit_acc = float(np.mean(head(real_feats) == pools["eval"]["label"]))
    fid_real = M.frechet_distance(batched(feats, pools["am"]["image"], eb), real_feats)
    tick("fid_classifier", t0)
    # The black-box attack and the denoising AE see real images only, so they train in a background thread
    # while the generator zoo trains: XLA:CPU compiles on one core, and the other stage's programs use the idle one.
    cache = workdir / "stage_generators.npz"  # a rerun in the same workdir resumes after the zoo
    fakes_am, fakes_eval, gen_info = {}, {}, {}
    gen_names = config.gen.generators
    if config.data.fakes_folder:  # the user's generators' samples replace the zoo
        user = load_fake_folders(config.data.fakes_folder, size, config.data.n_am, config.data.n_eval,
                                 config.data.seed)
        gen_names = tuple(user)
        for name, (x_am_g, x_ev_g) in user.items():
            fakes_am[name], fakes_eval[name] = x_am_g, x_ev_g
            gen_info[name] = {"fid": M.frechet_distance(batched(feats, x_ev_g, eb), real_feats),
                              "samples": str(pathlib.Path(config.data.fakes_folder) / name)}
            image_grid(workdir / f"samples_{name}.png", x_ev_g[: config.grid_samples, ..., 0],
                       ncols=min(8, config.grid_samples))
        log(f"[deepfake_attack] {len(user)} generators' samples read from {config.data.fakes_folder}")
    elif cache.exists():  # read (and a damaged cache refused) before the background stage starts
        z = stage_cache(cache, [f"{kind}_{g}" for g in gen_names for kind in ("am", "eval")])
        fakes_am = {g: z[f"am_{g}"] for g in gen_names}
        fakes_eval = {g: z[f"eval_{g}"] for g in gen_names}
        info_path = workdir / "stage_generators.json"
        try:
            gen_info = json.loads(info_path.read_text())
        except (OSError, ValueError) as err:
            raise BadInputError(f"{info_path}: a damaged stage record ({type(err).__name__}: {err}); delete it "
                                f"and {cache.name} to train the generators again") from None
        if any(len(fakes_am[g]) != config.data.n_am or len(fakes_eval[g]) != config.data.n_eval for g in gen_names):
            raise BadInputError(f"{cache}: holds {len(fakes_am[gen_names[0]])} / {len(fakes_eval[gen_names[0]])} "
                                f"fakes per generator; expected data.n_am={config.data.n_am} / "
                                f"data.n_eval={config.data.n_eval} (delete it to train the generators again)")
        log(f"[deepfake_attack] generators restored from {cache}")
    background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="real_only")
    real_only = background.submit(_train_real_only, config, pools, tick)
    background.shutdown(wait=False)
    for name in progress([g for g in gen_names if g not in gen_info], desc="generators"):
        gi = GENERATORS.index(name)
        t0 = time.time()
        graphdef, params, losses = train_generator(name, config.gen, pools["gm"]["image"], jax.random.fold_in(root, gi))
        sampler = make_sampler(name, graphdef, config.gen, size)
        kk = jax.random.fold_in(root, 100 + gi)
        gen_chunk = min(eb, 500)
        n_am, n_ev = config.data.n_am, config.data.n_eval
        samp = lambda n, k: np.concatenate([np.asarray(sampler(params, jax.random.fold_in(k, j), gen_chunk))  # noqa: E731
                                            for j in range(-(-n // gen_chunk))])[:n]
        fakes_am[name] = samp(n_am, jax.random.fold_in(kk, 0))
        fakes_eval[name] = samp(n_ev, jax.random.fold_in(kk, 1))
        fid = M.frechet_distance(batched(feats, fakes_eval[name], eb), real_feats)
        losses = np.asarray(losses)
        gen_info[name] = {"fid": fid, "final_loss": losses[-max(1, len(losses) // 10):].mean(axis=0).tolist()}
        image_grid(workdir / f"samples_{name}.png", fakes_eval[name][: config.grid_samples, ..., 0],
                   ncols=min(8, config.grid_samples))
        tick(f"generator_{name}", t0)

    if not cache.exists() and not config.data.fakes_folder:
        np.savez(cache, **{f"am_{g}": fakes_am[g] for g in gen_names},
                 **{f"eval_{g}": fakes_eval[g] for g in gen_names})
        (workdir / "stage_generators.json").write_text(json.dumps(gen_info))

    classes = 1 + len(gen_names)
    x_am, y_am = _stack_classes(pools["am"]["image"], fakes_am)
    x_ev, y_ev = _stack_classes(pools["eval"]["image"], fakes_eval)
    fake_ev = y_ev > 0
    x_fake, y_fake = x_ev[fake_ev], y_ev[fake_ev]
    x_am_fake, y_am_fake = x_am[y_am > 0], y_am[y_am > 0]
    real_spec = np.asarray(_mean_spectrum(jnp.asarray(pools["eval"]["image"])))

    # 2. attribution models without defence, then the universal white-box attack against them ------------------
    bb, dae = real_only.result()
    profile = jax.jit(ops.amplitude_profile)(pools["am"]["image"])
    aux = {"dae": dae[1], "profile": profile}
    radius = radius_of(size, ac.target_psnr)
    graphdefs, _ = _am_fitter(config.am, size, classes)
    ev = Evaluator(config, graphdefs, radius)
    am_key = (config.data, config.gen, config.am, config.defence, size)

    def attributors(dname, xs=None, ys=None):
        ck = (am_key, dname)
        if reuse_attributors and dname != "retrain" and ck in _AM_CACHE:
            return _AM_CACHE[ck]
        branch = jnp.int32(DEFENCE_BRANCH[dname])
        if xs is None:
            xs, ys = batched(lambda xb: ev.preprocess(aux, branch, xb), x_am, eb), y_am
        _, pam, am_losses = train_attributors(config.am, xs, ys, classes, jax.random.key(config.am.seed))
        out = (pam, float(np.asarray(am_losses)[-50:].mean()))
        if reuse_attributors and dname != "retrain":
            _AM_CACHE[ck] = out
        return out

    t0 = time.time()
    am_none = attributors("none")
    tick("attributors_none", t0)
    uni = None
    if "universal" in ac.kinds:
        t0 = time.time()
        uni = train_universal_attacks(config, graphdefs, am_none[0], x_am_fake, y_am_fake,
                                      jax.random.key(ac.seed + 7), show_progress=True)
        tick("universal_training", t0)

    # 3. attacked evaluation fakes (learned attacks and references) ---------------------------------------------
    t0 = time.time()
    adv, adv_am = {}, []
    for kind, trained in (("universal", uni), ("blackbox", bb)):
        if trained is None:
            continue
        for r in readings:
            adv[f"{kind}_{r}"] = apply_learned(ac, trained["graphdef"], trained["params"][r], r, x_fake, eb)
            adv_am.append(apply_learned(ac, trained["graphdef"], trained["params"][r], r, x_am_fake, eb))
    reference = jax.jit(lambda xb: (ops.quantize8(ops.gaussian_blur(xb, ac.blur_sigma)),
                                    ops.quantize8(ops.dct_quantize(xb, ac.dct_step, config.am.dct_block))))
    refs = list(zip(*[reference(jnp.asarray(x_fake[i:i + eb])) for i in range(0, len(x_fake), eb)]))  # ragged last
    adv["blur"], adv["dct"] = (np.concatenate(r) for r in refs)
    fid_rows = {a: fidelity(x_fake, adv[a]) for a in adv}
    surrogate = surrogate_report(ac, bb, pools["eval"]["image"], jax.random.key(ac.seed + 11), eb)
    tick("attack_apply", t0)

    # 4. defences: each defended attribution model (re)trained; PGD adapts to it --------------------------------
    n_pgd = min(ac.pgd_per_gm, config.data.n_eval)
    pgd_idx = np.concatenate([np.flatnonzero(y_fake == g)[:n_pgd] for g in range(1, classes)])
    x_pgd, y_pgd = x_fake[pgd_idx], y_fake[pgd_idx]
    results: dict[str, Any] = {}
    am_info: dict[str, Any] = {}
    pgd_images: dict[str, np.ndarray] = {}
    for di, dname in enumerate(progress(config.defence.defences, desc="defences")):
        t0 = time.time()
        branch = jnp.int32(DEFENCE_BRANCH[dname])
        if dname == "none":
            pam, am_loss = am_none
        elif dname == "retrain":  # the defender retrains on fakes attacked by every learned attack
            pam, am_loss = attributors(dname, np.concatenate([x_am, *adv_am]),
                                       np.concatenate([y_am] + [y_am_fake] * len(adv_am)))
        else:
            pam, am_loss = attributors(dname)
        predict = lambda xb: ev.predict(pam, aux, branch, xb)  # noqa: E731
        pred_ev = batched(predict, x_ev, eb)  # (N, 4)
        clean_acc = {a: float(np.mean(pred_ev[:, i] == y_ev)) for i, a in enumerate(ATTRIBUTORS)}
        pred_clean = pred_ev[fake_ev]
        am_info[dname] = {"clean_acc": clean_acc, "final_loss": am_loss}
        rows = {aname: _asr_table(pred_clean, batched(predict, xa, eb), y_fake, gen_names)
                for aname, xa in adv.items()}
        pgd_readings = readings if "pgd" in ac.kinds else ()
        for ri, r in enumerate(pgd_readings):  # white-box PGD per model and reading, on the first n_pgd fakes per GM
            pgd_key = jax.random.fold_in(jax.random.fold_in(jax.random.key(ac.seed + 13), di), ri)  # random starts
            outs = [ev.pgd(pam, aux, branch, x_pgd[i:i + eb], y_pgd[i:i + eb], r, jax.random.fold_in(pgd_key, i))
                    for i in range(0, len(pgd_idx), eb)]
            preds = np.concatenate([np.asarray(o[0]) for o in outs])
            if di == 0:
                pgd_images[r] = np.concatenate([np.asarray(o[1]) for o in outs], axis=1)  # (models, N, ...)
                fid_rows[f"pgd_{r}"] = fidelity(x_pgd, pgd_images[r][0])
            rows[f"pgd_{r}"] = _asr_table(pred_clean[pgd_idx], preds, y_pgd, gen_names)
        results[dname] = {a: rows[a] for a in attack_names(config)}
        tick(f"defence_{dname}", t0)

    # 5. spectral traces: distance of each generator's (attacked) fakes' mean spectrum to the real one ----------
    spec = {"clean": {}, **{a: {} for a in adv}, **{f"pgd_{r}": {} for r in pgd_images}}
    for gi, g in enumerate(gen_names):
        sel = y_fake == gi + 1
        spec["clean"][g] = spectral_distance(x_fake[sel], real_spec)
        for a, xa in adv.items():
            spec[a][g] = spectral_distance(xa[sel], real_spec)
        for r in pgd_images:  # PGD images against the pixel CNN (model 0)
            spec[f"pgd_{r}"][g] = spectral_distance(pgd_images[r][0][y_pgd == gi + 1], real_spec)

    # 6. tables, plots ------------------------------------------------------------------------------
    table = {d: {a: results[d][a]["mean"] for a in results[d]} for d in results}
    history = {**{f"blackbox_{k}": np.asarray(v) for k, v in bb["history"].items()},
               **{f"universal_{k}": np.asarray(v) for k, v in (uni["history"] if uni else {}).items()}}
    _plots(workdir, config, gen_names, x_fake, y_fake, adv, table, pools["eval"]["image"], bb, history)
    wall = time.time() - t_start
    return {"generators": gen_info, "fid_real_vs_real": fid_real, "digit_classifier_acc": digit_acc,
            "attributors": am_info, "fidelity": fid_rows, "asr": results, "table": table,
            "spectral_distance": spec, "surrogate": surrogate,
            "attack_history": {k: _curve(v) for k, v in history.items()},
            "timings": timings, "wall_seconds": wall}


def _curve(v: np.ndarray, points: int = 20) -> dict[str, list[float]]:
    """A training curve as `points` window means (first and last window included) and its step indices."""
    v = np.asarray(v, np.float64).reshape(len(v), -1).mean(axis=1)
    chunks = np.array_split(np.arange(len(v)), min(points, len(v)))
    return {"step": [int(c[-1]) for c in chunks], "mean": [float(v[c].mean()) for c in chunks]}


def stage_cache(path: pathlib.Path, keys: list[str]) -> dict[str, np.ndarray]:
    """A finished stage's outputs saved in the run folder (a rerun resumes after that stage); a damaged or
    incomplete cache stops with one line naming it, never a traceback or a silent redo."""
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise BadInputError(f"{path}: a damaged stage cache ({type(err).__name__}: {err}); delete it to run "
                            "that stage again") from None
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise BadInputError(f"{path}: stage cache lacks {missing[:4]}; expected {len(keys)} arrays, delete it to "
                            "run that stage again")
    return arrays


def _train_real_only(config: Config, pools: dict, tick: Callable[[str, float], None]):
    """The stages that never see a fake of the zoo: the black-box attack (surrogate, then one network per
    reading) and the denoising-AE purifier. Returns (black-box record, (graphdef, params) of the DAE)."""
    t0 = time.time()
    bb = train_blackbox_attacks(config.attack, pools["attack"]["image"], jax.random.key(config.attack.seed),
                                show_progress=False)
    tick("blackbox_training", t0)
    t0 = time.time()
    if "dae" in config.defence.defences:
        dae = train_dae(pools["attack"]["image"], config.defence.dae_noise, config.defence.dae_steps,
                        jax.random.key(config.defence.seed), show_progress=False)
    else:  # its branch is still traced by the shared defence program, so it needs parameters, not training
        dae = init(lambda r: DenoisingAE(16, rngs=r), jax.random.key(config.defence.seed))
    tick("dae_training", t0)
    return bb, dae


def _asr_table(pred_clean: np.ndarray, pred_adv: np.ndarray, source: np.ndarray,
               gen_names: tuple[str, ...]) -> dict[str, Any]:
    """Per (attribution model, generator) cells and their average (generator i is label i + 1)."""
    cells = {}
    for ai, aname in enumerate(ATTRIBUTORS):
        for gi, gname in enumerate(gen_names):
            sel = source == gi + 1
            cells[f"{aname}/{gname}"] = M.attack_success(pred_clean[sel, ai], pred_adv[sel, ai], source[sel])
    return {"mean": M.mean_asr(list(cells.values())), "cells": cells}


@jax.jit
def _mean_spectrum(x):
    return ops.log_spectrum(x).mean(0)


def _plots(workdir: pathlib.Path, config: Config, gen_names, x_fake, y_fake, adv, table, x_real, bb,
           history) -> None:
    import matplotlib.pyplot as plt

    readings = config.attack.readings
    # samples: one fake per generator, clean and each black-box reading, and the mean log-spectra
    idx = [int(np.flatnonzero(y_fake == g + 1)[0]) for g in range(len(gen_names))]
    rows = [("clean", x_fake)] + [(r, adv[f"blackbox_{r}"]) for r in readings]
    nr = len(rows)
    fig, axes = plt.subplots(2 * nr, len(gen_names), figsize=(1.6 * len(gen_names), 1.7 * 2 * nr), squeeze=False)
    for r, (label, xs) in enumerate(rows):
        for g, i in enumerate(idx):
            axes[r, g].imshow(xs[i, ..., 0], cmap="gray", vmin=0, vmax=1)
            sel = y_fake == g + 1
            spec = np.asarray(_mean_spectrum(jnp.asarray(xs[sel][:200])))
            axes[nr + r, g].imshow(spec, cmap="magma")
            for a in (axes[r, g], axes[nr + r, g]):
                a.set_xticks([])
                a.set_yticks([])
            if r == 0:
                axes[r, g].set_title(gen_names[g], fontsize=7)
        axes[r, 0].set_ylabel(label, fontsize=7)
        axes[nr + r, 0].set_ylabel(f"log|F| {label}", fontsize=6)
    fig.suptitle("black-box attack (our reconstruction) at matched PSNR", fontsize=8)
    fig.tight_layout()
    fig.savefig(workdir / "samples_and_spectra.png", dpi=100)
    plt.close(fig)

    # mean spectra: real, each generator, each pseudo-generator family (the traces the attack trains against)
    gs, ps, kernels = bb["surrogate"]
    xr = jnp.asarray(x_real[:200])
    families = min(len(traces.FAMILIES), config.attack.pseudo_gms)
    pseudo = [np.asarray(traces.fakes(kernels, xr, jnp.full((xr.shape[0],), k + 1), jax.random.key(k),
                                      config.attack.pseudo_residue)) for k in range(families)]
    panels = ([("real", x_real[:200])] + [(g, x_fake[y_fake == gi + 1][:200]) for gi, g in enumerate(gen_names)]
              + [(f"pseudo {traces.FAMILIES[int(kernels['family'][k])]}", p) for k, p in enumerate(pseudo)])
    real_spec = np.asarray(_mean_spectrum(jnp.asarray(x_real[:200])))
    fig, axes = plt.subplots(2, len(panels), figsize=(1.5 * len(panels), 3.2), squeeze=False)
    for j, (label, xs) in enumerate(panels):
        s = np.asarray(_mean_spectrum(jnp.asarray(xs)))
        axes[0, j].imshow(s, cmap="magma")
        axes[1, j].imshow(s - real_spec, cmap="RdBu_r", vmin=-2, vmax=2)
        axes[0, j].set_title(label, fontsize=6)
        for a in axes[:, j]:
            a.set_xticks([])
            a.set_yticks([])
    axes[0, 0].set_ylabel("mean log|F|", fontsize=6)
    axes[1, 0].set_ylabel("minus real", fontsize=6)
    fig.tight_layout()
    fig.savefig(workdir / "mean_spectra.png", dpi=110)
    plt.close(fig)

    # training curves: the surrogate's CE (clean training, then frozen) and each attack network's fool loss
    universal = "universal" in config.attack.kinds
    fig, axes = plt.subplots(1, 2 + universal, figsize=(3.7 * (2 + universal), 3))
    axes[0].plot(history["blackbox_surrogate_ce"])
    axes[0].set_title("surrogate CE (clean real + pseudo-fakes)", fontsize=8)
    for r in readings:
        axes[1].plot(history[f"blackbox_fool_{r}"], label=r)
        if universal:
            axes[2].plot(history[f"universal_fool_{r}"], label=r)
    axes[1].set_title("black-box fool CE (frozen surrogate -> real)", fontsize=8)
    if universal:
        axes[2].set_title("universal white-box fool loss (-log(1 - p_source))", fontsize=8)
    for a in axes:
        a.set_xlabel("step")
        a.set_yscale("log")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(workdir / "attack_training.png", dpi=100)
    plt.close(fig)

    bar_plot(workdir / "asr_by_defence.png",
             {f"{a.replace('blackbox_', 'bb ').replace('universal_', 'uni ')}/{d}": table[d][a]["asr"]
              for d in table for a in table[d] if not a.startswith("pgd")},
             title=f"ASR at PSNR {config.attack.target_psnr} dB per attack / defence", ylabel="ASR")


def run(config: Config, workdir: pathlib.Path | str) -> dict[str, Any]:
    """Entry point of `iclr26 run deepfake_attack`: the pipeline, metrics.json, record.json and plots."""
    workdir = pathlib.Path(workdir)
    record = train_and_evaluate(config, workdir)
    (workdir / "record.json").write_text(json.dumps(record, indent=1, default=float) + "\n")
    table = record["table"]
    metrics = {"wall_seconds": record["wall_seconds"]}
    for d in table:
        for a in table[d]:
            metrics[f"asr/{d}/{a}"] = table[d][a]["asr"]
    for d, info in record["attributors"].items():
        metrics[f"clean_acc_min/{d}"] = min(info["clean_acc"].values())
    for g, info in record["generators"].items():
        metrics[f"fid/{g}"] = info["fid"]
    for r, v in record["surrogate"].items():
        if isinstance(v, dict):
            metrics[f"surrogate_acc/{r}"] = v["acc"]
    metrics["surrogate_acc/clean"] = record["surrogate"]["clean_acc"]
    write_metrics(workdir, metrics)
    # metrics.jsonl: one record per point of the attack training curves (window means of the surrogate's CE and
    # each attack network's fool loss; the networks train inside the pipeline, so it is written after it)
    from core.train import MetricsLog
    log = MetricsLog(workdir / "metrics.jsonl", 0, config=config)
    for name, curve in record["attack_history"].items():
        for step, value in zip(curve["step"], curve["mean"]):
            log.write({"step": int(step), "curve": name, "loss": float(value)})
    log.close()
    return metrics

"""Training: a pure jitted GAN step (D and G updated from one generator pass), the arms vmapped, the steps
between evaluations one `lax.scan`.

Every arm (conditioning mode x data regime x ViCiCo) has the same architecture; the arm is a vector of
switches (which conditions G and D see, the GPC probability, the ViCiCo weight), so all arms train in one
compiled program. Fake conditions are drawn from the arm's own dataset (the dataset's camera and semantic
distribution), as EG3D and the paper do.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core.checkpoint import Checkpointer
from core.train import TrainState, check_finite, write_metrics
from core.train import progress as progress_bar  # `progress` is this module's flag

from . import losses as L
from .configs import MODES, REGIMES, Config, parse_arm
from .data import prepare, to_float
from .model import CAM_DIM, Discriminator, Generator, camera_code
from .render import chunked

SWITCHES = ("g_cam", "g_sem", "d_cam", "d_sem", "gpc", "vicico", "mbstd", "map_lr")


def arm_switches(config: Config, arm: str) -> np.ndarray:
    """The arm as numbers (SWITCHES): the conditions G and D see, the GPC probability (camera-conditioned G only),
    the ViCiCo weight, the minibatch-stddev scale (0/1) and the mapping network's lr multiplier (1: none)."""
    a = parse_arm(arm)
    m = MODES[a.mode]
    gpc = (config.train.gpc_prob if a.gpc is None else a.gpc) if m["g_cam"] else 0.0
    return np.array([m["g_cam"], m["g_sem"], m["d_cam"], m["d_sem"], gpc,
                     config.train.vicico_weight if a.vicico else 0.0, float(a.mbstd),
                     config.train.map_lr_mult if a.maplr else 1.0], np.float32)


MAPPING = ("cond", "mapping")  # the generator's parameters that the mapping lr multiplier scales (EG3D: mapping)


def scale_mapping(updates, mult):
    """Multiply the generator's Adam updates of the mapping network and condition embedding by `mult` (an lr
    multiplier: Adam's update is proportional to the lr)."""
    def f(path, u):
        return u * mult if getattr(path[0], "key", None) in MAPPING else u
    return jax.tree_util.tree_map_with_path(f, updates)


def make_models(config: Config):
    """(graphdefs {g, d}, init(key) -> params {g, d}); graphs split once, parameters a plain pytree."""
    cond_dim = CAM_DIM + config.encoder.sem_dim
    res = config.data.res

    def build(key):
        rngs_g, rngs_d = nnx.Rngs(params=jax.random.fold_in(key, 0)), nnx.Rngs(params=jax.random.fold_in(key, 1))
        return (Generator(config.model, cond_dim, res, rngs=rngs_g),
                Discriminator(config.model, cond_dim, res, rngs=rngs_d))

    g, d = nnx.eval_shape(lambda: build(jax.random.key(0)))
    graphdefs = {"g": nnx.split(g, nnx.Param)[0], "d": nnx.split(d, nnx.Param)[0]}

    def init(key):
        g, d = build(key)
        return {"g": nnx.split(g, nnx.Param)[1], "d": nnx.split(d, nnx.Param)[1]}

    return graphdefs, init


def make_optimizer(config: Config) -> dict:
    t = config.train
    return {"g": optax.adam(t.g_lr, b1=t.beta1, b2=t.beta2), "d": optax.adam(t.d_lr, b1=t.beta1, b2=t.beta2)}


def init_state(config: Config, init, tx: dict, key: jax.Array) -> TrainState:
    """params {g, d, g_ema}: G_ema starts as a copy of G and is never optimised."""
    params = init(jax.random.fold_in(key, 0))
    params["g_ema"] = jax.tree.map(jnp.copy, params["g"])
    return TrainState(params, {k: tx[k].init(params[k]) for k in tx}, jnp.zeros((), jnp.int32),
                      jax.random.fold_in(key, 1))


def ema_beta(config: Config, images_seen: jax.Array) -> jax.Array:
    """StyleGAN2-ADA/EG3D G_ema decay after `images_seen` images: half-life ema_kimg * batch / 32 thousand
    images (EG3D's scaling), capped at ema_rampup * images_seen early on, so G_ema follows G closely at first."""
    t = config.train
    if t.ema_kimg == 0:
        return jnp.zeros(())
    half_life = jnp.minimum(t.ema_kimg * 1000.0 * t.batch_size / 32, images_seen * t.ema_rampup)
    return 0.5 ** (t.batch_size / jnp.maximum(half_life, 1e-8))


def downsample(x: jax.Array, factor: int) -> jax.Array:
    """Area average (B, H, W, C) -> (B, H / f, W / f, C): the real 'raw' image and mask for the dual D."""
    b, h, w, c = x.shape
    return x.reshape(b, h // factor, factor, w // factor, factor, c).mean((2, 4))


def sample_batch(data: dict, regime: jax.Array, key: jax.Array, batch_size: int) -> dict:
    """A training batch from the stacked datasets (2, N, ...) of the arm's regime: real images with their
    conditions and, independently drawn, the fake examples' render cameras, semantics and GPC swap cameras."""
    n = data["yaw"].shape[1]
    kr, kg, ks = jax.random.split(key, 3)
    ir, ig, isw = (jax.random.randint(k, (batch_size,), 0, n) for k in (kr, kg, ks))
    return {"images": to_float(data["images"][regime, ir]),
            "masks": data["masks"][regime, ir].astype(jnp.float32)[..., None] / 255.0,
            "yaw": data["yaw"][regime, ir], "pitch": data["pitch"][regime, ir], "sem": data["sem"][regime, ir],
            "gen_yaw": data["yaw"][regime, ig], "gen_pitch": data["pitch"][regime, ig],
            "gen_sem": data["sem"][regime, ig],
            "swap_yaw": data["yaw"][regime, isw], "swap_pitch": data["pitch"][regime, isw]}


def make_train_step(config: Config, graphdefs: dict, tx: dict):
    """step(state, batch, switches) -> (state, metrics): pure; for jit, vmap over arms, scan and sharded batches.
    D and G take one Adam step each; G_ema moves toward the new G."""
    tc, mc = config.train, config.model
    factor = config.data.res // mc.raw_res

    def D(dp, image, raw, mask, cond, mbstd):
        return nnx.merge(graphdefs["d"], dp)(image, raw, mask, cond, mbstd)

    def step(state: TrainState, batch: dict, sw: jax.Array):
        key = jax.random.fold_in(state.key, state.step)
        kz, kr, kgpc, kv = jax.random.split(key, 4)
        b = batch["images"].shape[0]
        z = jax.random.normal(kz, (b, mc.z_dim))
        gen_cam = camera_code(batch["gen_yaw"], batch["gen_pitch"])
        g_cam = L.gpc_swap(kgpc, gen_cam, camera_code(batch["swap_yaw"], batch["swap_pitch"]), sw[4])
        g_cond = jnp.concatenate([g_cam * sw[0], batch["gen_sem"] * sw[1]], -1)

        def generate(gp):
            out = nnx.merge(graphdefs["g"], gp)(z, g_cond, batch["gen_yaw"], batch["gen_pitch"], kr)
            return {k: out[k] for k in ("image", "raw", "mask")}

        fake, g_vjp = jax.vjp(generate, state.params["g"])
        d_fake_cond = jnp.concatenate([gen_cam * sw[2], batch["gen_sem"] * sw[3]], -1)
        real_cam = camera_code(batch["yaw"], batch["pitch"])
        d_real_cond = jnp.concatenate([real_cam * sw[2], batch["sem"] * sw[3]], -1)
        real = {"image": batch["images"], "raw": downsample(batch["images"], factor),
                "mask": downsample(batch["masks"], factor)}
        cam_sh, sem_sh, _ = L.shuffle_conditions(kv, real_cam, batch["sem"])
        d_mis_cond = jnp.concatenate([cam_sh * sw[2], sem_sh * sw[3]], -1)

        def d_loss(dp):
            lf = D(dp, fake["image"], fake["raw"], fake["mask"], d_fake_cond, sw[6])
            lr, r1 = L.r1_penalty(lambda x: D(dp, x["image"], x["raw"], x["mask"], d_real_cond, sw[6]), real)
            lv = D(dp, real["image"], real["raw"], real["mask"], d_mis_cond, sw[6])
            adv = L.d_loss_ns(lr, lf)
            vic = L.vicico_loss(lv)
            total = adv + 0.5 * tc.r1_gamma * r1 + sw[5] * vic
            return total, {"d_adv": adv, "r1": r1, "vicico": vic, "d_real": jnp.mean(lr), "d_fake": jnp.mean(lf)}

        (d_total, d_metrics), d_grads = jax.value_and_grad(d_loss, has_aux=True)(
            jax.tree.map(jax.lax.stop_gradient, state.params["d"]))

        def g_loss(f):
            return L.g_loss_ns(D(state.params["d"], f["image"], f["raw"], f["mask"], d_fake_cond, sw[6]))

        g_total, f_grad = jax.value_and_grad(g_loss)(fake)
        (g_grads,) = g_vjp(f_grad)
        grads = {"g": g_grads, "d": d_grads}
        new_params, new_opt = {}, {}
        for k in ("g", "d"):
            updates, new_opt[k] = tx[k].update(grads[k], state.opt_state[k], state.params[k])
            if k == "g":
                updates = scale_mapping(updates, sw[7])
            new_params[k] = optax.apply_updates(state.params[k], updates)
        beta = ema_beta(config, ((state.step + 1) * b).astype(jnp.float32))
        new_params["g_ema"] = jax.tree.map(lambda e, g: g + beta * (e - g), state.params["g_ema"], new_params["g"])
        metrics = {"d_loss": d_total, "g_loss": g_total, **d_metrics,
                   "fake_mask": jnp.mean(fake["mask"]), "real_mask": jnp.mean(real["mask"])}
        return TrainState(new_params, new_opt, state.step + 1, state.key), metrics

    return step


def compiler_options(config: Config) -> dict:
    return {"xla_backend_optimization_level": 0} if config.train.fast_compile else {}


def make_chunk_fn(config: Config, step, n_steps: int):
    """chunk(states, data, regimes, switches): vmap over arms of a scan of `n_steps` sampled-batch steps."""
    bs = config.train.batch_size

    def one_arm(state, data, regime, sw):
        def body(state, _):
            key = jax.random.fold_in(jax.random.fold_in(state.key, state.step), 7)
            return step(state, sample_batch(data, regime, key, bs), sw)
        state, metrics = jax.lax.scan(body, state, None, length=n_steps)
        return state, jax.tree.map(jnp.mean, metrics)

    return jax.jit(jax.vmap(one_arm, in_axes=(0, None, 0, 0)), donate_argnums=0,
                   compiler_options=compiler_options(config))


def make_generate_fn(config: Config, graphdefs: dict, chunk: int = 64):
    """generate(g_params, z, cond, yaw, pitch) -> (images (N, res, res, 3) in [-1, 1], masks (N, r, r)),
    deterministic ray samples, jitted in fixed-size chunks."""
    chunk = min(chunk, config.train.eval_samples, config.train.curve_samples)

    @functools.partial(jax.jit, compiler_options=compiler_options(config))
    def gen_chunk(gp, z, cond, yaw, pitch):
        o = nnx.merge(graphdefs["g"], gp)(z, cond, yaw, pitch)
        return o["image"], o["mask"][..., 0]

    def generate(gp, z, cond, yaw, pitch):
        return chunked(lambda *a: gen_chunk(gp, *a), chunk)(z, cond, jnp.asarray(yaw), jnp.asarray(pitch))

    return generate


def _programs(config: Config, steps_per_chunk: int):
    """The compiled programs do not depend on the seed: one compile serves every seed of a benchmark."""
    return _programs_cached(dataclasses.replace(config, train=dataclasses.replace(config.train, seed=0)),
                            steps_per_chunk)


@jax.jit
def arm_params(tree, i):
    """Arm i's slice of the arms' stacked parameters: one program for the whole tree (eagerly, each leaf's
    index would compile two programs of its own)."""
    return jax.tree.map(lambda x: x[i], tree)


@functools.lru_cache(maxsize=4)
def _programs_cached(config: Config, steps_per_chunk: int):
    graphdefs, init = make_models(config)
    tx = make_optimizer(config)
    step = make_train_step(config, graphdefs, tx)
    return graphdefs, init, tx, step, make_chunk_fn(config, step, steps_per_chunk), make_generate_fn(config, graphdefs)


def stack_data(prepared: dict) -> dict:
    keys = ("images", "masks", "yaw", "pitch", "sem")
    return {k: jnp.stack([jnp.asarray(prepared[r][k]) for r in REGIMES]) for k in keys}


def train_and_evaluate(config: Config, workdir: str | pathlib.Path, *, prepared: dict | None = None,
                       evaluator=None, progress: bool = True) -> dict:
    """Train every arm of `config` together; evaluate FD-random during training and all metrics at the end."""
    from .metrics import Evaluator

    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    prepared = prepare(config.data, config.encoder) if prepared is None else prepared
    evaluator = Evaluator(config, prepared) if evaluator is None else evaluator
    tc = config.train
    every = min(tc.eval_every, tc.steps)
    graphdefs, init, tx, step, chunk_fn, generate = _programs(config, every)
    arms = list(config.arms)
    switches = jnp.asarray(np.stack([arm_switches(config, a) for a in arms]))
    regimes = jnp.asarray([REGIMES.index(parse_arm(a).regime) for a in arms])
    keys = jax.random.split(jax.random.key(tc.seed), len(arms))
    # same initialisation for every arm (one seed): arms differ only in their switches and data
    init_fn = jax.jit(jax.vmap(lambda k: init_state(config, init, tx, k)),
                      compiler_options={"xla_backend_optimization_level": 0})
    states = init_fn(jnp.stack([keys[0]] * len(arms)))
    data = stack_data(prepared)
    history = {"images_seen": [], "fd_random": {a: [] for a in arms}, "metrics": []}
    # chunk_times[i] for i in compiled_in include compiling (the first chunk each process runs): not speed
    chunk_times, compiled_in, done, wall_before = [], [0], 0, 0.0
    n_chunks = -(-tc.steps // every)
    ckpt = Checkpointer(workdir / "checkpoints", keep=1, config=config)
    if ckpt.latest_step() is not None:  # a killed run resumes after its last finished chunk
        states, saved = ckpt.restore(states)
        history, chunk_times, done = saved["history"], saved["chunk_times"], saved["chunks_done"]
        compiled_in, wall_before = saved["compiled_in"] + [done], saved["wall_seconds"]
        print(f"[headgan] resumed from {ckpt.directory} after {done} of {n_chunks} chunks", flush=True)
    from core.train import MetricsLog
    log = MetricsLog(workdir / "metrics.jsonl", done * every, config=config)  # one record per chunk
    bar = progress_bar(total=n_chunks * every * tc.batch_size, initial=done * every * tc.batch_size,
                       desc="headgan images/arm", disable=not progress)
    for c in range(done, n_chunks):
        t = time.time()
        states, m = chunk_fn(states, data, regimes, switches)
        m = jax.device_get(m)
        chunk_times.append(time.time() - t)
        # every metric of the chunk and the parameter norm, before anything is recorded or checkpointed
        check_finite({k: np.where(np.isfinite(v).all(), 0.0, np.nan) for k, v in m.items()}, states.params,
                     first=c * every + 1, last=(c + 1) * every, checkpointer=ckpt)
        seen = (c + 1) * every * tc.batch_size
        history["images_seen"].append(seen)
        history["metrics"].append({k: np.asarray(v).tolist() for k, v in m.items()})
        for i, a in enumerate(arms):
            gp = arm_params(states.params["g_ema"], i)
            history["fd_random"][a].append(float(evaluator.fd_random(generate, gp, a, seed=c,
                                                                     n=tc.curve_samples)))
        log.write({"step": (c + 1) * every, "images_seen": seen,
                   **{f"{k}/{a}": float(np.asarray(v)[i]) for k, v in m.items() for i, a in enumerate(arms)},
                   **{f"fd_random/{a}": history["fd_random"][a][-1] for a in arms}})
        ckpt.save(c + 1, states, data_state={"history": history, "chunk_times": chunk_times, "chunks_done": c + 1,
                                             "compiled_in": compiled_in,
                                             "wall_seconds": wall_before + time.time() - t0})
        bar.update(every * tc.batch_size)
        if progress:
            bar.write(f"[headgan] {seen} images/arm  {chunk_times[-1]:.1f}s  FD-random " +
                      "  ".join(f"{a}={history['fd_random'][a][-1]:.2f}" for a in arms))
    bar.close()
    ckpt.close()
    log.close()
    later = [t for i, t in enumerate(chunk_times) if i not in compiled_in] or chunk_times
    imgs_per_s = len(arms) * every * tc.batch_size / float(np.mean(later))
    final = {}
    for i, a in enumerate(arms):
        gp = arm_params(states.params["g_ema"], i)
        final[a] = evaluator.evaluate(generate, gp, a)
    return {"arms": arms, "final": final, "history": history, "g_params": states.params["g_ema"], "generate": generate,
            "speed": {"arms_in_parallel": len(arms), "images_per_s_all_arms": imgs_per_s,
                      "batch_size": tc.batch_size, "steps": n_chunks * every,
                      "compile_and_first_chunk_s": chunk_times[compiled_in[0]]},
            "encoders": {"semantic": prepared["semantic_info"], "features": evaluator.info},
            "wall_seconds": wall_before + time.time() - t0}


def write_plots(result: dict, config: Config, workdir: pathlib.Path, prefix: str = "") -> list[str]:
    """FD-random against images seen, and one 360-degree rotation grid per arm."""
    from core.plots import image_grid, line_plot

    from .metrics import rotation_images

    workdir = pathlib.Path(workdir)
    seen = np.array(result["history"]["images_seen"])
    paths = [line_plot(workdir / f"{prefix}fd_random.png",
                       {a: (seen, np.array(v)) for a, v in result["history"]["fd_random"].items()},
                       title="FD-random (feature Frechet distance) vs images seen", xlabel="images seen per arm",
                       ylabel="FD-random", logy=True)]
    for i, a in enumerate(result["arms"]):
        gp = arm_params(result["g_params"], i)
        imgs, titles = rotation_images(config, result["generate"], gp, a, result["evaluator"])
        slug = a.replace("/", "_").replace("+", "_")
        paths.append(image_grid(workdir / f"{prefix}rotation_{slug}.png", imgs, ncols=8, titles=titles))
    return [str(p) for p in paths]


def run(config: Config, workdir: str | pathlib.Path) -> dict:
    """The registry entry: train all arms, write metrics.json, results.json and PNG plots into workdir."""
    from core.config import to_dict

    from .metrics import Evaluator

    workdir = pathlib.Path(workdir)
    prepared = prepare(config.data, config.encoder)
    evaluator = Evaluator(config, prepared)
    result = train_and_evaluate(config, workdir, prepared=prepared, evaluator=evaluator)
    result["evaluator"] = evaluator
    plots = write_plots(result, config, workdir)
    metrics = {f"{a}/{k}": v for a, f in result["final"].items() for k, v in f.items() if np.isscalar(v)}
    metrics["images_per_s_all_arms"] = result["speed"]["images_per_s_all_arms"]
    metrics["wall_seconds"] = result["wall_seconds"]
    write_metrics(workdir, metrics)
    keep = {k: result[k] for k in ("arms", "final", "history", "speed", "encoders", "wall_seconds")}
    (workdir / "results.json").write_text(json.dumps({"config": to_dict(config), **keep, "plots": plots},
                                                     indent=1, default=float))
    return metrics

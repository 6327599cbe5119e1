"""The real training function on the tiny preset, a sharded step on 8 fake devices, and config errors."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core.config import ConfigError, apply_overrides
from core.sharding import make_mesh, replicate, shard_batch
from generative.headgan import EXPERIMENT, configs, train
from generative.headgan.configs import parse_arm


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One uninterrupted tiny run through the registry entry, shared by the smoke and the resume test: the
    metrics it returns, its workdir and what `train_and_evaluate` returned inside it (with its inputs)."""
    cfg = configs.tiny()
    folder = tmp_path_factory.mktemp("headgan_tiny") / "full"
    seen = {}
    real = train.train_and_evaluate

    def spy(config, workdir, **kw):
        seen["result"] = real(config, workdir, **kw)
        seen["prepared"] = kw["prepared"]
        return seen["result"]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "train_and_evaluate", spy)
        metrics = EXPERIMENT.run(cfg, folder)
    return cfg, metrics, folder, seen


def test_tiny_run_writes_metrics_and_plots(tiny_run):
    cfg, metrics, tmp_path, _ = tiny_run
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == pytest.approx(metrics)
    for a in cfg.arms:
        for k in ("fd_random", "fd_front", "fd_side", "fd_back", "fd_front_std", "diversity_back", "xview_spread"):
            assert np.isfinite(metrics[f"{a}/{k}"]) and metrics[f"{a}/{k}"] >= 0, (a, k)
        slug = a.replace("/", "_").replace("+", "_")
        assert (tmp_path / f"rotation_{slug}.png").stat().st_size > 1000
        floors = {b: metrics[f"{a}/real_fd_{b}"] for b in ("front", "back")}
        assert all(v > 0 for v in floors.values())  # a finite sample sits above the population's FD of 0
        assert metrics[f"{a}/back_front_excess_gap"] == pytest.approx(
            metrics[f"{a}/back_front_gap"] - floors["back"] + floors["front"])
    assert (tmp_path / "fd_random.png").stat().st_size > 1000
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["history"]["images_seen"] == [16, 32]  # 2 chunks of 2 steps x batch 8
    assert metrics["images_per_s_all_arms"] > 0
    last = res["history"]["metrics"][-1]
    assert np.all(np.isfinite(last["d_loss"])) and np.all(np.isfinite(last["r1"]))
    # ViCiCo is active only in the arm that asks for it: its D loss includes the term
    assert last["vicico"][1] > 0


def test_killed_run_resumes_and_ends_where_an_uninterrupted_one_ends(tiny_run, tmp_path, monkeypatch):
    cfg, _, full_dir, seen = tiny_run  # the uninterrupted run (its own data and encoders, as a fresh process)
    full = seen["result"]
    programs = train._programs

    def killed_after_one_chunk(*args):
        *rest, chunk_fn, generate = programs(*args)
        calls = []

        def chunk(*a):
            if calls:
                raise KeyboardInterrupt("killed")
            calls.append(1)
            return chunk_fn(*a)
        return (*rest, chunk, generate)

    monkeypatch.setattr(train, "_programs", killed_after_one_chunk)
    # the killed run reuses the full run's data; the resumed one prepares its own (as a fresh process would)
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(cfg, tmp_path / "killed", prepared=seen["prepared"], progress=False)
    monkeypatch.setattr(train, "_programs", programs)
    resumed = train.train_and_evaluate(cfg, tmp_path / "killed", progress=False)
    assert resumed["history"]["images_seen"] == full["history"]["images_seen"] == [16, 32]
    assert resumed["history"]["fd_random"] == full["history"]["fd_random"]
    assert resumed["final"] == full["final"]
    for a, b in zip(jax.tree.leaves(full["g_params"]), jax.tree.leaves(resumed["g_params"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # metrics.jsonl: a record per chunk, none repeated after the resume, equal to the uninterrupted run's
    def records(folder):
        return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["images_seen"] for r in records(tmp_path / "killed")] == [16, 32]
    assert records(tmp_path / "killed") == records(full_dir)


def test_ema_beta_schedule():
    cfg = configs.tiny()  # batch 8: half-life min(10k * 8 / 32, 0.05 * images seen) images
    for seen, half_life in ((8, 0.4), (800, 40.0), (1e6, 2500.0)):
        np.testing.assert_allclose(float(train.ema_beta(cfg, jnp.float32(seen))), 0.5 ** (8 / half_life), rtol=1e-6)
    off = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, ema_kimg=0.0))
    assert float(train.ema_beta(off, jnp.float32(1e6))) == 0.0


def test_sharded_step_equals_single_device():
    cfg = configs.tiny()  # a fast ramp-up, so that G_ema's first step is far from a copy of G
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, ema_rampup=10.0))
    graphdefs, init = train.make_models(cfg)
    tx = {"g": optax.sgd(0.05), "d": optax.sgd(0.05)}  # SGD: Adam's first step amplifies rounding noise
    state = train.init_state(cfg, init, tx, jax.random.key(0))
    n = 8
    rng = np.random.default_rng(0)
    d = {"images": jnp.asarray(rng.integers(0, 256, (2, n, 16, 16, 3)), jnp.uint8),
         "masks": jnp.asarray(rng.integers(0, 256, (2, n, 16, 16)), jnp.uint8),
         "yaw": jnp.asarray(rng.uniform(-3, 3, (2, n)), jnp.float32),
         "pitch": jnp.asarray(rng.uniform(-0.3, 0.3, (2, n)), jnp.float32),
         "sem": jnp.asarray(rng.normal(size=(2, n, cfg.encoder.sem_dim)), jnp.float32)}
    batch = train.sample_batch(d, jnp.int32(1), jax.random.key(3), 8)
    sw = jnp.asarray(train.arm_switches(cfg, "semantic/balanced+vicico+fix"))  # + minibatch std across devices
    step = jax.jit(train.make_train_step(cfg, graphdefs, tx), compiler_options=train.compiler_options(cfg))
    single, m1 = step(state, batch, sw)
    mesh = make_mesh(data=8)
    sharded, m8 = step(replicate(state, mesh), shard_batch(jax.device_get(batch), mesh), replicate(sw, mesh))
    assert len(jax.tree.leaves(sharded.params)[0].sharding.device_set) == 8
    for k in m1:
        np.testing.assert_allclose(np.asarray(m8[k]), np.asarray(m1[k]), rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)
    # G_ema after the first step: beta * G_0 + (1 - beta) * G_1, with beta from 8 images seen
    beta = float(train.ema_beta(cfg, jnp.float32(8)))
    np.testing.assert_allclose(beta, 0.5 ** (8 / 80), rtol=1e-6)
    for g0, g1, e1 in zip(*(jax.tree.leaves(p) for p in (state.params["g"], single.params["g"],
                                                         single.params["g_ema"]))):
        np.testing.assert_allclose(np.asarray(e1), beta * np.asarray(g0) + (1 - beta) * np.asarray(g1),
                                   rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.asarray(jax.tree.leaves(single.params["g"])[0]),
                           np.asarray(jax.tree.leaves(state.params["g"])[0]))
    assert float(m1["vicico"]) > 0 and float(m1["r1"]) > 0


def test_arm_switches():
    cfg = configs.tiny()
    f32 = lambda *v: np.array(v, np.float32)
    np.testing.assert_array_equal(train.arm_switches(cfg, "camera/imbalanced"),
                                  f32(1, 0, 1, 0, cfg.train.gpc_prob, 0, 0, 1))
    np.testing.assert_array_equal(train.arm_switches(cfg, "semantic/balanced+vicico"),
                                  f32(0, 1, 1, 1, 0, cfg.train.vicico_weight, 0, 1))
    np.testing.assert_array_equal(train.arm_switches(cfg, "camera_semantic/balanced"),
                                  f32(1, 1, 1, 1, cfg.train.gpc_prob, 0, 0, 1))


def test_presets_and_config_errors():
    assert {"tiny", "demo", "bench", "gpu", "paper"} <= set(EXPERIMENT.presets)
    paper = EXPERIMENT.presets["paper"]
    assert paper.model.decoder_hidden == 64 and paper.model.feat_dim == 32 and paper.train.gpc_prob == 0.7
    cfg = configs.tiny()
    assert apply_overrides(cfg, ["train.gpc_prob=0.5"]).train.gpc_prob == 0.5
    with pytest.raises(ConfigError, match=r"train.gpc_prob=1.5: expected a number in \[0, 1\]"):
        apply_overrides(cfg, ["train.gpc_prob=1.5"])
    with pytest.raises(ConfigError, match="arms"):
        apply_overrides(cfg, ["arms=camera/nowhere"])
    with pytest.raises(ConfigError, match="model.raw_res"):
        apply_overrides(cfg, ["model.raw_res=6"])
    with pytest.raises(ConfigError, match="data.n_images"):
        apply_overrides(cfg, ["data.n_images=130"])
    with pytest.raises(ValueError, match="arm 'semantic': expected MODE/REGIME"):
        parse_arm("semantic")
    assert parse_arm("semantic/balanced+vicico") == configs.Arm(mode="semantic", regime="balanced", vicico=True)

"""Smoke run of the real experiment on the tiny preset, a sharded sweep, and config errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from core.config import ConfigError, apply_overrides
from interp.scale_analysis import EXPERIMENT, configs, sample, train


def test_tiny_preset_runs_and_writes_outputs(tmp_path):
    metrics = EXPERIMENT.run(EXPERIMENT.presets["tiny"], tmp_path)
    assert (tmp_path / "metrics.json").exists() and (tmp_path / "alignment.png").exists()
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert set(saved["claims"]) == {"two_d_p_star_linear_in_d", "two_layer_p_star_proportional_to_energy",
                                    "three_layer_transition_in_n1"}
    rows = json.loads((tmp_path / "rows.json").read_text())
    for r in rows:
        assert len(r["A_f"]) == len(r["P"]) and all(np.isfinite(v) for v in r["A_f"])
        assert r["equilibration"]["diverged_chains"] == 0
        assert r["predicted"]["pattern"] in ("Spec", "GP-Spec", "Spec-Mag", "GFL", "GP", "GP-GP")
    assert metrics["wall_seconds"] > 0


def test_sharded_sweep_equals_single_device(devices):
    problem = sample.make_problem(jax.random.key(0), arch="two", d=4, widths=(4,), kappa=0.1, n_test=64,
                                  n_probe=16, spec_threshold=0.5)
    sweep = sample.make_sweep(problem, p_max=16, n_records=4, record_every=5, step_size=0.5, friction=1.0,
                              curvature=1.0, n_planted=2)
    keys = sample.split_seed_keys(0, 2)
    keys = jnp.stack([keys[i % 2] for i in range(8)])
    ps = jnp.array([4, 4, 8, 8, 12, 12, 16, 16], jnp.int32)
    planted = jnp.array([False, True] * 4)
    single = sweep(keys, ps, planted)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    shard = NamedSharding(mesh, PartitionSpec("data"))
    sharded = sweep(*(jax.device_put(a, shard) for a in (keys, ps, planted)))
    assert sharded["A_f"].sharding.num_devices == 8
    for k in single:
        np.testing.assert_allclose(np.asarray(sharded[k]), np.asarray(single[k]), rtol=1e-4, atol=1e-5)


def test_config_errors():
    with pytest.raises(ConfigError, match="vacuous"):
        configs.Config(kappa=0.0)
    with pytest.raises(ConfigError, match="two_d"):
        configs.Config(two_d=(0, 16))
    with pytest.raises(ConfigError, match="d larger than the data"):
        configs.Config(n_test=8, n_probe=8, two_d=(16,))
    with pytest.raises(ConfigError, match="sampler.step_size"):
        apply_overrides(configs.tiny(), ["sampler.step_size=0"])
    with pytest.raises(ValueError, match="kappa"):
        sample.make_problem(jax.random.key(0), arch="two", d=4, widths=(4,), kappa=0.0, n_test=8, n_probe=4,
                            spec_threshold=0.5)
    with pytest.raises(ValueError, match="sweep"):
        train.sweep_points(configs.tiny(), "nope")
    assert apply_overrides(configs.tiny(), ["kappa=0.5"]).kappa == 0.5



def test_training_rows_are_nested_across_buckets():
    """Row i of a seed's training data does not depend on the bucket's p_max: sample sizes are nested."""
    w_star = jnp.eye(4)[0]
    key = sample.split_seed_keys(0, 1)[0]
    x8, y8 = sample.training_data(key, 8, w_star)
    x3, y3 = sample.training_data(key, 3, w_star)
    np.testing.assert_array_equal(np.asarray(x8[:3]), np.asarray(x3))
    np.testing.assert_array_equal(np.asarray(y8[:3]), np.asarray(y3))
    assert x8.shape == (8, 4) and not np.allclose(np.asarray(x8[3]), np.asarray(x8[4]))


def test_planted_init_is_aligned_and_its_readout_is_the_conditional_mode():
    problem = sample.make_problem(jax.random.key(0), arch="two", d=4, widths=(6,), kappa=0.1, n_test=16,
                                  n_probe=8, spec_threshold=0.5)
    x, y = sample.training_data(jax.random.key(1), 32, problem.w_star)
    mask = (jnp.arange(32) < 20).astype(x.dtype)
    q = sample.planted_init(jax.random.key(2), problem, 3, x, y, mask)
    cos = np.abs(np.asarray(q["w1"][:3] @ problem.w_star) / np.linalg.norm(np.asarray(q["w1"][:3]), axis=1))
    np.testing.assert_allclose(cos, 1.0, rtol=1e-5)
    g = jax.grad(lambda a: sample.potential({**q, "a": a}, x, y, mask, problem.kappa))(q["a"])
    assert float(jnp.max(jnp.abs(g))) < 1e-3 * (1 + float(jnp.max(jnp.abs(q["a"]))))

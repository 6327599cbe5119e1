"""Smoke run of the real training + analysis on the tiny preset, a sharded forward on 8 fake devices, and
config errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import sharding as core_sharding
from core.config import ConfigError, apply_overrides
from core.lm import model as model_lib
from interp.concept_vectors import EXPERIMENT
from interp.concept_vectors import heads as heads_lib
from interp.concept_vectors.configs import presets
from interp.concept_vectors.train import run
from interp.concept_vectors.world import World, WorldConfig


def test_tiny_run_writes_metrics_and_heat_maps(tmp_path):
    config = presets()["tiny"]
    metrics = run(config, tmp_path)
    for name in ("cie.png", "rsa_concept.png", "rsa_format.png", "steering.png", "loss.png", "metrics.json",
                 "analysis.json"):
        assert (tmp_path / name).exists(), name
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    L, H = config.model.num_layers, config.model.num_heads
    assert np.shape(analysis["cie"]) == (L, H) and np.shape(analysis["rsa"]["concept"]) == (L, H)
    assert len(metrics["FV/heads"]) == config.top_k and len(metrics["CV/heads"]) == config.top_k
    assert np.isfinite(metrics["final_loss"]) and 0 <= metrics["jaccard_FV_CV"] <= 1
    assert all(-1.0 <= metrics[f"{m}/cos_OE_MC"] <= 1.0 for m in ("FV", "CV", "random"))
    # the steering rows cover every layer x weight for each method, extraction cell and concept
    zs = [r for r in analysis["steer_rows"] if r["setting"] == "zero_shot"]
    assert len(zs) == 3 * 5 * 4 * L * len(config.steer_weights)


def test_sharded_last_token_forward_equals_one_device(devices):
    config = presets()["tiny"]
    world = World(config.world)
    graphdef, params = model_lib.init(config.model, jax.random.key(0))
    cells = world.train_cells()[:4]
    from interp.concept_vectors.pipeline import cell_prompts
    from interp.concept_vectors.world import left_pad
    tokens, _, _ = cell_prompts(world, cells, 4, 3, seed=0)
    tk, mk = left_pad(tokens)
    z1, lp1 = heads_lib.last_token_forward(graphdef, params, jnp.asarray(tk), jnp.asarray(mk))
    mesh = core_sharding.make_mesh(data=8)
    with jax.set_mesh(mesh):
        stk, smk = core_sharding.shard_batch((tk, mk), mesh)
        z8, lp8 = heads_lib.last_token_forward(graphdef, params, stk, smk)
    assert len(stk.sharding.device_set) == 8
    np.testing.assert_allclose(np.asarray(z8), np.asarray(z1), atol=1e-5)
    np.testing.assert_allclose(np.asarray(lp8), np.asarray(lp1), atol=1e-5)


def test_bad_config_values_name_the_field():
    config = presets()["tiny"]
    with pytest.raises(ConfigError, match="top_k=99"):
        apply_overrides(config, ["top_k=99"])
    with pytest.raises(ConfigError, match="world.held_out_concept='color'"):
        WorldConfig(held_out_concept="color")
    with pytest.raises(ConfigError, match="shots=9"):
        apply_overrides(config, ["shots=9"])
    assert set(EXPERIMENT.presets) == {"tiny", "demo", "paper"}

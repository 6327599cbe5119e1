"""The learned card selector: encoding, a sharded training step equal to the single-device one, and a smoke
run of the real experiment on the tiny preset."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from helpers import assert_trees_close

from core import sharding
from core.train import init_train_state, make_train_step
from rl_tools.a2a_security import EXPERIMENT, scenarios, selector


def test_encode_pads_truncates_and_maps_non_ascii():
    chars = selector.encode(["ab", "é" + "x" * 300], max_chars=8)
    assert chars.shape == (2, 8) and chars.dtype == np.int32
    assert chars[0].tolist() == [97, 98, 0, 0, 0, 0, 0, 0]
    assert chars[1, 0] == ord("?") and chars[1, 1:].tolist() == [120] * 7


def test_card_pairs_are_balanced_and_seeded():
    texts, labels = selector.card_pairs(20, seed=1)
    assert len(texts) == 40 and labels.sum() == 20
    assert selector.card_pairs(20, seed=1)[0] == texts and selector.card_pairs(20, seed=2)[0] != texts


def test_sharded_step_equals_single_device_step(devices):
    texts, labels = selector.card_pairs(8, seed=0)
    batch = {"chars": selector.encode(texts, 64), "label": labels}
    model = selector.CardEncoder(width=16, heads=2, max_chars=64, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)

    def loss_fn(params, batch, key):
        logits = nnx.merge(graphdef, params)(batch["chars"])
        return optax.sigmoid_binary_cross_entropy(logits, batch["label"].astype(jnp.float32)).mean(), {}

    # SGD, not Adam: the attention key bias has a gradient that is zero up to rounding, and Adam's first step
    # scales rounding noise up to the learning rate, so it would compare reduction orders, not the sharding
    tx = optax.sgd(0.5)
    single, metrics_single = make_train_step(loss_fn, tx, donate=False)(
        init_train_state(params, tx, jax.random.key(0)), jax.tree.map(jnp.asarray, batch))
    mesh = sharding.make_mesh()
    state = sharding.replicate(init_train_state(params, tx, jax.random.key(0)), mesh)
    step = make_train_step(loss_fn, tx, donate=False, state_sharding=jax.tree.map(lambda x: x.sharding, state),
                           batch_sharding=sharding.batch_sharding(mesh))
    sharded, metrics_sharded = step(state, sharding.shard_batch(batch, mesh))
    assert len(sharded.params["head"]["kernel"].value.sharding.device_set) == 8
    assert_trees_close(sharded.params, single.params, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(metrics_sharded["loss"], metrics_single["loss"], rtol=1e-5)


def test_tiny_experiment_runs_end_to_end(tmp_path):
    metrics = EXPERIMENT.run(EXPERIMENT.config("tiny"), tmp_path)
    for attack in scenarios.ATTACKS:
        assert metrics[f"asr/{attack}/naive"] == 1.0 and metrics[f"asr/{attack}/hardened"] == 0.0
    assert metrics["benign_utility/hardened"] == 1.0
    assert 0.0 <= metrics["selector_test_accuracy"] <= 1.0
    assert (tmp_path / "asr_by_attack.png").exists() and (tmp_path / "spoofing_vs_k.png").exists()
    lines = (tmp_path / "cases.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 2 * len(scenarios.ATTACKS) and json.loads(lines[0])["attack"] == "AS"
    assert "| AS | travel | naive | 1.00 |" in (tmp_path / "safety_utility.md").read_text()

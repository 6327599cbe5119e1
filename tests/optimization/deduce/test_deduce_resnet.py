"""ResNet-18 with batch norm (the `gpu` preset's backbone) on random 8x8 data: shapes, batch-norm modes, the
running statistics kept out of gradients, and (slow) one trainer step of the released form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from optimization.deduce import PRESETS, ModelConfig
from optimization.deduce.model import make_net


@pytest.fixture(scope="module")
def net_params():
    net = make_net(ModelConfig(arch="resnet18", width=4), (8, 8, 3), 10)
    return net, jax.jit(net.init)(jax.random.key(0))


def test_resnet18_shapes_and_batch_norm_modes(net_params):
    net, params = net_params
    x = jax.random.normal(jax.random.key(1), (6, 8, 8, 3)) * 2.0 + 1.0
    apply, apply_train = jax.jit(net.apply), jax.jit(net.apply_train)
    logits, hid = apply(params, x)
    assert logits.shape == (6, 10) and hid["features"].shape == (6, 32)
    n_conv = sum(1 for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]
                 if str(path[-1].key) == "kernel" and np.ndim(_) == 4)
    assert n_conv == 17 + 3          # 17 3x3 convs (stem + 16 in blocks) + 3 1x1 shortcuts
    lt, _, stats = apply_train(params, x)
    assert np.isfinite(np.asarray(lt)).all()
    # the stem's running mean moves 10% of the way to the batch mean
    h = jax.lax.conv_general_dilated(x, params["stem"]["kernel"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(stats[("bn_stem",)]["mean"], 0.1 * np.asarray(h).mean((0, 1, 2)), rtol=1e-4,
                               atol=1e-6)
    updated = net.set_stats(params, stats)
    np.testing.assert_allclose(updated["s1b0"]["bn_short"]["var"], stats[("s1b0", "bn_short")]["var"])
    assert float(jnp.abs(updated["s0b0"]["bn1"]["mean"]).sum()) > 0 and float(params["s0b0"]["bn1"]["mean"].sum()) == 0
    # training mode normalises with the batch: scaling the input (no conv bias) changes nothing, but it does
    # change the evaluation-mode output, which uses the running statistics
    lt2, _, _ = apply_train(params, x * 3.0)
    assert not np.allclose(np.asarray(apply(params, x * 3.0)[0]), np.asarray(logits), atol=1e-2)
    np.testing.assert_allclose(lt2, lt, rtol=1e-3, atol=1e-3)


@pytest.mark.slow   # a ResNet-18 gradient compile (~40 s of CPU); the trainer's masking is tested for the MLP
def test_resnet18_gradient_step_learns_and_stats_are_no_parameters(net_params):
    net, params = net_params
    x = jax.random.normal(jax.random.key(2), (16, 8, 8, 3))
    y = jnp.arange(16) % 10

    def loss(p):
        logits, _, _ = net.apply_train(p, x)
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(16), y])

    step = jax.jit(lambda p: jax.tree.map(lambda a, g: a - 0.1 * g, p, net.mask_stats(jax.grad(loss)(p))))
    p = params
    first = float(loss(p))
    for _ in range(15):
        p = step(p)
    assert float(loss(p)) < first - 0.3
    np.testing.assert_array_equal(p["s2b1"]["bn2"]["var"], params["s2b1"]["bn2"]["var"])   # never a gradient
    kept = net.restore_stats(jax.tree.map(lambda a: a + 1.0, params), params)
    np.testing.assert_array_equal(kept["bn_stem"]["mean"], params["bn_stem"]["mean"])
    np.testing.assert_allclose(kept["bn_stem"]["scale"], params["bn_stem"]["scale"] + 1.0)


def test_gpu_preset_is_resnet18_on_cifar100_with_the_released_form():
    cfg = PRESETS["gpu"]
    assert cfg.model.arch == "resnet18" and cfg.data.dataset == "cifar100" and cfg.data.num_tasks == 10
    assert "derpp_deduce_rel" in cfg.arms and cfg.train.epochs == 50

"""OptimizerConfig -> (optax transformation, schedule): schedules against optax and hand values, clipping by hand,
weight decay and validation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core.config import ConfigError, apply_overrides
from core.optim import OptimizerConfig, make_optimizer

STEPS = (0, 1, 5, 10, 37, 50, 99, 100, 150)


def _values(schedule):
    return np.array([float(schedule(s)) for s in STEPS])


@pytest.mark.parametrize("config, reference", [
    (OptimizerConfig(lr=3e-4), optax.constant_schedule(3e-4)),
    (OptimizerConfig(lr=1e-2, schedule="linear", decay_steps=100, end_lr=1e-3),
     optax.linear_schedule(1e-2, 1e-3, 100)),
    (OptimizerConfig(lr=1e-2, schedule="cosine", decay_steps=100, end_lr=1e-3),
     optax.cosine_decay_schedule(1e-2, 100, alpha=0.1)),
    (OptimizerConfig(lr=1e-2, schedule="warmup_cosine", warmup_steps=10, decay_steps=100, end_lr=1e-4),
     optax.warmup_cosine_decay_schedule(0.0, 1e-2, 10, 100, end_value=1e-4)),
])
def test_schedules_match_optax(config, reference):
    _, schedule = make_optimizer(config)
    np.testing.assert_allclose(_values(schedule), _values(reference), rtol=1e-6)


def test_schedules_at_hand_computed_steps():
    lr, end = 1e-2, 1e-3
    _, cosine = make_optimizer(OptimizerConfig(lr=lr, schedule="cosine", decay_steps=100, end_lr=end))
    assert float(cosine(50)) == pytest.approx(end + (lr - end) / 2, rel=1e-6)  # cos(pi/2) = 0: halfway
    assert float(cosine(100)) == pytest.approx(end, rel=1e-6) and float(cosine(500)) == pytest.approx(end, rel=1e-6)
    _, warm = make_optimizer(OptimizerConfig(lr=lr, schedule="warmup_cosine", warmup_steps=10, decay_steps=110))
    assert float(warm(0)) == 0.0 and float(warm(5)) == pytest.approx(lr / 2, rel=1e-6)
    assert float(warm(10)) == pytest.approx(lr, rel=1e-6) and float(warm(60)) == pytest.approx(lr / 2, rel=1e-5)
    _, linear = make_optimizer(OptimizerConfig(lr=lr, schedule="linear", warmup_steps=10, decay_steps=30, end_lr=0))
    assert [float(linear(s)) for s in (5, 10, 20, 30, 40)] == pytest.approx([lr / 2, lr, lr / 2, 0, 0], abs=1e-9)
    _, const = make_optimizer(OptimizerConfig(lr=lr, warmup_steps=4))
    assert [float(const(s)) for s in (0, 2, 4, 100)] == pytest.approx([0, lr / 2, lr, lr], rel=1e-6)


def test_global_norm_clipping_matches_a_hand_computed_update():
    tx, _ = make_optimizer(OptimizerConfig(name="sgd", lr=0.5, clip_norm=1.0))
    params = {"a": jnp.zeros(2), "b": jnp.zeros(())}
    grads = {"a": jnp.asarray([3.0, 0.0]), "b": jnp.asarray(4.0)}  # global norm 5
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["a"]), [-0.5 * 3 / 5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(float(updates["b"]), -0.5 * 4 / 5, rtol=1e-6)
    small = {"a": jnp.asarray([0.3, 0.0]), "b": jnp.asarray(0.4)}  # norm 0.5 < 1: untouched
    updates, _ = tx.update(small, tx.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["a"]), [-0.15, 0.0], rtol=1e-6)


def test_adamw_and_coupled_weight_decay_match_their_optax_definitions():
    params = {"w": jnp.asarray([1.0, -2.0, 3.0])}
    grads = {"w": jnp.asarray([0.1, 0.2, -0.3])}
    tx, _ = make_optimizer(OptimizerConfig(lr=1e-2, weight_decay=0.1, b1=0.8, b2=0.99, eps=1e-6))
    ref = optax.adamw(1e-2, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.1)
    np.testing.assert_allclose(tx.update(grads, tx.init(params), params)[0]["w"],
                               ref.update(grads, ref.init(params), params)[0]["w"], rtol=1e-6)
    # sgd: the weight decay is added to the gradient (L2), first step: -lr * (g + wd * w)
    tx, _ = make_optimizer(OptimizerConfig(name="sgd", lr=0.1, weight_decay=0.5, momentum=0.9))
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["w"], -0.1 * (grads["w"] + 0.5 * params["w"]), rtol=1e-6)


def test_the_optimizer_trains_under_jit_with_its_schedule():
    tx, schedule = make_optimizer(OptimizerConfig(lr=0.3, schedule="cosine", decay_steps=50, clip_norm=1.0))
    loss = lambda w: jnp.sum((w - 3.0) ** 2)  # noqa: E731

    @jax.jit
    def run(w):
        def body(carry, _):
            w, s = carry
            u, s = tx.update(jax.grad(loss)(w), s, w)
            return (optax.apply_updates(w, u), s), None
        return jax.lax.scan(body, (w, tx.init(w)), None, length=50)[0][0]

    assert float(loss(run(jnp.zeros(2)))) < 1e-2 * float(loss(jnp.zeros(2)))
    assert float(schedule(50)) == 0.0


@pytest.mark.parametrize("fields, message", [
    (dict(lr=0.0), "lr=0.0: expected a positive learning rate"),
    (dict(schedule="cosine"), "decay_steps=0: expected more than warmup_steps=0 for schedule='cosine'"),
    (dict(schedule="warmup_cosine", warmup_steps=10, decay_steps=10), "decay_steps=10: expected more than warmup"),
    (dict(b2=1.0), "b2=1.0: expected a number in [0, 1)"),
    (dict(clip_norm=-1.0), "clip_norm=-1.0: expected a non-negative global norm"),
    (dict(momentum=0.9), "momentum=0.9: expected 0 for name='adamw'"),
    (dict(name="lion"), "name='lion': expected one of 'adamw', 'adam', 'sgd'"),
])
def test_bad_fields_are_one_line_naming_the_field(fields, message):
    with pytest.raises(ConfigError) as err:
        OptimizerConfig(**fields)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_overrides_parse_and_validate_the_fields():
    config = apply_overrides(OptimizerConfig(), ["decay_steps=50", "warmup_steps=5", "schedule=warmup_cosine",
                                                 "clip_norm=1"])
    assert (config.schedule, config.warmup_steps, config.decay_steps, config.clip_norm) == \
        ("warmup_cosine", 5, 50, 1.0)
    with pytest.raises(ConfigError, match="schedule='cosin': expected one of 'constant', 'linear'"):
        apply_overrides(OptimizerConfig(), ["schedule=cosin"])

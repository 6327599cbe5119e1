"""The C2C fuser: shapes across model shapes, closed gates, the layer mapping, the gate schedule and noise,
NumPy parity, the rotary frame, and a sharded fuser step on 8 fake devices."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.config import ConfigError
from core.lm import model as model_lib
from core.lm.configs import LMConfig
from interp.c2c import communicate as comm
from interp.c2c.configs import FuserConfig
from interp.c2c.fuser import TensorFuser, gate_value, init_fuser, layer_mapping, numpy_reference, temperature
from interp.c2c.fuser import apply_fuser as _apply_fuser

apply_fuser = jax.jit(_apply_fuser, static_argnums=0)  # one compile per shape instead of op-by-op dispatch

RECEIVER = LMConfig(architecture="qwen3", vocab_size=24, hidden_size=32, intermediate_size=48, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=16, tie_word_embeddings=True, attention_bias=False)
SHARER = LMConfig(architecture="qwen2", vocab_size=24, hidden_size=24, intermediate_size=48, num_layers=3,
                  num_heads=3, num_kv_heads=3, head_dim=8, tie_word_embeddings=True, rope_theta=1e6)
FUSER = FuserConfig(hidden=32, intermediate=24, steps=4, batch_size=8, anneal_steps=0)


def _kv(config, key, B=2, N=5):
    shape = (config.num_layers, B, N, config.num_kv_heads, config.head_dim)
    k1, k2 = jax.random.split(key)
    return jax.random.normal(k1, shape), jax.random.normal(k2, shape)


def test_fuser_shapes_with_different_heads_and_widths():
    gd, params = init_fuser(SHARER, RECEIVER, FUSER, jax.random.key(0))
    sk, sv = _kv(SHARER, jax.random.key(1))
    rk, rv = _kv(RECEIVER, jax.random.key(2))
    out = apply_fuser(gd, params, sk, sv, rk, rv)
    assert out.k.shape == rk.shape == (2, 2, 5, 2, 16) and out.v.shape == rv.shape
    assert out.gates.shape == (2, 2)
    # sharer (3 heads x 8) into receiver (2 heads x 16): the first layer reads [(8 x 3) + (16 x 2)] = 56 inputs
    assert params["key_fusers"][0]["input"]["kernel"].shape == (24 + 32, 32)
    assert params["value_fusers"][1]["projection"]["kernel"].shape == (32, 32)
    assert params["key_fusers"][0]["weight"]["kernel"].shape == (32, 2)
    with pytest.raises(ValueError, match=r"receiver k \(2, 2, 5, 3, 8\): expected 2 layers and \(kv_heads, head_dim\)"):
        apply_fuser(gd, params, sk, sv, sk[:2], sv[:2])
    with pytest.raises(ValueError, match="expected the same aligned tokens"):
        apply_fuser(gd, params, sk[:, :, :4], sv[:, :, :4], rk, rv)


def test_closed_gate_returns_the_receiver_cache_exactly_and_an_open_gate_does_not():
    gd, params = init_fuser(SHARER, RECEIVER, FUSER, jax.random.key(0))
    sk, sv = _kv(SHARER, jax.random.key(1))
    rk, rv = _kv(RECEIVER, jax.random.key(2))
    closed = apply_fuser(gd, comm.close_gates(params), sk, sv, rk, rv)
    np.testing.assert_array_equal(np.asarray(closed.k), np.asarray(rk))
    np.testing.assert_array_equal(np.asarray(closed.v), np.asarray(rv))
    assert float(jnp.abs(closed.gates).max()) == 0.0
    opened = apply_fuser(gd, comm.set_gates(params, 1.0), sk, sv, rk, rv)
    assert float(jnp.abs(opened.k - rk).min()) >= 0 and float(jnp.abs(opened.k - rk).max()) > 1e-3
    np.testing.assert_array_equal(np.asarray(opened.gates), np.ones((2, 2)))


def test_last_aligned_layer_mapping():
    assert layer_mapping(4, 6) == (2, 3, 4, 5)
    assert layer_mapping(3, 3) == (0, 1, 2)
    assert layer_mapping(6, 4) == (None, None, 0, 1, 2, 3)  # the deeper model receives: its first layers stay
    assert layer_mapping(1, 5) == (4,)
    with pytest.raises(ConfigError, match="fuser.mapping='first': expected one of"):
        layer_mapping(4, 6, "first")
    # a fuser for a deeper receiver has modules only for the mapped layers and passes the others through
    gd, params = init_fuser(RECEIVER, SHARER, FUSER, jax.random.key(0))
    rk, rv = _kv(SHARER, jax.random.key(1))
    sk, sv = _kv(RECEIVER, jax.random.key(2))
    out = apply_fuser(gd, comm.set_gates(params, 1.0), sk, sv, rk, rv)
    np.testing.assert_array_equal(np.asarray(out.k[0]), np.asarray(rk[0]))
    assert float(jnp.abs(out.k[1] - rk[1]).max()) > 1e-3
    assert len(params["key_fusers"]) == 2
    logits = comm.gate_logits(params, 3, layer_mapping(3, 2))
    assert np.isneginf(np.asarray(logits[0])).all() and np.isfinite(np.asarray(logits[1:])).all()


def test_gumbel_temperature_anneals_exponentially_from_one_to_a_thousandth():
    steps = np.array([0, 1, 500, 964.5, 1929, 2500])
    got = np.asarray(temperature(steps, start=1.0, end=0.001, anneal_steps=1929))
    want = 1.0 * 0.001 ** (np.minimum(steps, 1929) / 1929)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got[0] == pytest.approx(1.0) and got[4] == pytest.approx(0.001, rel=1e-5) and got[5] == got[4]
    np.testing.assert_allclose(got[3], np.sqrt(0.001), rtol=1e-4)  # halfway: the geometric mean
    assert np.all(np.diff(got[:5]) < 0)


def test_gumbel_sigmoid_gate_opens_with_the_logistic_probability_and_is_hard_at_inference():
    # sigma((g + G) / T) > 1/2  <=>  G > -g, and P(G > -g) = 1 - exp(-exp(g)) for standard Gumbel noise
    shape = (200, 50, 10)
    for g in (-1.0, 0.0, 1.5):
        soft = gate_value(jnp.asarray(g), shape, key=jax.random.key(3), temp=1.0, train=True)
        assert soft.shape == shape
        assert float((soft > 0.5).mean()) == pytest.approx(1 - np.exp(-np.exp(g)), abs=0.01)
        hard = gate_value(jnp.asarray(g), shape, key=None, temp=1.0, train=False)
        assert set(np.unique(np.asarray(hard)).tolist()) == {float(g > 0)}
    cold = gate_value(jnp.asarray(0.3), shape, key=jax.random.key(4), temp=0.001, train=True)
    assert float(((cold > 0.01) & (cold < 0.99)).mean()) < 0.01  # a near-binary sample at T = 0.001


def _numpy_params(fuser: TensorFuser) -> dict:
    out = {"input_w": fuser.input.kernel[...], "input_b": fuser.input.bias[...],
           "projection_w": fuser.projection.kernel[...], "projection_b": fuser.projection.bias[...],
           "weight_w": fuser.weight.kernel[...], "weight_b": fuser.weight.bias[...]}
    for name in ("trunk", "projection_block", "weight_block"):
        block = getattr(fuser, name)
        out[f"{name}_norm"] = block.norm.scale[...]
        out[f"{name}_up"] = block.up.kernel[...]
        out[f"{name}_down"] = block.down.kernel[...]
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def test_tensor_fuser_matches_the_numpy_reference():
    from flax import nnx
    fuser = TensorFuser(3 * 8, 2 * 16, 2, hidden=32, intermediate=24, dropout=0.1, gate_init=0.5,
                        rngs=nnx.Rngs(params=0))
    # non-trivial norms and biases so every term is exercised
    for block in (fuser.trunk, fuser.projection_block, fuser.weight_block):
        block.norm.scale[...] = jax.random.uniform(jax.random.key(7), (32,), minval=0.5, maxval=1.5)
    fuser.weight.bias[...] = jnp.linspace(-1, 1, 2)
    sharer = np.asarray(jax.random.normal(jax.random.key(1), (2, 5, 3, 8)))
    receiver = np.asarray(jax.random.normal(jax.random.key(2), (2, 5, 2, 16)))
    got, gate = fuser(jnp.asarray(sharer), jnp.asarray(receiver))
    assert np.asarray(gate).min() == 1.0  # logit 0.5 > 0: the hard gate is open
    want = numpy_reference(_numpy_params(fuser), sharer.astype(np.float64), receiver.astype(np.float64), 1.0)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # dropout acts only in training, with a key
    train, _ = fuser(jnp.asarray(sharer), jnp.asarray(receiver), key=jax.random.key(0), temp=1e-3, train=True)
    assert float(jnp.abs(train - got).max()) > 1e-4


def _one_layer(config, theta):
    return dataclasses.replace(config, num_layers=1, rope_theta=theta)


@pytest.mark.parametrize("frame", ["rotated", "unrotated"])
def test_fusing_a_cache_with_itself_through_an_identity_projection_leaves_decoding_unchanged(frame):
    """The sharer is the receiver's own weights; the fuser is the identity on the sharer's K/V (K = K_s): with
    the receiver's own cache (same rotary) decoding is unchanged in both frames. With the same weights under
    another rotary (theta 1e6), layer-0 keys differ only by their rotation: un-rotating and re-rotating into the
    receiver's frame leaves decoding unchanged, while fusing the sharer's rotated keys as they are does not."""
    base = _one_layer(dataclasses.replace(RECEIVER, architecture="qwen2"), 1e4)
    gd, params = model_lib.init(base, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 7), 3, base.vocab_size)
    mask = jnp.ones((2, 7), bool).at[0, :2].set(False)

    def decoded(sharer_config):
        s_gd, s_params = model_lib.init(sharer_config, jax.random.key(0))  # the same weights, its own rotary
        pair = comm.Pair(receiver=base, receiver_graphdef=gd, sharer=sharer_config, sharer_graphdef=s_gd,
                         fuser=dataclasses.replace(FUSER, key_frame=frame))
        rc, sc = comm.section_caches(pair, params, s_params, tokens[:, :-1], mask[:, :-1], 1)
        identity = lambda sk, sv, rk, rv: (sk, sv, jnp.zeros((1, 2)))  # noqa: E731
        fused, _ = comm.fuse_slots(pair, None, sc, rc, 0, 6, mask[:, :-1], fuse_fn=identity)
        fused_logits = comm.respond(pair, None, params, params, fused, sc, tokens[:, -1:])
        plain_logits = comm.respond(pair, None, params, params, rc, sc, tokens[:, -1:])
        key_error = float(jnp.abs(fused.k - rc.k).max() / jnp.abs(rc.k).max())
        return np.asarray(fused_logits), np.asarray(plain_logits), key_error

    fused, plain, key_error = decoded(base)  # the cache fused with itself
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5)
    assert key_error < 1e-5
    fused, plain, key_error = decoded(_one_layer(base, 1e6))  # the same keys in another rotary frame
    if frame == "unrotated":
        np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5)
        assert key_error < 1e-5
    else:  # the sharer's frame leaks into the receiver's cache (random-init attention is nearly flat, so the
        assert key_error > 0.1  # logits move little; the keys are far off)
        assert np.abs(fused - plain).max() > 1e-5


def test_a_sharded_fuser_step_on_8_devices_equals_one_device(devices):
    from core import sharding as sharding_lib
    from core import train as train_lib
    from interp.c2c.train import fuser_batch, make_fuser_step
    # one receiver layer fed by the last of two sharer layers (different depths, heads and widths as above; one
    # layer fuser instead of two, so smaller step programs to compile)
    receiver, sharer = dataclasses.replace(RECEIVER, num_layers=1), dataclasses.replace(SHARER, num_layers=2)
    r_gd, r_params = model_lib.init(receiver, jax.random.key(0))
    s_gd, s_params = model_lib.init(sharer, jax.random.key(1))
    f_gd, f_params = init_fuser(sharer, receiver, FUSER, jax.random.key(2))
    pair = comm.Pair(receiver=receiver, receiver_graphdef=r_gd, sharer=sharer, sharer_graphdef=s_gd, fuser=FUSER,
                     fuser_graphdef=f_gd)
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, 24, (8, 6)).astype(np.int32)
    mask = np.ones((8, 6), bool)
    mask[:3, :2] = False
    rc, sc = comm.section_caches(pair, r_params, s_params, tokens, mask, 0)
    arrays = {"receiver_k": np.moveaxis(np.asarray(rc.k), 0, 1), "receiver_v": np.moveaxis(np.asarray(rc.v), 0, 1),
              "sharer_k": np.moveaxis(np.asarray(sc.k), 0, 1), "sharer_v": np.moveaxis(np.asarray(sc.v), 0, 1),
              "mask": mask, "inputs": rng.integers(3, 24, (8, 2)).astype(np.int32),
              "targets": rng.integers(3, 24, (8, 2)).astype(np.int32)}
    batch = fuser_batch(arrays, np.arange(8), 3)
    frozen = {"receiver": r_params, "sharer": s_params}
    tx, step = make_fuser_step(pair, FUSER, donate=False)
    state = train_lib.init_train_state(f_params, tx, jax.random.key(3), frozen=frozen)
    single, m1 = step(state, batch)
    mesh = sharding_lib.make_mesh(devices=devices)
    placed = sharding_lib.replicate(state, mesh)
    _, sharded_step = make_fuser_step(pair, FUSER, donate=False,
                                      state_sharding=jax.tree.map(lambda x: x.sharding, placed),
                                      batch_sharding=sharding_lib.batch_sharding(mesh))
    sharded, m8 = sharded_step(placed, sharding_lib.shard_batch(batch, mesh))
    assert np.isfinite(float(m1["loss"]))
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(sharded.params), jax.tree.leaves(single.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    assert float(m1["temperature"]) == pytest.approx(0.001 ** (3 / 4), rel=1e-5)  # anneal_steps 0 = the 4 steps
    assert float(m1["grad_norm"]) > 0  # (the warmup's first learning rate is 0, so the params do not move yet)
    np.testing.assert_allclose(float(m8["grad_norm"]), float(m1["grad_norm"]), rtol=1e-5)

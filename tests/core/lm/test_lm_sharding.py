"""Sharding for training on 8 fake CPU devices: a train step of the tiny decoder under FSDP rules (data=4 x
model=2 and data=8), pure tensor parallelism (DEFAULT_RULES) equals the one-device step, with the parameters
and adam's mu/nu really split; activation constraints pin the batch to "data" under a mesh and vanish without
one (generation under a mesh gives the unsharded tokens)."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from core import sharding as core_sharding
from core import train as train_lib
from core.lm import losses
from core.lm import model as model_lib
from core.lm.configs import LMConfig
from core.lm.generate import SamplingConfig, generate
from core.lm.sharding import (
    DEFAULT_RULES,
    FSDP_RULES,
    constrain,
    logical_to_spec,
    shard_params,
    shard_train_state,
    train_state_shardings,
)

CONFIG = LMConfig(architecture="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8, attention_bias=True, tie_word_embeddings=False)
STEPS = 2
TOL = dict(rtol=1e-5, atol=1e-5)


def _batches():
    """Two different packed batches of 8 rows x 16 tokens (two segments in some rows, padding in others)."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(STEPS):
        tokens = rng.integers(1, CONFIG.vocab_size, (8, 17)).astype(np.int32)
        seg = np.ones((8, 16), np.int32)
        seg[::2, 9:] = 2
        seg[1::4, 13:] = 0
        out.append({"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "segment_ids": seg,
                    "loss_mask": (seg > 0).astype(np.float32) * (rng.random((8, 16)) > 0.2)})
    return out


def _fresh():
    graphdef, params = model_lib.init(CONFIG, jax.random.key(0))
    tx = optax.adamw(1e-3, weight_decay=0.1)  # a fine-tuning rate; Adam's m/sqrt(v) amplifies rounding
    return graphdef, tx, train_lib.init_train_state(params, tx, jax.random.key(1))


def _train(mesh=None, rules=None):
    """STEPS updates from the same init; with a mesh, the state is placed by `rules` and the step traced
    under `jax.set_mesh` (so the model's activation constraints apply)."""
    graphdef, tx, state = _fresh()
    loss_fn = losses.next_token_loss(graphdef)
    batches = _batches()
    if mesh is None:
        step = train_lib.make_train_step(loss_fn, tx)
        batches = [jax.tree.map(jnp.asarray, b) for b in batches]
        context = contextlib.nullcontext()
    else:
        shardings = train_state_shardings(state, mesh, rules)
        state = shard_train_state(state, mesh, rules)
        step = train_lib.make_train_step(loss_fn, tx, state_sharding=shardings,
                                         batch_sharding=core_sharding.batch_sharding(mesh))
        batches = [core_sharding.shard_batch(b, mesh) for b in batches]
        context = jax.set_mesh(mesh)
    metrics = []
    with context:
        for batch in batches:
            state, m = step(state, batch)
            metrics.append(jax.device_get(m))
    return state, metrics


@pytest.fixture(scope="module")
def reference():
    return _train()


def _spec(x):
    """x's PartitionSpec padded with None to x.ndim (P("data") and P("data", None, None) are one layout)."""
    spec = tuple(x.sharding.spec)
    return P(*spec, *(None,) * (x.ndim - len(spec)))


def _adam(opt_state):
    return next(s for s in opt_state if isinstance(s, optax.ScaleByAdamState))


def _get(tree, *path):
    for k in path:
        tree = tree[k]
    return tree[...] if isinstance(tree, nnx.Variable) else tree


Q = ("layers", 0, "self_attn", "q_proj")
GATE = ("layers", 1, "mlp", "gate_proj")
DOWN = ("layers", 1, "mlp", "down_proj")

CASES = {  # name: (data, model, rules, {param: (spec, one shard's shape)})
    "fsdp_4x2": (4, 2, FSDP_RULES, {Q: (P("data", "model", None), (8, 2, 8)), GATE: (P("data", "model"), (8, 32)),
                                    DOWN: (P("model", "data"), (32, 8))}),
    "tp_4x2": (4, 2, DEFAULT_RULES, {Q: (P(None, "model", None), (32, 2, 8)), GATE: (P(None, "model"), (32, 32)),
                                     DOWN: (P("model", None), (32, 32))}),
    "fsdp_data8": (8, 1, FSDP_RULES, {Q: (P("data", None, None), (4, 4, 8)), GATE: (P("data", None), (4, 64)),
                                      DOWN: (P(None, "data"), (64, 4))}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sharded_train_step_equals_one_device(case, reference, devices):
    data, model, rules, want = CASES[case]
    mesh = core_sharding.make_mesh(data=data, model=model)
    state, metrics = _train(mesh, rules)
    ref_state, ref_metrics = reference
    for got, ref in zip(metrics, ref_metrics):
        np.testing.assert_allclose(got["loss"], ref["loss"], **TOL)
        np.testing.assert_allclose(got["grad_norm"], ref["grad_norm"], **TOL)
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), ref_state.params, _fresh()[2].params)
    assert min(jax.tree.leaves(moved)) > 5e-4  # the steps changed every parameter
    adam, ref_adam = _adam(state.opt_state), _adam(ref_state.opt_state)
    for got, ref in zip(jax.tree.leaves(state.params), jax.tree.leaves(ref_state.params), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), **TOL)
    for got, ref in zip(jax.tree.leaves((adam.mu, adam.nu)), jax.tree.leaves((ref_adam.mu, ref_adam.nu)),
                        strict=True):  # moments are ~|g| and ~g^2 (far below 1): atol relative to their scale
        ref = np.asarray(ref)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert int(state.step) == STEPS and int(adam.count) == STEPS
    for path, (spec, shard) in want.items():
        for tree in (state.params, adam.mu, adam.nu):
            x = _get(tree, *path)
            assert _spec(x) == spec, (path, x.sharding.spec)
            assert x.addressable_shards[0].data.shape == shard
    assert adam.count.sharding.spec == P() and state.step.sharding.spec == P()
    assert state.key.sharding.spec == P()


def test_frozen_slot_is_sharded_by_the_same_rules(devices):
    if "frozen" not in train_lib.TrainState._fields:
        pytest.skip("core.train.TrainState has no frozen slot")
    _, base = model_lib.abstract(CONFIG)
    state = train_lib.TrainState(params={"w": jnp.zeros((32, 4))}, opt_state=(), step=jnp.zeros((), jnp.int32),
                                 key=jax.random.key(0), frozen={"base": base, "extra": jnp.ones(3)})
    mesh = core_sharding.make_mesh(data=4, model=2)
    sh = train_state_shardings(state, mesh, FSDP_RULES)
    assert _get(sh.frozen["base"], *Q[:-1])[Q[-1]].get_value().spec == P("data", "model", None)
    assert sh.frozen["extra"].spec == P() and sh.params["w"].spec == P()
    assert train_state_shardings(state._replace(frozen=None), mesh).frozen is None


def test_optimizer_slots_follow_their_parameter_through_chains(devices):
    """A chained, clipped, masked optimizer: every per-parameter slot gets its parameter's sharding."""
    _, params = model_lib.abstract(CONFIG)
    mask = jax.tree.map(lambda _: True, params)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.masked(optax.sgd(0.1, momentum=0.9), mask),
                     optax.adamw(1e-3))
    state = jax.eval_shape(lambda p: train_lib.init_train_state(p, tx, jax.random.key(0)), params)
    mesh = core_sharding.make_mesh(data=4, model=2)
    sh = train_state_shardings(state, mesh, FSDP_RULES)
    pairs = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(sh.opt_state)[0]:
        pairs.append((jax.tree_util.keystr(path), leaf.spec))
    specs = dict(pairs)
    q = "['layers'][0]['self_attn']['q_proj'].value"
    assert sum(name.endswith(q) for name in specs) == 3  # sgd's momentum trace, adam's mu and nu
    assert all(spec == P("data", "model", None) for name, spec in specs.items() if name.endswith(q))
    counts = [spec for name, spec in specs.items() if name.endswith(".count")]
    assert counts and all(spec == P() for spec in counts)


def test_logical_to_spec_fsdp_and_size_one_axes(devices):
    mesh = core_sharding.make_mesh(data=4, model=2)
    assert logical_to_spec(("vocab", "embed"), (64, 32), mesh, FSDP_RULES) == P("model", "data")
    assert logical_to_spec(("embed", "mlp"), (30, 64), mesh, FSDP_RULES) == P(None, "model")  # 30 % 4
    assert logical_to_spec(("embed", "embed"), (32, 32), mesh, FSDP_RULES) == P("data", None)  # an axis once
    assert logical_to_spec(("embed", "mlp"), (32, 64), core_sharding.make_mesh(data=8), FSDP_RULES) == P("data", None)


def test_constrain_pins_batch_under_a_mesh_and_is_identity_without(devices):
    x = jnp.arange(8 * 4 * 32, dtype=jnp.float32).reshape(8, 4, 32)
    f = jax.jit(lambda x: constrain(x * 2, ("batch", "seq", "embed")))
    np.testing.assert_array_equal(f(x), x * 2)
    assert len(f(x).sharding.device_set) == 1  # no mesh: nothing constrained, one device
    mesh = core_sharding.make_mesh(data=4, model=2)
    with jax.set_mesh(mesh):
        y = jax.jit(lambda x: constrain(x * 2, ("batch", "seq", "embed")))(x)
        z = jax.jit(lambda x: constrain(x * 2, ("batch", "seq", "embed")))(x[:2])  # 2 rows on 4: replicated
    assert _spec(y) == P("data", None, None) and len(y.sharding.device_set) == 8
    np.testing.assert_array_equal(y, x * 2)
    np.testing.assert_array_equal(z, x[:2] * 2)
    with pytest.raises(ValueError, match=r"constrain names \('batch', 'seq'\): expected one per dimension"):
        constrain(x, ("batch", "seq"))


def test_model_activations_follow_the_batch_under_fsdp(devices):
    """The model's hidden output is split over "data" by batch (its constraints), not along the weights'
    FSDP-split embed (without them XLA propagates P(None, None, "data") from the final norm's input). The
    sharded forward's values are checked by the train-step tests (same loss)."""
    graphdef, params = model_lib.init(CONFIG, jax.random.key(0))
    tokens = _batches()[0]["inputs"]
    mesh = core_sharding.make_mesh(data=4, model=2)
    sharded = shard_params(params, mesh, FSDP_RULES)
    with jax.set_mesh(mesh):
        hidden = jax.jit(lambda p, t: model_lib.apply(graphdef, p, t, return_hidden=True).hidden)(
            sharded, core_sharding.shard_batch(tokens, mesh))
    assert _spec(hidden) == P("data", None, None)


def test_generation_under_a_mesh_matches_one_device(devices):
    """Greedy generation with FSDP-sharded params under a mesh (batch 2 on a 4-way data axis stays
    replicated) gives the one-device tokens."""
    graphdef, params = model_lib.init(CONFIG, jax.random.key(3))
    params = jax.tree.map(lambda x: x * 10.0, params)  # peaked logits: greedy ties are not a coin flip
    tokens = jnp.array([[0, 0, 5, 9, 13, 2], [4, 8, 16, 32, 63, 1]], jnp.int32)
    mask = tokens > 0
    sampling = SamplingConfig(max_new_tokens=3)
    want = generate(graphdef, params, tokens, mask, jax.random.key(0), sampling)
    mesh = core_sharding.make_mesh(data=4, model=2)
    sharded = shard_params(params, mesh, FSDP_RULES)
    with jax.set_mesh(mesh):
        got = generate(graphdef, sharded, tokens, mask, jax.random.key(0), sampling)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(want.logprobs), **TOL)

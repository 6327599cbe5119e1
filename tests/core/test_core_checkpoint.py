import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_trees_close
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from core import sharding
from core.checkpoint import Checkpointer, CheckpointMismatchError
from core.train import init_train_state


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cfg:
    width: int = 4


def _state(width=4, seed=0):
    params = {"w": jax.random.normal(jax.random.key(seed), (8, width)), "b": jnp.zeros(width)}
    return init_train_state(params, optax.adam(1e-3), jax.random.key(seed + 7))


def test_round_trip_with_data_state_and_key(tmp_path):
    state = _state()
    ckpt = Checkpointer(tmp_path, config=Cfg())
    ckpt.save(5, state, data_state={"epoch": 1, "index": 2, "seed": 0})
    restored, data_state = Checkpointer(tmp_path, config=Cfg()).restore(_state(seed=1))
    assert_trees_close(restored, state, exact=True)
    assert jax.dtypes.issubdtype(restored.key.dtype, jax.dtypes.prng_key)
    assert data_state == {"epoch": 1, "index": 2, "seed": 0}


def test_keep_last_n_and_best(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=2, best_metric="loss")
    for step, loss in [(1, 0.5), (2, 0.1), (3, 0.7), (4, 0.9)]:
        ckpt.save(step, _state(), metrics={"loss": loss})
    assert ckpt.latest_step() == 4
    assert sorted(int(p.name) for p in (tmp_path / "last").iterdir() if p.name.isdigit()) == [3, 4]
    assert ckpt.best_step() == 2


def test_checkpoint_from_another_config_is_refused(tmp_path):
    Checkpointer(tmp_path, config=Cfg(width=4)).save(1, _state())
    with pytest.raises(CheckpointMismatchError, match=r"another config: width: 4 there, 8 here"):
        Checkpointer(tmp_path, config=Cfg(width=8)).restore(_state())


def test_checkpoint_with_other_shapes_is_refused(tmp_path):
    Checkpointer(tmp_path).save(1, _state(width=4))
    with pytest.raises(CheckpointMismatchError, match="does not fit"):
        Checkpointer(tmp_path).restore(_state(width=6))


def test_restore_onto_another_sharding(tmp_path, devices):
    state = _state()
    Checkpointer(tmp_path).save(1, state)
    mesh = sharding.make_mesh(data=2, model=4)
    template = sharding.place(state, jax.tree.map(lambda _: sharding.replicated(mesh), state))
    w_sharding = NamedSharding(mesh, P(None, "model"))
    template = template._replace(params={**template.params, "w": jax.device_put(template.params["w"], w_sharding)})
    restored, _ = Checkpointer(tmp_path).restore(template)
    assert restored.params["w"].sharding == w_sharding
    np.testing.assert_array_equal(np.asarray(restored.params["w"]), np.asarray(state.params["w"]))

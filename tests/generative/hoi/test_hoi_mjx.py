"""The MJX scene (optional extra `hoi`): skipped cleanly without mujoco; the model loads, time is promoted,
features match the 2D scene's geometry; the vmapped step (slow: minutes of compile on 2 cores) runs finite and
compiles once."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
pytest.importorskip("mujoco.mjx")

from generative.hoi import scene2d, scene_mjx  # noqa: E402


def test_model_loads_with_the_2d_layout():
    mj, model = scene_mjx.load_model()
    assert (mj.nq, mj.nv, mj.nu) == (7, 7, 4)
    assert mj.jnt_range[mj.joint("hinge").id][1] == pytest.approx(scene2d.DOOR_MAX)
    data = scene_mjx.reset(model, jax.random.key(0))
    assert data.time.dtype == jnp.float32 and not data.time.weak_type
    f = scene_mjx.features(data)
    p = scene2d.reset(jax.random.key(0))
    np.testing.assert_allclose(f.gap, scene2d.features(p).gap, atol=1e-5)  # same start state and geometry
    assert float(f.grip.sum()) == 0.0


@pytest.mark.slow
def test_vmapped_mjx_step_runs_finite_and_compiles_once():
    out = scene_mjx.benchmark(8, 4, cache=False)
    assert out["finite"] and out["compiles"] == 1 and out["env_steps_per_second"] > 0

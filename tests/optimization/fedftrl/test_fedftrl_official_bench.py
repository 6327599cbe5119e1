"""benchmarks/fedexp3_vs_official.py feeds the official FedExp3 the instances our simulator sees: its loss
tensors must be exactly the simulator's, so that the paired (per seed) regret comparison pairs like with like.
Checked by replaying our fedexp3_default on the benchmark's losses in numpy, with the simulator's action keys,
against the simulator's own regret."""

import importlib.util
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from optimization.fedftrl.envs import StochasticEnv
from optimization.fedftrl.model import AlgoConfig
from optimization.fedftrl.networks import make_network
from optimization.fedftrl.train import make_simulator, net_arrays, stack_nets

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _bench():
    spec = importlib.util.spec_from_file_location("fedexp3_vs_official", ROOT / "benchmarks" / "fedexp3_vs_official.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_instances_are_the_simulators():
    bench = _bench()
    assert not bench.SINGLE_THREAD  # importing the benchmark must not change XLA's threads for the test process
    V, K, T, S = 4, 5, 30, 2
    env = StochasticEnv(V=V, K=K, noise_sd=0.1)
    net = make_network("ring", V)
    algo = AlgoConfig()
    sim = make_simulator("fedexp3_default", env, T, algo, base_seed=0)
    hps = {"eps": jnp.ones((1,), jnp.float32), "lr_scale": jnp.ones((1,), jnp.float32)}
    out = sim(jnp.arange(S, dtype=jnp.int32), stack_nets([net_arrays(net)]), hps)
    ours = np.asarray(out["regret_mean"])[0, :, -1]
    losses, means = bench.instances(env, T, S)
    assert losses[0].shape == (T, V, K) and losses[0].dtype == np.float32
    P = np.asarray(net.P, np.float32)
    for s in range(S):
        k_run = jax.random.split(jax.random.fold_in(jax.random.key(0), s))[1]
        z, cum = np.zeros((V, K), np.float32), np.zeros(V)
        for t in range(1, T + 1):
            k_act = jax.random.split(jax.random.fold_in(k_run, t))[1]
            g = algo.fedexp3_explore / t ** (1 / 3)
            e = np.exp(-algo.fedexp3_lr * (z - z.min(1, keepdims=True)))
            x = (1 - g) * e / e.sum(1, keepdims=True) + g / K
            u = np.asarray(jax.random.uniform(k_act, (V, 1), dtype=jnp.float32))
            k = np.minimum((np.cumsum(x, 1) < u * x.sum(1, keepdims=True)).sum(1), K - 1)
            loss = losses[s][t - 1][np.arange(V), k]
            z = P @ z
            z[np.arange(V), k] += loss / x[np.arange(V), k]
            cum += x @ means[s]
        replay = float(np.mean(cum - T * means[s].min()))
        assert math.isclose(replay, float(ours[s]), rel_tol=1e-4, abs_tol=1e-4), (s, replay, float(ours[s]))

"""Issue 42: FedFTRL's learning-rate constant lr_scale and the regulariser weights take effect (hand-checked
gamma_t), FedExp3 at its authors' default schedule, and the constant-gap switching instance."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.config import ConfigError
from optimization.fedftrl import Config
from optimization.fedftrl.envs import ConstantGapSwitchingEnv, FixedMeansEnv, make_env
from optimization.fedftrl.ftrl import ftrl_argmin
from optimization.fedftrl.model import AlgoConfig, fedftrl_rates, make_algorithm
from optimization.fedftrl.networks import make_network
from optimization.fedftrl.train import make_simulator, net_arrays, stack_nets


def test_gamma_hand_value_follows_lr_scale():
    """Complete graph, V=16, K=20, t=100: sigma_2(P)=0, D=1, so C = min(log 1600, 4) + 2 + 1 = 7 and
    1/gamma = c * 16 * sqrt(7 * 100 / log 20): 1956.6 for the notes' c=8, 122.3 for c=0.5."""
    V, K, t = 16, 20, 100.0
    net = net_arrays(make_network("complete", V))
    assert float(net["sigma2"]) == pytest.approx(0.0, abs=1e-5) and int(net["D"]) == 1
    hand = 16 * math.sqrt(700 / math.log(20))           # 244.61...
    for c in (8.0, 0.5):
        inv_eta, inv_gamma, C = fedftrl_rates(jnp.float32(t), V, K, net, 1.0, AlgoConfig(lr_scale=c))
        assert float(C) == pytest.approx(7.0, rel=1e-5)
        assert float(inv_gamma) == pytest.approx(c * hand, rel=1e-5)
        assert float(inv_eta) == pytest.approx(0.1 * math.sqrt(16 * 100), rel=1e-6)   # eta_scale untouched
    assert 8 * hand == pytest.approx(1956.6, abs=0.1) and 0.5 * hand == pytest.approx(122.3, abs=0.1)
    # a traced override (what the sweep uses) equals the config field
    _, g_traced, _ = fedftrl_rates(jnp.float32(t), V, K, net, 1.0, AlgoConfig(), jnp.float32(0.5))
    assert float(g_traced) == pytest.approx(0.5 * hand, rel=1e-5)
    # theory rates scale by the same constant
    _, g8, _ = fedftrl_rates(jnp.float32(t), V, K, net, 1.0, AlgoConfig(rates="theory"))
    _, g1, _ = fedftrl_rates(jnp.float32(t), V, K, net, 1.0, AlgoConfig(rates="theory", lr_scale=1.0))
    assert float(g8) == pytest.approx(8 * float(g1), rel=1e-5)


def _one_step(cfg, hp_extra=None, t=50):
    V, K = 4, 5
    net = net_arrays(make_network("complete", V))
    algo = make_algorithm("fedftrl", cfg)
    L = jnp.asarray(np.random.default_rng(0).uniform(0, 40, (V, K)), jnp.float32)
    state = {"L": L, "pending": jnp.zeros((V + 1, K))}
    hp = {"eps": jnp.float32(1.0), **(hp_extra or {})}
    fb = jnp.full((V, K), 0.5)
    _, x, _ = algo.step(state, jnp.int32(t), jax.random.key(0), fb, net, hp)
    return np.asarray(x), L, net, V, K, t


def test_lr_scale_and_weights_change_the_played_distribution():
    x8, L, net, V, K, t = _one_step(AlgoConfig())
    x_small, *_ = _one_step(AlgoConfig(lr_scale=0.125))
    x_traced, *_ = _one_step(AlgoConfig(), {"lr_scale": jnp.float32(0.125)})
    np.testing.assert_allclose(x_traced, x_small, atol=1e-6)
    # smaller c = larger gamma = less entropy regularisation: the played distribution is more concentrated
    assert np.all(x_small.max(-1) > x8.max(-1) + 0.01)
    # each step's x is the hybrid argmin with the weighted halves (reference solver)
    inv_eta, inv_gamma, _ = fedftrl_rates(jnp.float32(t), V, K, net, 1.0, AlgoConfig())
    for w_t, w_e in ((1.0, 1.0), (0.0, 1.0), (1.0, 0.0), (2.0, 0.5)):
        x, *_ = _one_step(AlgoConfig(solver="bisection", tsallis_weight=w_t, entropy_weight=w_e))
        ref = np.asarray(ftrl_argmin(L, w_t * inv_eta, w_e * inv_gamma, method="bisection"))
        np.testing.assert_allclose(x, ref, atol=1e-5)
    x_ts, *_ = _one_step(AlgoConfig(entropy_weight=0.0))
    assert np.abs(x_ts - x8).max() > 0.01           # switching the entropy half off changes the play


def test_lr_scale_changes_regret_in_a_simulation():
    env = FixedMeansEnv(means=((0.2, 0.8, 0.6),) * 4)
    nets = stack_nets([net_arrays(make_network("complete", 4))] * 2)
    sim = make_simulator("fedftrl", env, 400)
    out = sim(jnp.arange(4, dtype=jnp.int32), nets, {"eps": jnp.ones((2,)), "lr_scale": jnp.asarray([8.0, 0.125])})
    final = np.asarray(out["regret_mean"])[:, :, -1].mean(1)
    assert final[1] < 0.7 * final[0]                # the notes' c = 8 explores far longer on this easy instance


def test_fedexp3_default_schedule_by_hand():
    V, K, t = 3, 4, 8
    net = net_arrays(make_network("complete", V))
    z = jnp.asarray(np.random.default_rng(1).uniform(0, 30, (V, K)), jnp.float32)
    fb = jnp.full((V, K), 0.3)
    _, x, _ = make_algorithm("fedexp3_default").step({"z": z}, jnp.int32(t), jax.random.key(0), fb, net,
                                                     {"eps": jnp.float32(1.0)})
    g = 0.01 / t ** (1 / 3)                          # 0.005
    soft = np.exp(-0.1 * np.asarray(z, np.float64))
    expected = (1 - g) * soft / soft.sum(-1, keepdims=True) + g / K
    np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-5)
    _, x_th, _ = make_algorithm("fedexp3").step({"z": z}, jnp.int32(t), jax.random.key(0), fb, net,
                                                {"eps": jnp.float32(1.0)})
    assert np.abs(np.asarray(x_th) - expected).max() > 0.01     # the theory schedule is a different algorithm


def test_constant_gap_instance():
    env = ConstantGapSwitchingEnv(V=6, K=5)
    params = env.init(jax.random.key(3))
    ts = np.arange(1, 3001)
    means, runners, bases = [], set(), set()
    for t in ts[::7]:
        fb, mean = env.step(params, jnp.int32(t), None)
        fb, mean = np.asarray(fb), np.asarray(mean)
        np.testing.assert_allclose(fb.mean(0), mean, atol=1e-6)            # agent average = global loss
        assert fb.min() >= 0 and fb.max() <= 1
        srt = np.sort(mean)
        assert np.argmin(mean) == 0 and srt[1] - srt[0] == pytest.approx(0.2, abs=1e-6)   # constant gap
        runners.add(int(np.argsort(mean)[1]))
        bases.add(round(float(mean[0]), 4))
        means.append(mean)
    assert runners == {1, 2, 3, 4} and bases == {0.2, 0.35}                # ranks and level switch
    assert isinstance(make_env("constant_gap", V=4, K=3, gap=0.1), ConstantGapSwitchingEnv)
    with pytest.raises(Exception, match="gap"):
        ConstantGapSwitchingEnv(V=4, K=3, gap=0.5)


def test_bad_values():
    for kw in ({"lr_scale": 0.0}, {"tsallis_weight": -1.0}, {"fedexp3_explore": 2.0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            AlgoConfig(**kw)
    with pytest.raises(ValueError, match="both 0"):
        AlgoConfig(tsallis_weight=0.0, entropy_weight=0.0)
    with pytest.raises(ConfigError, match="lr_scales"):
        Config(lr_scales=(1.0, -2.0))


def test_movielens_setting_runs_when_pointed_at_data(tmp_path):
    from optimization.fedftrl.train import run_experiment

    (tmp_path / "movies.csv").write_text("movieId,title,genres\n1,A,Comedy|Drama\n2,B,Drama\n3,C,Horror\n"
                                         "4,D,(no genres listed)\n")
    (tmp_path / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,5.0,0\n1,2,3.0,0\n1,3,0.5,0\n"
                                          "2,1,1.0,0\n2,4,2.5,0\n3,3,4.5,0\n3,2,2.0,0\n")
    cfg = Config(setting="movielens", ratings_path=str(tmp_path), V=3, T=40, seeds=2, topologies=("complete",),
                 algorithms=("fedftrl",), epsilons=())
    res = run_experiment(cfg, tmp_path / "run", progress=False)
    (row,) = res["rows"]
    assert row["setting"] == "movielens" and row["K"] == 4 and np.isfinite(row["final_regret"])
    assert (tmp_path / "run" / "regret_movielens_complete.png").exists()

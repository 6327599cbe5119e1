"""Smoke run of the real experiment (annealed chains, both directions), a sharded stage, and config errors."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from core.config import ConfigError, apply_overrides
from interp.scale_analysis import EXPERIMENT, configs, model, sample, train


def test_tiny_run_writes_outputs_reports_equilibration_and_resumes_per_point(tmp_path, monkeypatch):
    cfg = dataclasses.replace(EXPERIMENT.presets["tiny"], two_d=(4,))
    metrics = EXPERIMENT.run(cfg, tmp_path)
    assert (tmp_path / "metrics.json").exists() and (tmp_path / "alignment.png").exists()
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert set(saved["equilibrated"]) == {"two_d:d=4:N=4:kappa=0.1", "three_n1:d=4:N=4x4:kappa=0.1"}
    rows = json.loads((tmp_path / "rows.json").read_text())
    for r in rows:
        assert len(r["A_f"]) == len(r["P"]) and all(np.isfinite(v) for v in r["A_f"])
        eq = r["equilibration"]
        assert eq["diverged_chains"] == 0 and eq["n"] == cfg.n_seeds * len(r["P"])
        assert np.array(eq["rhat"]).shape == (cfg.n_seeds, len(r["P"]))
        # equal simulated time: every stage covers at least sim_time, the large-P one with more steps
        assert min(eq["sim_time_per_stage"]) >= cfg.sampler.sim_time - 1e-6
        assert eq["steps_per_stage"][-1] > eq["steps_per_stage"][0]
        # a seed whose R-hat failed at the points its P* rests on carries None, never a number
        for s, v in enumerate(r["p_star_values"]):
            if isinstance(v, float):
                j = int(np.argmax(np.array(r["A_f_seeds"][s]) >= 0.5))
                assert eq["passed"][s][j - 1] and eq["passed"][s][j]
    assert rows[1]["plant"]["pattern"] in ("GP-Spec", "Spec-Mag", "first")
    # metrics.jsonl: a record per sweep point, in order, with its equilibration
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["sweep"], r["equilibrated"]) for r in records] == \
        [(i + 1, row["sweep"], row["equilibrated"]) for i, row in enumerate(rows)]
    assert all(r["max_rhat"] is None or r["max_rhat"] > 0 for r in records)
    assert metrics["wall_seconds"] > 0

    # a rerun reads every stored point back and runs only a missing one (a kill leaves the points it had not
    # finished missing); the folder ends as the uninterrupted run's did
    points = sorted((tmp_path / "points").glob("*.json"))
    assert len(points) == 2
    unfinished = next(p for p in points if p.name.startswith("two"))
    unfinished.unlink()
    unfinished.with_suffix(".npz").unlink()
    (tmp_path / "metrics.json").unlink()
    ran = []
    real_run_point = train.run_point
    monkeypatch.setattr(train, "run_point", lambda *a, **k: ran.append(a[1]) or real_run_point(*a, **k))
    EXPERIMENT.run(cfg, tmp_path)
    assert ran == ["two"]
    resumed = json.loads((tmp_path / "rows.json").read_text())
    for row in [*rows, *resumed]:
        row.pop("point_wall_seconds")
    assert resumed == rows
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == records
    assert json.loads((tmp_path / "metrics.json").read_text())["equilibrated"] == saved["equilibrated"]


def test_failing_points_are_extended_by_tempering_ensembles():
    """With sampler.replicas > 1 the extension stages of a P failing R-hat run tempering ensembles from both
    chains' end states: the point reports its ladder, the tempered stages per P and the swap acceptance, and
    the recorded replica-0 traces stay finite."""
    tiny = EXPERIMENT.presets["tiny"]
    cfg = dataclasses.replace(tiny, sweeps=("two_d",), two_d=(4,), sampler=dataclasses.replace(
        tiny.sampler, max_extend=1, replicas=3, beta_min=0.3, rhat_max=1.0 + 1e-9))   # every P fails: extend
    res = train.run_point(cfg, "two", 4, (4,), log=lambda s: None)
    tempering = res["tempering"]
    n_p = len(res["P"])
    assert tempering["replicas"] == 3 and tempering["betas"] == [1.0, round(0.3 ** 0.5, 4), 0.3]
    tempered = tempering["tempered_stages_per_P"]
    assert sum(tempered) >= 1 and res["n_stages"] == [1 + t for t in tempered]   # (R-hat may dip below 1)
    for t, a in zip(tempered, tempering["swap_accept_by_P"]):
        assert (a is None) if t == 0 else 0.0 <= a <= 1.0
    assert np.isfinite(res["traces"]["A_f"]).all()
    assert res["burn"] == [int(cfg.sampler.burn_frac * cfg.sampler.n_records)] * n_p
    row = train.summarise_point(cfg, "two_d", "two", 4, (4,), res)
    assert row["equilibration"]["tempering"] == tempering and "swap_accept" not in row


def test_sharded_stage_equals_single_device(devices):
    problem = sample.make_problem(jax.random.key(0), arch="two", d=4, widths=(4,), kappa=0.1, n_test=64,
                                  n_probe=16)
    init = sample.make_init(problem, p_max=16, pattern=None)
    stage = sample.make_stage(problem, p_max=16, n_records=4, friction=1.0)
    keys = sample.split_seed_keys(0, 8)
    noise = jax.vmap(lambda k: jax.random.fold_in(k, 5))(keys)
    q, m = init(keys, jnp.int32(12))
    args = (jnp.float32(0.05), jnp.int32(5), jnp.int32(12))
    single = stage(q, m, keys, noise, *args)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    shard = NamedSharding(mesh, PartitionSpec("data"))
    put = lambda t: jax.tree.map(lambda a: jax.device_put(a, shard), t)  # noqa: E731
    sharded = stage(put(q), put(m), put(keys), put(noise), *args)
    assert sharded[2]["A_f"].sharding.num_devices == 8
    for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(single)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_potential_masks_rows_beyond_p():
    """A stage at p < p_max sees only the first p rows: the masked potential and its gradient equal those of the
    unpadded data (one program per point serves every P of its grid)."""
    x, y = sample.training_data(jax.random.key(1), 20, jnp.eye(4)[0])
    q = model.init_params(jax.random.key(2), "two", 4, (4,))
    mask = (jnp.arange(20) < 8).astype(x.dtype)
    u = lambda q, *a: sample.potential(q, *a)  # noqa: E731
    assert float(u(q, x, y, 0.1, mask)) == pytest.approx(float(u(q, x[:8], y[:8], 0.1)), rel=1e-6)
    g1 = jax.grad(u)(q, x, y, 0.1, mask)
    g2 = jax.grad(u)(q, x[:8], y[:8], 0.1)
    for k in g1:
        np.testing.assert_allclose(np.asarray(g1[k]), np.asarray(g2[k]), rtol=1e-5, atol=1e-6)
    assert float(u(q, x, y, 0.1)) != pytest.approx(float(u(q, x[:8], y[:8], 0.1)))   # the mask matters


def test_config_errors():
    with pytest.raises(ConfigError, match="vacuous"):
        configs.Config(kappa=0.0)
    with pytest.raises(ConfigError, match="two_d"):
        configs.Config(two_d=(0, 16))
    with pytest.raises(ConfigError, match="d larger than the data"):
        configs.Config(n_test=8, n_probe=8, two_d=(16,))
    with pytest.raises(ConfigError, match="sampler.step_size"):
        apply_overrides(configs.tiny(), ["sampler.step_size=0"])
    with pytest.raises(ConfigError, match="sampler.sim_time"):
        apply_overrides(configs.tiny(), ["sampler.sim_time=0"])
    with pytest.raises(ConfigError, match="rhat_max"):
        apply_overrides(configs.tiny(), ["sampler.rhat_max=1.0"])
    with pytest.raises(ConfigError, match="plant"):
        configs.Config(plant="second")
    with pytest.raises(ConfigError, match="kappa_values"):
        configs.Config(kappa_values=(0.1, -1.0))
    with pytest.raises(ValueError, match="kappa"):
        sample.make_problem(jax.random.key(0), arch="two", d=4, widths=(4,), kappa=0.0, n_test=8, n_probe=4)
    with pytest.raises(ValueError, match="sweep"):
        train.sweep_points(configs.tiny(), "nope")
    assert apply_overrides(configs.tiny(), ["kappa=0.5"]).kappa == 0.5


def test_gpu_preset_reaches_d_128_at_n_4d():
    g = configs.gpu()
    assert max(g.two_d) == 128 and max(g.three_d) == 128
    for sweep in ("two_d", "three_d"):
        for _, d, widths, _ in train.sweep_points(g, sweep):
            assert min(widths) >= 4 * d


def test_paper_sweeps_use_n_at_least_4d_and_a_kappa_grid():
    c = configs.paper()
    for sweep in ("two_d", "two_n", "three_d"):
        for _, d, widths, _ in train.sweep_points(c, sweep):
            assert widths[-1] >= 4 * d
    ks = train.sweep_points(c, "kappa")
    assert len({k for *_, k in ks}) >= 3
    # the P grid scales with kappa (P* ~ kappa E_min is centred on the same multiples)
    grids = [train.p_grid(c, d, a, w, k) for a, d, w, k in ks]
    ratios = [g[0] / k for g, (*_, k) in zip(grids, ks)]
    assert max(ratios) / min(ratios) == pytest.approx(1.0, rel=0.02)


def test_training_rows_are_nested_across_sizes():
    """Row i of a seed's training data does not depend on p_max: sample sizes are nested."""
    w_star = jnp.eye(4)[0]
    key = sample.split_seed_keys(0, 1)[0]
    x8, y8 = sample.training_data(key, 8, w_star)
    x3, y3 = sample.training_data(key, 3, w_star)
    np.testing.assert_array_equal(np.asarray(x8[:3]), np.asarray(x3))
    np.testing.assert_array_equal(np.asarray(y8[:3]), np.asarray(y3))
    assert x8.shape == (8, 4) and not np.allclose(np.asarray(x8[3]), np.asarray(x8[4]))


def test_planted_init_is_aligned_and_its_readout_is_the_conditional_mode():
    problem = sample.make_problem(jax.random.key(0), arch="two", d=4, widths=(6,), kappa=0.1, n_test=16,
                                  n_probe=8)
    x, y = sample.training_data(jax.random.key(1), 32, problem.w_star)
    mask = (jnp.arange(32) < 20).astype(x.dtype)
    q = sample.planted_init(jax.random.key(2), problem, x, y, pattern="Spec", n_first=3, mask=mask)
    cos = np.abs(np.asarray(q["w1"][:3] @ problem.w_star) / np.linalg.norm(np.asarray(q["w1"][:3]), axis=1))
    np.testing.assert_allclose(cos, 1.0, rtol=1e-5)
    g = jax.grad(lambda a: sample.potential({**q, "a": a}, x, y, problem.kappa, mask))(q["a"])
    assert float(jnp.max(jnp.abs(g))) < 1e-3 * (1 + float(jnp.max(jnp.abs(q["a"]))))
    with pytest.raises(ValueError, match="pattern"):
        sample.planted_init(jax.random.key(2), problem, x, y, pattern="GP")

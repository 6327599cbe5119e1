"""Order parameters, data, model and analysis helpers against hand-checked values and Monte Carlo."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from interp.scale_analysis import configs, data, model, order_params, sample, theory, train


def test_target_has_unit_variance_and_no_linear_part():
    w = data.teacher_direction(jax.random.key(0), 8)
    x, y = data.sample(jax.random.key(1), 200_000, w)
    assert float(jnp.mean(y * y)) == pytest.approx(1.0, abs=0.03)
    assert float(jnp.mean(y * (x @ w))) == pytest.approx(0.0, abs=0.02)
    np.testing.assert_allclose(data.he3(jnp.array([0.0, 1.0, 2.0])), [0.0, -2.0, 2.0])


def test_alignment_and_kta():
    y = jnp.array([1.0, -2.0, 0.5, 3.0])
    assert float(order_params.alignment(y, y)) == pytest.approx(1.0)
    assert float(order_params.alignment(-0.5 * y, y)) == pytest.approx(-0.5)
    assert float(order_params.kernel_target_alignment(jnp.outer(y, y), y)) == pytest.approx(1.0, rel=1e-6)
    assert float(order_params.kernel_target_alignment(jnp.eye(4), y)) == pytest.approx(
        1 / 2, rel=1e-6)   # y^T y / (sqrt(4) y^T y)


def test_covariance_alignment_and_cosines():
    d = 16
    w_star = jnp.eye(d)[0]
    aligned = jnp.tile(w_star, (5, 1)) * 3.0
    assert float(order_params.covariance_alignment(aligned, w_star)) == pytest.approx(d)
    iso = jax.random.normal(jax.random.key(0), (20000, d))
    assert float(order_params.covariance_alignment(iso, w_star)) == pytest.approx(1.0, abs=0.05)
    np.testing.assert_allclose(order_params.cosines(aligned, w_star), 1.0, rtol=1e-6)


@pytest.mark.parametrize("d,tau", [(16, 0.5), (64, 0.3)])
def test_prior_spec_fraction_matches_monte_carlo(d, tau):
    w = np.random.default_rng(0).normal(size=(400_000, d))
    cos = np.abs(w[:, 0]) / np.linalg.norm(w, axis=1)
    assert order_params.prior_spec_fraction(d, tau) == pytest.approx(np.mean(cos > tau), abs=2e-3)


def test_prior_output_variance_is_the_arcsine_kernel():
    # standard parametrisation: E f(x)^2 = E erf(h)^2 with h ~ N(0, |x|^2/d) = (2/pi) arcsin(2 s / (1 + 2 s))
    d, n = 8, 32
    x = jnp.ones((1, d)) * 0.9
    s = float(jnp.sum(x * x)) / d
    f = jax.vmap(lambda k: model.forward(model.init_params(k, "two", d, (n,)), x)[0])(
        jax.random.split(jax.random.key(0), 40000))
    assert float(jnp.mean(f * f)) == pytest.approx(2 / math.pi * math.asin(2 * s / (1 + 2 * s)), rel=0.03)


def test_model_shapes_and_bad_inputs():
    p3 = model.init_params(jax.random.key(0), "three", 6, (5, 7))
    assert p3["w1"].shape == (5, 6) and p3["w2"].shape == (7, 5) and p3["a"].shape == (7,)
    assert model.forward(p3, jnp.ones((3, 6))).shape == (3,)
    with pytest.raises(ValueError, match="width"):
        model.init_params(jax.random.key(0), "two", 6, (0,))
    with pytest.raises(ValueError, match="features"):      # data with fewer features than the model's d
        model.forward(p3, jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="dimension"):
        data.target(jnp.ones((3, 4)), jnp.ones(6))


def test_crossing_and_fit():
    ps = [10, 20, 40, 80]
    assert train.crossing(ps, [0.1, 0.3, 0.7, 0.9]) == pytest.approx(20 * 2 ** 0.5)
    assert math.isnan(train.crossing(ps, [0.1, 0.2, 0.3, 0.4]))       # censored above
    assert math.isnan(train.crossing(ps, [0.6, 0.7, 0.8, 0.9]))       # censored below
    rng = np.random.default_rng(0)
    x = np.repeat([16.0, 32.0, 64.0], 4)
    y = 3.0 * x ** 1.5 * np.exp(0.05 * rng.normal(size=x.size))
    fit = train.loglog_fit(x, y)
    assert fit["lo"] < 1.5 < fit["hi"] and fit["hi"] - fit["lo"] < 0.3


# -- the specialist count (repair 4): on hand-built weights ----------------------------------------------

def _layer(key, n, d, tilt=0.0):
    """n isotropic whitened weight rows, every one tilted by `tilt` prior sds along w* = e_0."""
    w = jax.random.normal(jax.random.key(key), (n, d))
    return w.at[:, 0].add(tilt), jnp.eye(d)[0]


def _count(w, w_star, c=2.5):
    d = w.shape[1]
    return float(order_params.specialist_count(order_params.cosines(w, w_star), 1 / math.sqrt(d), c))


@pytest.mark.parametrize("d,tilt", [(16, 1.0), (64, 2.0), (64, -2.0)])
def test_collective_tilt_is_not_counted(d, tilt):
    w, ws = _layer(0, 256, d, tilt)
    assert _count(w, ws) <= 2                          # ~0.4 % of 256 units: the bulk's own tail
    old = int(jnp.sum(jnp.abs(order_params.cosines(w, ws)) > 0.5))
    if d == 16:
        assert old >= 20                               # the earlier cut |cos| > 0.5 counts the tilt


@pytest.mark.parametrize("d,tilt,k", [(16, 0.0, 1), (16, 1.0, 5), (64, 2.0, 3), (32, 0.0, 12)])
def test_locked_units_are_counted_on_any_bulk(d, tilt, k):
    w, ws = _layer(1, 64, d, tilt)
    noise = jax.random.normal(jax.random.key(2), (k, d)) * 0.3
    w = w.at[:k].set(jnp.where(jnp.arange(k)[:, None] % 2 == 0, 1.0, -1.0) * math.sqrt(d) * ws + noise)
    assert _count(w, ws) == k


def test_shared_magnetisation_is_not_counted_but_a_few_outliers_are():
    # every unit carries the feature with amplitude +-0.5 (sign-symmetric, like a magnetised layer)
    rng = np.random.default_rng(0)
    u = rng.choice([-0.5, 0.5], size=128) + 0.05 * rng.normal(size=128)
    assert float(order_params.specialist_count(jnp.asarray(u), 0.05, 2.5)) == 0
    u[:3] = [0.95, -0.97, 0.99]
    assert float(order_params.specialist_count(jnp.asarray(u), 0.05, 2.5)) == 3


def test_prior_count_matches_the_beta_tail_bound():
    d, n = 16, 64
    cos = jax.vmap(lambda k: order_params.cosines(jax.random.normal(k, (n, d)), jnp.eye(d)[0]))(
        jax.random.split(jax.random.key(3), 400))
    counts = jax.vmap(lambda u: order_params.specialist_count(u, 0.25, 2.5))(cos)
    # the folded-bulk cut is stricter than |cos| > 2.5/sqrt(d) alone, whose rate is the Beta tail
    assert float(counts.mean()) <= n * order_params.prior_spec_fraction(d, 2.5 / 4) + 0.05
    assert order_params.prior_spec_fraction(d, 2.5 / 4) == pytest.approx(
        float(jnp.mean(jnp.abs(cos) > 2.5 / 4)), abs=3e-3)


# -- the second-layer measure on w*.x (repair 2) and planting by pattern (repair 3) ------------------------

@pytest.fixture(scope="module")
def three_problem():
    prob = sample.make_problem(jax.random.key(1), arch="three", d=16, widths=(64, 64), kappa=0.1, n_test=512,
                               n_probe=32)
    x, y = sample.training_data(jax.random.key(2), 512, prob.w_star)
    return prob, x, y


def test_gp_spec_specialists_carry_w_star_x_and_are_counted(three_problem):
    prob, x, y = three_problem
    q = sample.planted_init(jax.random.key(3), prob, x, y, pattern="GP-Spec", n_second=2)
    obs = order_params.make_observer(prob)(q)
    assert float(obs["spec2"]) == 2 and float(obs["spec1"]) == 0          # a lazy first layer
    hs = model.hidden(q, prob.x_test)
    u_lin = np.asarray(order_params.correlations(hs[1], prob.x_test @ prob.w_star))
    u_he3 = np.asarray(order_params.correlations(hs[1], prob.y_test))
    assert np.all(np.abs(u_lin[:2]) > 0.9)
    assert np.all(np.abs(u_he3[:2]) < 0.15)          # the earlier He3 measure reads ~0 on these specialists
    assert 0.15 < prob.prior_sd2 < 0.4                # prior sd of corr(h2, w*.x) ~ 0.96/sqrt(d)


def test_spec_mag_plant_has_first_layer_specialists_and_no_second_layer_ones(three_problem):
    prob, x, y = three_problem
    q = sample.planted_init(jax.random.key(3), prob, x, y, pattern="Spec-Mag", n_first=2)
    obs = order_params.make_observer(prob)(q)
    assert float(obs["spec1"]) == 2 and float(obs["spec2"]) == 0
    assert float(obs["corr2"]) > 0.3                  # magnetised: every second-layer unit carries the feature


def test_plant_matches_the_predicted_pattern():
    c = configs.paper()
    assert train.plant_spec(c, "three", 16, (64, 64)) == {"pattern": "GP-Spec", "n_first": 0, "n_second": 2}
    assert train.plant_spec(c, "three", 16, (4, 64))["pattern"] == "Spec-Mag"
    assert train.plant_spec(c, "two", 16, (256,)) == {"pattern": "Spec", "n_first": 4, "n_second": 0}
    first = dataclasses.replace(c, plant="first")
    assert train.plant_spec(first, "three", 16, (64, 64))["pattern"] == "first"


# -- P* per seed, gated by equilibration; per-seed slopes; the claims ------------------------------------

def test_seed_p_star_is_dropped_where_r_hat_failed_and_censored_at_the_ends():
    ps = [10, 20, 40]
    assert train.seed_p_star(ps, [0.1, 0.4, 0.8], [True, True, True]) == pytest.approx(
        math.exp(math.log(20) + 0.25 * math.log(2)))
    assert train.seed_p_star(ps, [0.1, 0.4, 0.8], [True, False, True]) is None
    assert train.seed_p_star(ps, [0.1, 0.4, 0.8], [False, True, True]) is not None   # not a bracketing point
    assert train.seed_p_star(ps, [0.1, 0.2, 0.3], [True, True, True]) == {"value": 40.0, "censored": ">="}
    assert train.seed_p_star(ps, [0.1, 0.2, 0.3], [True, True, False]) is None
    assert train.seed_p_star(ps, [0.6, 0.7, 0.8], [True, True, True]) == {"value": 10.0, "censored": "<="}


def test_seed_slopes_and_censored_bounds():
    xs = [16, 32, 64]
    rows = [[16.0 * 10, 16.0 * 10], [32.0 * 10, None], [64.0 * 10, {"value": 320.0, "censored": ">="}]]
    slopes, notes = train.seed_slopes(xs, rows)
    assert slopes[0] == pytest.approx(1.0)
    assert slopes[1]["censored"] == ">=" and slopes[1]["value"] == pytest.approx(0.5)   # P*(64) >= 320
    rows = [[{"value": 100.0, "censored": ">="}], [50.0], [{"value": 100.0, "censored": ">="}]]
    slopes, notes = train.seed_slopes(xs, rows)
    assert slopes == [] and "both ways" in notes[0]


def _rows(exponent, n_seeds=4, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for d in (8, 16, 32):
        e = theory.predict("two", d, (4 * d,)).energy
        vals = [float(2.0 * d ** exponent * math.exp(noise * rng.normal())) for _ in range(n_seeds)]
        rows.append({"sweep": "two_d", "d": d, "widths": [4 * d], "kappa": 0.1, "P*": float(np.mean(vals)),
                     "P*_seeds_used": f"{n_seeds}/{n_seeds}", "p_star_values": vals,
                     "predicted": {"energy": e, "argmin": {"M1": 2.0}, "pattern": "Spec"}})
    return rows


def test_exponent_claims_hold_for_linear_p_star_and_fail_for_cubic():
    held = {c["id"]: c["held"] for c in train.make_claims(_rows(1.0))[0]}
    assert held["two_d_p_star_linear_in_d"] is True and held["two_d_p_star_linear_in_d_vs_lazy"] is True
    assert "project's prediction" in next(c["statement"] for c in train.make_claims(_rows(1.0))[0]
                                          if c["id"] == "two_layer_p_star_proportional_to_energy")
    failed = {c["id"]: c["held"] for c in train.make_claims(_rows(3.0))[0]}
    assert failed["two_d_p_star_linear_in_d"] is False and failed["two_d_p_star_linear_in_d_vs_lazy"] is not True
    rows = _rows(1.0)
    for r in rows:
        r["p_star_values"] = [None] * 4                  # no equilibrated seed: no claim, reported as such
    claims, missing = train.make_claims(rows)
    assert claims == [] and missing[0]["id"] == "two_d_p_star_linear_in_d"


def test_claims_of_every_sweep_from_synthetic_rows():
    """Rows shaped like the benchmark's, with the paper's predictions built in: every claim is produced, and
    the paper's ones hold; flattening P* in kappa makes the kappa claim fail."""
    rng = np.random.default_rng(1)
    jit = lambda: float(np.exp(0.03 * rng.normal()))  # noqa: E731

    def row(sweep, arch, d, widths, kappa, m1=0.0, m2=0.0):
        pred = theory.predict(arch, d, widths)
        p = [300.0 * kappa * pred.energy / 10 * jit() for _ in range(3)]
        r = {"sweep": sweep, "arch": arch, "d": d, "widths": list(widths), "N": "x".join(map(str, widths)),
             "kappa": kappa, "P*": float(np.mean(p)), "P*_seeds_used": "3/3", "p_star_values": p,
             "pattern": pred.pattern, "spec1_at_p_star": [m1 * jit() for _ in range(3)],
             "predicted": {"energy": pred.energy, "argmin": pred.argmin, "pattern": pred.pattern}}
        if arch == "three":
            r["spec2_at_p_star"] = [m2 * jit() for _ in range(3)]
        return r

    rows = [row("two_d", "two", 8, (32,), 0.1), row("two_d", "two", 16, (64,), 0.1),
            *[row("kappa", "two", 8, (32,), k) for k in (0.05, 0.1, 0.2)],
            row("three_d", "three", 4, (16, 16), 0.1), row("three_d", "three", 8, (32, 32), 0.1),
            row("three_n1", "three", 8, (2, 32), 0.1, m1=1.0, m2=0.1),
            row("three_n1", "three", 8, (32, 32), 0.1, m1=0.1, m2=2.0),
            row("two_n", "two", 8, (32,), 0.1, m1=2.0), row("two_n", "two", 8, (128,), 0.1, m1=4.0)]
    claims, missing = train.make_claims(rows)
    held = {c["id"]: c["held"] for c in claims}
    assert not missing
    for cid in ("two_d_p_star_linear_in_d", "three_d_p_star_linear_in_d", "p_star_proportional_to_kappa",
                "two_layer_specialists_sqrt_n_over_d", "three_layer_second_layer_takes_over",
                "three_layer_first_layer_specialisation_fades", "p_star_proportional_to_kappa_vs_kappa-independent"):
        assert held[cid] is True, cid
    for c in claims:
        assert c["n"] >= 2 and len(c["interval"]) == 2
    for r in rows:
        if r["sweep"] == "kappa":
            r["p_star_values"] = [100.0 * jit() for _ in range(3)]
    held = {c["id"]: c["held"] for c in train.make_claims(rows)[0]}
    assert held["p_star_proportional_to_kappa"] is False

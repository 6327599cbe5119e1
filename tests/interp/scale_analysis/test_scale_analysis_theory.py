"""The calculator against the closed forms of the method notes (Table 1) and hand-derived boundaries."""

import math

import pytest

from interp.scale_analysis import theory

GP_SPEC, SPEC_MAG, GP_GP = theory.THREE_LAYER[1], theory.THREE_LAYER[2], theory.THREE_LAYER[0]


@pytest.mark.parametrize("d,n2", [(16, 4096), (64, 1e5), (10, 1e4)])
def test_gp_spec_minimum_is_two_sqrt_n2_d(d, n2):
    m = theory.minimise(GP_SPEC, {"d": d, "N2": n2})
    assert m.energy == pytest.approx(2 * math.sqrt(n2 * d), rel=1e-6)
    assert m.argmin["M2"] == pytest.approx(math.sqrt(n2 / d), rel=1e-4)
    assert m.at_bound == ()


@pytest.mark.parametrize("d,n1,n2", [(16, 64, 256), (32, 128, 4096), (8, 50, 700)])
def test_spec_mag_minimum_is_three_cube_root(d, n1, n2):
    m = theory.minimise(SPEC_MAG, {"d": d, "N1": n1, "N2": n2})
    assert m.energy == pytest.approx(3 * (n1 * n2 * d) ** (1 / 3), rel=1e-6)
    assert m.argmin["M1"] == pytest.approx((n1 * n2 / d ** 2) ** (1 / 3), rel=1e-4)
    assert m.argmin["beta"] == pytest.approx((n2 ** 2 / (n1 * d)) ** (1 / 3), rel=1e-4)


def test_closed_form_scaling_laws_from_the_dual():
    law = theory.scaling_law(SPEC_MAG)
    assert law.energy.coef == pytest.approx(3.0)
    for name in ("N1", "N2", "d"):
        assert law.exponent(name) == pytest.approx(1 / 3)
    assert law.argmin["M1"].power("N1") == pytest.approx(1 / 3)
    assert law.argmin["M1"].power("d") == pytest.approx(-2 / 3)
    assert law.argmin["beta"].power("N2") == pytest.approx(2 / 3)
    assert law.weights == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    law2 = theory.scaling_law(theory.TWO_LAYER[2])
    assert law2.energy.coef == pytest.approx(2.0)
    assert law2.exponent("N1") == pytest.approx(0.5) and law2.exponent("d") == pytest.approx(0.5)


def test_phase_boundaries_are_computed():
    # Spec-Mag beats GP-Spec iff 3 (N1 N2 d)^(1/3) < 2 sqrt(N2 d), i.e. N1 < (8/27) sqrt(N2 d)
    b = theory.phase_boundary(SPEC_MAG, GP_SPEC, "N1")
    assert b.coef == pytest.approx(8 / 27)
    assert b.power("N2") == pytest.approx(0.5) and b.power("d") == pytest.approx(0.5)
    # GP-GP wins only for N2 > d^5 / 4 (the notes' "d > N2^5" is a typo)
    b2 = theory.phase_boundary(GP_GP, GP_SPEC, "N2")
    assert b2.coef == pytest.approx(0.25) and b2.power("d") == pytest.approx(5.0)


def test_predict_picks_the_pattern_on_each_side_of_the_boundary():
    d, n2 = 16, 4096
    n1_star = 8 / 27 * math.sqrt(n2 * d)
    assert theory.predict("three", d, (n1_star / 4, n2)).pattern == "Spec-Mag"
    assert theory.predict("three", d, (n1_star * 4, n2)).pattern == "GP-Spec"
    assert theory.predict("three", 2, (4, 1e4)).pattern == "GP-GP"        # N2 > d^5/4 = 8
    two = theory.predict("two", 16, (1024,))
    assert two.pattern == "Spec" and two.energy == pytest.approx(2 * math.sqrt(1024 * 16), rel=1e-6)
    # proportional widths: both feature-learning rows and the 2-layer row cost ~d, far below the GP's d^3
    for d in (16, 64, 256):
        assert theory.predict("three", d, (d, d)).energy < 4 * d < d ** 3


def test_count_bound_is_respected():
    # N < d: the unconstrained M = sqrt(N/d) < 1 is infeasible; at M = 1 the energy is d + N
    p = theory.predict("two", 64, (16,))
    assert p.argmin["M1"] == pytest.approx(1.0)
    assert "M1" in p.at_bound
    assert p.energy == pytest.approx(64 + 16)


def test_bad_inputs():
    with pytest.raises(ValueError, match="widths"):
        theory.predict("two", 16, (0,))
    with pytest.raises(ValueError, match="d="):
        theory.predict("three", 0, (4, 4))
    with pytest.raises(ValueError, match="arch"):
        theory.predict("four", 16, (4,))
    with pytest.raises(ValueError, match="width"):
        theory.predict("three", 16, (4,))
    with pytest.raises(ValueError, match="missing scale"):
        theory.minimise(GP_SPEC, {"d": 4})
    with pytest.raises(ValueError, match="coef"):
        theory.mono(0.0, d=1)

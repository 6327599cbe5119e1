"""The claim statistics in core.results against scipy and hand-worked cases."""

import math

import numpy as np
import pytest
from scipy import stats

from core.results import (
    bootstrap_interval,
    censored,
    check,
    claim_problems,
    interval_claim,
    paired_claim,
    rate_claim,
    sample_sd,
    sign_test,
    t_interval,
    verdict,
    wilson_interval,
)


def test_sample_sd_uses_ddof_one():
    assert sample_sd([1.0, 2.0, 3.0, 4.0]) == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert sample_sd([1.0, 2.0]) == pytest.approx(math.sqrt(0.5))
    assert math.isnan(sample_sd([3.0]))


def test_t_interval_matches_scipy():
    x = np.array([0.3, -0.1, 0.8, 0.45, 0.2, 0.05])
    lo, hi = t_interval(x)
    ref = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ref.low, ref.high), rel=1e-10)
    lo90, hi90 = t_interval(x, level=0.9)
    assert lo < lo90 < hi90 < hi


def test_paired_interval_equals_scipy_ttest_rel():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 7), rng.normal(0.5, 1.0, 7)
    c = paired_claim("x", "a beats b", a, b)
    ref = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert c["interval"] == pytest.approx([ref.low, ref.high], rel=1e-10)
    assert c["effect"] == pytest.approx(float(np.mean(a - b))) and c["n"] == 7
    assert c["test"] == "paired t-interval" and claim_problems(c) == []


def test_bootstrap_interval_agrees_with_scipy_percentile_bootstrap():
    x = np.random.default_rng(1).exponential(1.0, 40)
    lo, hi = bootstrap_interval(x, resamples=20_000)
    ref = stats.bootstrap((x,), np.mean, n_resamples=20_000, method="percentile", random_state=3).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.03) and hi == pytest.approx(ref.high, abs=0.03)
    assert bootstrap_interval(x) == bootstrap_interval(x)  # a fixed seed: reruns agree


def test_sign_test_matches_binomtest():
    d = [0.2, 0.1, -0.05, 0.3, 0.0, 0.4, 0.15, 0.2]  # the zero is dropped: 6 of 7 positive
    assert sign_test(d) == pytest.approx(stats.binomtest(6, 7, 0.5).pvalue)
    assert sign_test([1.0] * 5) == pytest.approx(2 / 32)
    assert sign_test([0.0, 0.0]) == 1.0


def test_wilson_interval_matches_scipy():
    for k, n in [(0, 10), (3, 10), (10, 10), (57, 200)]:
        ref = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert wilson_interval(k, n) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_verdict_is_three_valued():
    assert verdict([0.1, 0.5]) is True
    assert verdict([-0.5, -0.1]) is False
    assert verdict([-0.1, 0.5]) is None
    assert verdict([-0.5, -0.1], higher_is_better=False) is True  # lower is better: below zero holds
    assert verdict([1.1, 1.4], null=1.0) is True and verdict([0.9, 1.4], null=1.0) is None
    assert verdict([float("nan"), float("nan")]) is None


def test_paired_claim_verdicts_and_small_n():
    assert paired_claim("x", "s", [2.0, 2.1, 2.2], [1.0, 1.05, 1.1])["held"] is True
    assert paired_claim("x", "s", [1.0, 1.05, 1.1], [2.0, 2.1, 2.2])["held"] is False
    assert paired_claim("x", "s", [1.0, 2.0, 0.5], [1.2, 1.1, 0.9])["held"] is None  # spans zero
    lower = paired_claim("x", "lower error", [0.1, 0.12, 0.11], [0.2, 0.21, 0.25], higher_is_better=False)
    assert lower["held"] is True and lower["effect"] < 0
    one = paired_claim("x", "s", [2.0], [1.0])
    assert one["held"] is None and one["interval"] == [None, None] and claim_problems(one) == []
    with pytest.raises(ValueError, match="one pair per seed"):
        paired_claim("x", "s", [1.0, 2.0], [1.0])
    # a margin: the gain must exceed 0.5, not just zero
    assert paired_claim("x", "s", [1.6, 1.7, 1.65], [1.0, 1.0, 1.0], margin=0.5)["held"] is True
    assert paired_claim("x", "s", [1.3, 1.4, 1.35], [1.0, 1.0, 1.0], margin=0.5)["held"] is False


def test_censored_values_are_bounds_never_dropped():
    # a lower bound on a higher-is-better arm can only strengthen a held claim: it stands, and n counts it
    c = interval_claim("x", "s", [0.5, 0.6, censored(0.55, ">=")])
    assert c["held"] is True and c["n"] == 3 and "censored" in c["evidence"]
    # an upper bound on ours could move the effect below zero: inconclusive
    c = paired_claim("x", "s", [2.0, 2.1, censored(2.2, "<=")], [1.0, 1.05, 1.1])
    assert c["held"] is None and "against the claim" in c["evidence"]
    # a lower bound on the baseline works against ours
    c = paired_claim("x", "s", [2.0, 2.1, 2.2], [1.0, 1.05, censored(1.1, ">=")])
    assert c["held"] is None
    with pytest.raises(ValueError, match="censored side"):
        censored(1.0, ">")


def test_rate_claim_and_chance_baselines():
    c = rate_claim("asr", "attack succeeds more often than chance", 40, 50, null=0.5, chance=0.5, oracle=1.0)
    assert c["held"] is True and c["chance"] == 0.5 and c["oracle"] == 1.0 and c["test"] == "Wilson interval"
    assert rate_claim("asr", "s", 26, 50, null=0.5)["held"] is None
    c = paired_claim("x", "s", [0.8, 0.82], [0.7, 0.69], chance=[0.1, 0.1], oracle=0.95)
    assert c["chance"] == pytest.approx(0.1) and c["oracle"] == 0.95


def test_claim_problems_name_what_is_missing():
    assert claim_problems(check("c", "plumbing", True, "by construction")) == []
    bare = {"id": "x", "statement": "s", "held": True, "evidence": "e"}
    problems = claim_problems(bare)
    assert any(p.startswith("n=None") for p in problems) and any(p.startswith("interval=None") for p in problems)
    assert claim_problems({**bare, "n": 3, "interval": [0.1, 0.2]}) == []
    assert "finite bounds" in claim_problems({**bare, "n": 1, "interval": [None, None]})[0]
    assert claim_problems({**bare, "held": "yes", "n": 3, "interval": [0, 1]})[0].startswith("held='yes'")


def test_equal_values_are_decided_by_the_sign_test_not_a_zero_width_interval():
    two = paired_claim("x", "s", [2.0, 3.0], [1.0, 2.0])  # both differences exactly +1
    assert two["interval"] == [1.0, 1.0] and two["held"] is None and "sign test" in two["evidence"]
    six = paired_claim("x", "s", [2.0] * 6, [1.0] * 6)
    assert six["held"] is True  # p = 2 / 64
    worse = interval_claim("x", "s", [-1.0] * 6)
    assert worse["held"] is False
    assert interval_claim("x", "s", [0.0] * 6)["held"] is None  # all at the null

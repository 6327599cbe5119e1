"""MMSA metrics on a hand-computed example (the non-zero Acc-2 rule included)."""

import numpy as np
import pytest

from multimodal.decalign.metrics import classification_metrics, regression_metrics, weighted_f1


def test_regression_metrics_hand_computed():
    pred = np.array([1.2, -0.45, 0.6, -2.6, 0.0, 2.0])
    truth = np.array([1.0, 0.0, -0.4, -3.0, 0.4, 1.6])
    m = regression_metrics(pred, truth)
    assert m["mae"] == pytest.approx((0.2 + 0.45 + 1.0 + 0.4 + 0.4 + 0.4) / 6)
    # non-zero rule: example 1 (truth exactly 0) is dropped; kept examples 0, 2, 3, 4, 5 have
    # pred>0 = [T, T, F, F, T] and truth>0 = [T, F, F, T, T]: they agree on examples 0, 3, 5 -> 3/5
    assert m["acc2"] == pytest.approx(3 / 5)
    # class True (support 3): tp=2, fp=1, fn=1 -> F1 2/3; class False (support 2): tp=1, fp=1, fn=1 -> 1/2
    assert m["f1"] == pytest.approx((3 * 2 / 3 + 2 * 1 / 2) / 5)
    # Acc-7: rounded preds [1, -0, 1, -3, 0, 2] vs truths [1, 0, -0, -3, 0, 2] -> 5/6
    assert m["acc7"] == pytest.approx(5 / 6)
    # has-0 variant: pred>=0 [T,F,T,F,T,T] vs truth>=0 [T,T,F,F,T,T] -> 4/6
    assert m["acc2_has0"] == pytest.approx(4 / 6)
    assert m["corr"] == pytest.approx(np.corrcoef(pred, truth)[0, 1])


def test_weighted_f1_matches_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    t, p = rng.integers(0, 4, 50), rng.integers(0, 4, 50)
    assert weighted_f1(t, p) == pytest.approx(sk.f1_score(t, p, average="weighted"))


def test_classification_metrics_hand_computed():
    logits = np.array([[2, 0, 0], [0, 1, 0], [0, 0, 3], [1, 0, 0]], float)
    truth = np.array([0, 1, 1, 2])
    m = classification_metrics(logits, truth)  # preds [0, 1, 2, 0]
    assert m["wacc"] == pytest.approx(2 / 4)
    # class 0: tp1 fp1 fn0 -> 2/3 (support 1); class 1: tp1 fp0 fn1 -> 2/3 (support 2); class 2: tp0 -> 0
    assert m["waf1"] == pytest.approx((2 / 3 + 2 * 2 / 3) / 4)
    assert m["uacc"] == pytest.approx((1 + 0.5 + 0) / 3)


def test_metric_shape_errors():
    with pytest.raises(ValueError, match="expected equal"):
        regression_metrics(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match=r"expected \(N, C\)"):
        classification_metrics(np.zeros(3), np.zeros(3))

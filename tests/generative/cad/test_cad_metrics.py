"""Metrics on hand cases: F1 matching, Chamfer distance, requirement satisfaction, invalid ratio."""

import numpy as np
import pytest

from generative.cad import commands as C
from generative.cad import corpus, metrics


def rect(x0, y0, x1, y1):
    return (C.Line(x1, y0), C.Line(x1, y1), C.Line(x0, y1), C.Line(x0, y0))


def slot():
    return (C.Line(0.2, -0.1), C.Arc(0.2, 0.1, np.pi), C.Line(-0.2, 0.1), C.Arc(-0.2, -0.1, np.pi))


def test_f1_formula():
    assert metrics.f1(2, 4, 2) == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert metrics.f1(0, 3, 0) == 0.0 and metrics.f1(0, 0, 0) == 1.0 and metrics.f1(3, 3, 3) == 1.0


def test_primitive_matching_hand_case():
    # gt: a rectangle with a round hole, then a slot boss; pred: the hole and the plate swapped in order (the
    # Hungarian matching on loop boxes pairs them anyway), an extra circle, and a rectangle instead of the slot.
    gt = (C.Extrusion((rect(-0.5, -0.5, 0.5, 0.5), (C.Circle(0, 0, 0.1),))),
          C.Extrusion((slot(),), boolean=C.JOIN))
    pred = (C.Extrusion(((C.Circle(0, 0, 0.1),), rect(-0.5, -0.5, 0.5, 0.5), (C.Circle(0.3, 0.3, 0.05),))),
            C.Extrusion((rect(-0.3, -0.1, 0.3, 0.1),), boolean=C.CUT))
    m = metrics.primitive_matches(gt, pred)
    # lines: gt 4 + 2 = 6, pred 4 + 4 = 8; matched 4 (plate) + 2 (slot's 2 lines vs the rectangle's 4)
    assert m["line"] == (6, 6, 8)
    assert m["arc"] == (0, 2, 0)
    assert m["circle"] == (1, 1, 2)  # the extra circle is unmatched
    assert m["extrusion"] == (1, 2, 2)  # the second extrusion's boolean differs
    assert metrics.f1(*m["line"]) == pytest.approx(2 * 1 * 0.75 / 1.75)


def test_chamfer_of_shifted_points_and_identical_surfaces():
    a = np.zeros((1, 3))
    b = np.array([[0.0, 0.0, 0.1]])
    assert metrics.chamfer(a, b) == pytest.approx(2 * 0.01 * 1e3)
    pts = np.random.default_rng(0).normal(size=(100, 3))
    assert metrics.chamfer(pts, pts) == 0.0
    assert metrics.chamfer(pts, pts + [0.01, 0, 0]) == pytest.approx(2 * 1e-4 * 1e3, rel=1e-6)


def test_requirement_hits_within_one_level():
    part = next(p for p in corpus.make_corpus(50, 0) if p.spec[0]["kind"] == "rect")
    reqs = part.requirements[3]
    assert metrics.requirement_hits(part.program, reqs) == (len(reqs), len(reqs))
    base = part.program[0]
    w = part.spec[0]["width"]
    wider = (C.Extrusion((rect(-(w / 2 + 1) / 128, base.loops[0][0].y, (w / 2 + 1) / 128, base.loops[0][1].y),
                          *base.loops[1:]), base.plane, base.e1),) + part.program[1:]
    met, n = metrics.requirement_hits(wider, reqs)
    assert (met, n) == (len(reqs) - 1, len(reqs))  # 2 mm wider: the width is one level too far off
    assert metrics.requirement_hits(None, reqs) == (0, len(reqs))


def test_evaluate_counts_invalid_and_scores_perfect_predictions():
    pytest.importorskip("manifold3d")
    parts = corpus.make_corpus(4, 9)
    gts = [p.program for p in parts]
    bow = (C.Extrusion(((C.Line(0.2, 0.1), C.Line(0.2, -0.1), C.Line(-0.2, 0.1), C.Line(-0.2, -0.1)),)),)
    preds = [gts[0], gts[1], bow, None]
    out = metrics.evaluate(gts, preds, [p.requirements[3] for p in parts], chamfer_points=500)
    assert out["invalid_ratio"] == 0.5
    assert out["chamfer_median"] < 0.5  # two exact predictions: only sampling noise
    stated = sum(len(p.requirements[3]) for p in parts)
    assert out["requirement_satisfaction"] == pytest.approx(
        (len(parts[0].requirements[3]) + len(parts[1].requirements[3])) / stated)
    assert out["f1_extrusion"] == pytest.approx(
        np.mean([1, 1, metrics.f1(*metrics.primitive_matches(gts[2], bow)["extrusion"]), 0]))

"""The executor against closed-form volumes, and its errors on invalid geometry."""

import math

import numpy as np
import pytest

pytest.importorskip("trimesh")
pytest.importorskip("shapely")
pytest.importorskip("manifold3d")

from generative.cad import commands as C  # noqa: E402
from generative.cad import executor as X  # noqa: E402

N = X.SEGMENTS_PER_TURN


def rect(x0, y0, x1, y1):
    return (C.Line(x1, y0), C.Line(x1, y1), C.Line(x0, y1), C.Line(x0, y0))


def polygon_area(r, n=N):  # regular n-gon inscribed in a circle of radius r
    return 0.5 * n * r * r * math.sin(2 * math.pi / n)


def test_box_cylinder_and_plate_with_hole():
    box = X.execute((C.Extrusion((rect(-0.3, -0.2, 0.3, 0.2),), C.XY, e1=0.1),))
    assert box.is_watertight and box.volume == pytest.approx(0.6 * 0.4 * 0.1, rel=1e-6)
    np.testing.assert_allclose(box.bounds, [[-0.3, -0.2, 0.0], [0.3, 0.2, 0.1]], atol=1e-6)
    cyl = X.execute((C.Extrusion(((C.Circle(0.1, 0.0, 0.25),),), C.XY, e1=0.2),))
    assert cyl.volume == pytest.approx(polygon_area(0.25) * 0.2, rel=1e-6)
    assert cyl.volume == pytest.approx(math.pi * 0.25 ** 2 * 0.2, rel=2e-3)  # discretisation error of 64 segments
    plate = X.execute((C.Extrusion((rect(-0.3, -0.2, 0.3, 0.2), (C.Circle(0.05, 0.0, 0.1),)), C.XY, e1=0.1),))
    assert plate.volume == pytest.approx((0.24 - polygon_area(0.1)) * 0.1, rel=1e-6)
    assert plate.euler_number == 0  # one through hole: genus 1


def test_slot_of_lines_and_half_circle_arcs():
    a, r, d = 0.2, 0.1, 0.05
    slot = (C.Line(a, -r), C.Arc(a, r, math.pi, True), C.Line(-a, r), C.Arc(-a, -r, math.pi, True))
    m = X.execute((C.Extrusion((slot,), C.XY, e1=d),))
    assert m.volume == pytest.approx((2 * a * 2 * r + polygon_area(r)) * d, rel=1e-6)
    np.testing.assert_allclose(m.bounds, [[-a - r, -r, 0], [a + r, r, d]], atol=1e-6)


def test_arc_centre_for_both_directions_and_long_arcs():
    s, e = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    np.testing.assert_allclose(X.arc_center(s, e, math.pi / 2, True)[0], [0, 0], atol=1e-12)
    np.testing.assert_allclose(X.arc_center(s, e, math.pi / 2, False)[0], [1, 1], atol=1e-12)
    centre, radius = X.arc_center(s, e, 1.5 * math.pi, False)  # the long way round, clockwise
    np.testing.assert_allclose(centre, [0, 0], atol=1e-12)
    assert radius == pytest.approx(1.0)


def test_join_offset_plane_symmetric_and_two_sided_cuts():
    base = C.Extrusion((rect(-0.3, -0.3, 0.3, 0.3),), C.XY, e1=0.2)
    boss = C.Extrusion((rect(-0.1, -0.1, 0.1, 0.1),), C.Plane(origin=(0, 0, 0.2)), e1=0.1, boolean=C.JOIN)
    m = X.execute((base, boss))
    assert m.volume == pytest.approx(0.36 * 0.2 + 0.04 * 0.1, rel=1e-6)
    assert m.bounds[1][2] == pytest.approx(0.3)
    # A square cut on the XZ plane (normal -y), symmetric about y=0, e1 each side: a tunnel along y.
    tunnel = C.Extrusion((rect(-0.05, 0.05, 0.05, 0.15),), C.XZ, e1=0.1, boolean=C.CUT, extent=C.SYMMETRIC)
    m2 = X.execute((base, tunnel))
    assert m2.volume == pytest.approx(0.36 * 0.2 - 0.1 * 0.1 * 0.2, rel=1e-6)
    two = C.Extrusion((rect(-0.05, 0.05, 0.05, 0.15),), C.XZ, e1=0.1, e2=0.4, boolean=C.CUT, extent=C.TWO_SIDES)
    m3 = X.execute((base, two))  # e1 along the normal -y, e2 against it: y in [-0.1, 0.4], 0.4 of it in the box
    assert m3.volume == pytest.approx(0.36 * 0.2 - 0.1 * 0.1 * 0.4, rel=1e-6)
    inter = C.Extrusion(((C.Circle(0, 0, 0.1),),), C.Plane(origin=(0, 0, -1)), e1=2, boolean=C.INTERSECT)
    assert X.execute((base, inter)).volume == pytest.approx(polygon_area(0.1) * 0.2, rel=1e-6)


def test_plane_frames_are_right_handed():
    for plane in (C.XY, C.XZ, C.YZ):
        x, y, n = plane.frame()
        np.testing.assert_allclose(np.cross(x, y), n, atol=1e-12)
    np.testing.assert_allclose(np.stack(C.XZ.frame()), [[1, 0, 0], [0, 0, 1], [0, -1, 0]], atol=1e-12)


@pytest.mark.parametrize("program, match", [
    ((C.Extrusion(((C.Line(0.2, 0.1), C.Line(0.2, -0.1), C.Line(-0.2, 0.1), C.Line(-0.2, -0.1)),)),),
     "self-intersecting loop"),
    ((C.Extrusion(((C.Line(0.2, 0.0), C.Arc(-0.2, 0.0, 0.0)),)),), "degenerate arc: sweep 0"),
    ((C.Extrusion(((C.Line(0.2, 0.0), C.Arc(0.2, 0.0, 1.0), C.Line(0.0, 0.2)),)),), "start and end points coincide"),
    ((C.Extrusion(((C.Line(0.2, 0.0), C.Arc(-0.2, 0.0, 2 * math.pi)),)),), "expected in \\(0, 2 pi\\)"),
    ((C.Extrusion((rect(0, 0, 0.1, 0.1),), e1=0.0),), "nonzero extent"),
    ((C.Extrusion((rect(0, 0, 0.1, 0.1),), boolean=C.CUT),), "cut with nothing"),
    ((C.Extrusion(((C.Circle(0, 0, 0.0),),)),), "positive radius"),
    ((C.Extrusion(((C.Line(0.1, 0.0), C.Line(0.2, 0.0), C.Line(0.0, 0.0)),)),), "loop area"),
    ((C.Extrusion((rect(0, 0, 0.1, 0.1),)), C.Extrusion((rect(0.5, 0.5, 0.6, 0.6),), boolean=C.INTERSECT)),
     "empty"),
])
def test_invalid_programs_raise_one_clear_error(program, match):
    with pytest.raises(C.CADError, match=match):
        X.execute(program)
    assert not X.is_valid(program)


def test_quantised_degenerate_arc_is_caught():
    # An arc whose end points collapse to one level after 8-bit quantisation: an invalid made by the encoding.
    p = (C.Extrusion(((C.Line(0.3, 0.0), C.Arc(0.2985, 0.001, 1.0), C.Line(0.0, 0.3), C.Line(0.0, 0.0)),)),)
    assert X.is_valid(p)
    with pytest.raises(C.CADError, match="start and end points coincide"):
        X.execute(C.quantize_program(p))


def test_stl_export_reloads_with_the_same_volume(tmp_path):
    import trimesh
    p = (C.Extrusion((rect(-0.3, -0.2, 0.3, 0.2), (C.Circle(0, 0, 0.1),)), C.XY, e1=0.1),)
    path = X.export_stl(p, tmp_path / "part.stl")
    m = trimesh.load(path)
    assert m.is_watertight and m.volume == pytest.approx(X.execute(p).volume, rel=1e-5)


def test_step_export_needs_build123d(tmp_path):
    pytest.importorskip("build123d")
    p = (C.Extrusion((rect(-0.3, -0.2, 0.3, 0.2),), C.XY, e1=0.1),)
    assert X.export_step(p, tmp_path / "part.step").stat().st_size > 0


def test_brep_solid_has_the_mesh_executors_volume(tmp_path):
    """build123d / OCP (extra cad-brep) builds the same polygonal loops, planes and booleans as an exact B-rep:
    its volume equals the mesh executor's on corpus parts with holes, joins, cuts and a symmetric cross hole."""
    bd = pytest.importorskip("build123d")
    from generative.cad import corpus
    parts = [p for p in corpus.make_corpus(60, 3) if len(p.program) == 3 or "hole_r" in p.spec[0]][:4]
    assert any(p.spec[-1]["kind"] == "cross_hole" for p in corpus.make_corpus(60, 3))
    for i, part in enumerate(parts):
        path = X.export_step(part.program, tmp_path / f"part{i}.step")
        solid = bd.import_step(str(path))
        assert solid.volume == pytest.approx(X.execute(part.program).volume, rel=1e-6)


def test_brep_export_rejects_a_bow_tie_in_one_line(tmp_path):
    pytest.importorskip("build123d")
    bow_tie = (C.Extrusion(((C.Line(0.3, 0.3), C.Line(0.3, 0.0), C.Line(0.0, 0.3), C.Line(0.0, 0.0)),), C.XY, e1=0.1),)
    with pytest.raises(C.CADError, match="extrusion 0 loop 0: self-intersecting loop"):
        X.export_step(bow_tie, tmp_path / "bow.step")

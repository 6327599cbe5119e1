"""Vase geometry against closed forms, the six cameras, the rasteriser on hand cases, GLB export."""

import math

import numpy as np
import pytest

from core.config import BadInputError
from multimodal.vasevqa import render, vases


def _mesh_volume(height, knots, n_theta=vases.N_THETA, n_rings=vases.N_RINGS):
    import trimesh

    v, f, *_ = vases.body_mesh(height, np.asarray(knots, float), n_theta=n_theta, n_rings=n_rings)
    mesh = trimesh.Trimesh(v, f, process=False)
    assert mesh.is_watertight and mesh.is_winding_consistent
    return mesh.volume


def test_cylinder_and_cone_volumes_match_the_closed_forms():
    r, h, n = 0.2, 0.8, 32
    polygon = n / 2 * r * r * math.sin(2 * math.pi / n) * h  # an n-gon prism
    assert _mesh_volume(h, [(0, r), (1, r)], n_theta=n, n_rings=8) == pytest.approx(polygon, rel=1e-9)
    assert vases.profile_volume(h, [(0, r), (1, r)]) == pytest.approx(math.pi * r * r * h, rel=1e-12)
    # a cone frustum: pi h / 3 (R^2 + R r + r^2), times the polygon factor on the mesh
    R = 0.3
    frustum = math.pi * h / 3 * (R * R + R * r + r * r)
    assert vases.profile_volume(h, [(0, R), (1, r)]) == pytest.approx(frustum, rel=1e-12)
    assert _mesh_volume(h, [(0, R), (1, r)], n_theta=n, n_rings=8) == pytest.approx(
        frustum * vases.polygon_factor(n), rel=1e-9)


@pytest.mark.parametrize("shape", vases.SHAPES)
def test_every_shape_mesh_holds_its_profile_volume(shape):
    height, knots = vases.profile(shape)
    expected = vases.profile_volume(height, knots) * vases.polygon_factor(vases.N_THETA)
    assert _mesh_volume(height, knots) == pytest.approx(expected, rel=1e-9)
    # and the polygonal mesh is within 2 % of the smooth solid of revolution
    assert _mesh_volume(height, knots) == pytest.approx(vases.profile_volume(height, knots), rel=0.02)


def test_cameras_are_orthonormal_right_handed_and_opposite_in_pairs():
    for view in render.VIEWS:
        b = render.camera_basis(view)
        np.testing.assert_allclose(b @ b.T, np.eye(3), atol=1e-6)
        np.testing.assert_allclose(np.cross(b[2], b[1]), b[0], atol=1e-6)  # right = forward x up
    for a, c in (("front", "back"), ("left", "right"), ("top", "bottom")):
        np.testing.assert_allclose(render.camera_basis(a)[2], -render.camera_basis(c)[2])
    # the front camera looks along +y: a point at -y is nearer than one at +y; +z projects to the top rows
    near, far, high = render.project(np.array([[0, -0.3, 0], [0, 0.3, 0], [0, 0, 0.4]]), "front", 32)
    assert near[2] < far[2] and high[0] < near[0]
    with pytest.raises(BadInputError, match="view 'side'"):
        render.camera_basis("side")


def _cylinder_mesh(r=0.25, h=0.6):
    v, f, ft, fth, part = vases.body_mesh(h, np.asarray([(0, r), (1, r)]), n_theta=32, n_rings=4)
    return vases.VaseMesh(v, f, np.full((len(f), 3), 0.5), len(f))


def test_rasteriser_silhouettes_of_a_cylinder():
    size, r, h = 64, 0.25, 0.6
    views = render.render_mesh(_cylinder_mesh(r, h), size)
    pixel = 2 * render.EXTENT / size
    hit = np.abs(views.astype(float) / 255 - render.BACKGROUND).max(-1) > 0.02
    front, top = hit[render.VIEWS.index("front")], hit[render.VIEWS.index("top")]
    # front: a rectangle 2r wide, h tall; top: a disk of radius r
    assert front.sum(1).max() * pixel == pytest.approx(2 * r, abs=2 * pixel)
    assert front.sum(0).max() * pixel == pytest.approx(h, abs=2 * pixel)
    assert top.sum() * pixel ** 2 == pytest.approx(math.pi * r * r, rel=0.05)
    # the bottom view mirrors the top view of a symmetric solid; front equals back
    np.testing.assert_array_equal(hit[render.VIEWS.index("front")], hit[render.VIEWS.index("back")])


def test_rasteriser_keeps_the_nearest_face():
    # two parallel squares facing the front camera: the nearer (y = -0.2) one is red, the far one blue
    def square(y):
        a, b, c, d = [(-0.2, y, -0.2), (0.2, y, -0.2), (0.2, y, 0.2), (-0.2, y, 0.2)]
        return [(a, b, c), (a, c, d)]
    tri = np.asarray(square(0.3) + square(-0.2), np.float32)
    col = np.asarray([(0, 0, 1)] * 2 + [(1, 0, 0)] * 2, np.float32)
    views = np.asarray(render.render_views(tri, col, np.ones(4, bool), size=16))
    centre = views[render.VIEWS.index("front"), 8, 8]
    assert centre[0] > 0.4 and centre[2] == 0
    back = views[render.VIEWS.index("back"), 8, 8]
    assert back[2] > 0.4 and back[0] == 0


def test_a_vase_renders_six_distinct_views_and_exports_a_glb(tmp_path):
    import trimesh

    rng = np.random.default_rng(0)
    attrs = vases.VaseAttributes(fabric="Attic", technique="red-figure", shape="amphora", dating=vases.DATES[2],
                                 shoulder_band="meander", foot_band="rays", attribution="Berlin Painter")
    mesh = vases.build_mesh(attrs, rng)
    views = render.render_mesh(mesh, 32)
    assert views.shape == (6, 32, 32, 3) and views.dtype == np.uint8
    assert not np.array_equal(views[0], views[4])  # front vs top
    path = mesh.export_glb(tmp_path / "vase.glb")
    loaded = trimesh.load(str(path), force="mesh")
    assert len(loaded.faces) == len(mesh.faces)
    again = vases.load_glb(path)
    assert again.faces.shape == mesh.faces.shape
    with pytest.raises(BadInputError, match="GLB file"):
        vases.load_glb(tmp_path / "missing.glb")


def test_bad_attributes_raise_one_line():
    with pytest.raises(BadInputError, match="shape='pithos'"):
        vases.VaseAttributes(fabric="Attic", technique="red-figure", shape="pithos", dating=vases.DATES[0],
                             shoulder_band="meander", foot_band="rays", attribution="Berlin Painter")

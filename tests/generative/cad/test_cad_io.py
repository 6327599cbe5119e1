"""DeepCAD JSON and cad_vec I/O."""

import json
import math

import numpy as np
import pytest

from generative.cad import commands as C
from generative.cad import corpus, deepcad_io


def _close(a, b):
    """Programs equal up to float rounding of the JSON numbers."""
    return np.allclose(C.to_vector(a), C.to_vector(b))


def test_json_round_trip_on_corpus_parts(tmp_path):
    for part in corpus.make_corpus(40, 11):
        data = deepcad_io.to_json(part.program)
        path = tmp_path / "part.json"
        path.write_text(json.dumps(data))
        back = deepcad_io.from_json(path, normalize=False)
        assert _close(back, part.program)
        assert set(data) == {"entities", "sequence", "properties"}
        kinds = [data["entities"][s["entity"]]["type"] for s in data["sequence"]]
        assert kinds == ["Sketch", "ExtrudeFeature"] * len(part.program)


def test_reader_chains_reversed_curves_and_normalises():
    # Onshape stores curves in any direction: a unit square with its second edge reversed, 2 units wide.
    def line(a, b):
        return {"type": "Line3D", "start_point": dict(zip("xyz", (*a, 0.0))), "end_point": dict(zip("xyz", (*b, 0.0)))}
    loop = [line((0, 0), (2, 0)), line((2, 2), (2, 0)), line((2, 2), (0, 2)), line((0, 2), (0, 0))]
    axes = {"origin": {"x": 0, "y": 0, "z": 0}, "x_axis": {"x": 1, "y": 0, "z": 0},
            "y_axis": {"x": 0, "y": 1, "z": 0}, "z_axis": {"x": 0, "y": 0, "z": 1}}
    data = {"entities": {
        "s": {"type": "Sketch", "profiles": {"p": {"loops": [{"is_outer": True, "profile_curves": loop}]}},
              "transform": axes},
        "e": {"type": "ExtrudeFeature", "profiles": [{"profile": "p", "sketch": "s"}],
              "operation": "NewBodyFeatureOperation", "extent_type": "SymmetricFeatureExtentType",
              "extent_one": {"distance": {"value": 1.0}}}},
        "sequence": [{"entity": "s"}, {"entity": "e"}],
        "properties": {"bounding_box": {"min_point": {"x": 0, "y": 0, "z": -0.5},
                                        "max_point": {"x": 2, "y": 2, "z": 0.5}}}}
    (ext,) = deepcad_io.from_json(data)
    pts = [t for c in ext.loops[0] for t in (c.x, c.y)]
    assert pts == pytest.approx([0.75, 0, 0.75, 0.75, 0, 0.75, 0, 0])  # scaled by 0.75 / 2
    assert ext.extent == C.SYMMETRIC and ext.e1 == pytest.approx(0.75 / 2 / 2)  # Onshape's total, halved


def test_plane_from_axes_inverts_the_frame():
    rng = np.random.default_rng(0)
    for _ in range(20):
        plane = C.Plane(rng.uniform(0.1, math.pi - 0.1), rng.uniform(-3, 3), rng.uniform(-3, 3), (0.1, 0.2, 0.3))
        x, _, n = plane.frame()
        back = deepcad_io.plane_from_axes(np.array(plane.origin), x, n)
        np.testing.assert_allclose(np.stack(back.frame()), np.stack(plane.frame()), atol=1e-9)


def test_cad_vec_files_and_bad_paths(tmp_path):
    part = corpus.make_corpus(1, 2)[0]
    np.save(tmp_path / "a.npy", C.to_vector(part.program))
    assert deepcad_io.load_program(tmp_path / "a.npy") == part.program
    with pytest.raises(C.CADError, match="no such file"):
        deepcad_io.load_vec(tmp_path / "missing.h5")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(C.CADError, match="expected a .h5"):
        deepcad_io.load_vec(tmp_path / "a.txt")
    with pytest.raises(C.CADError, match="expected keys"):
        deepcad_io.from_json({"entities": {}})
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["vec"] = C.to_vector(part.program)
    assert deepcad_io.load_program(tmp_path / "a.h5") == part.program

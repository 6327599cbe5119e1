"""DeepCAD's on-disk forms, for users who have the data: the Onshape-derived JSON (`entities` of type Sketch and
ExtrudeFeature, `sequence` in order, `properties.bounding_box`) and the `cad_vec` arrays ((N, 17) integer
vectors, stored by DeepCAD in h5 files under the dataset `vec`; `.npy` works too).

Reading JSON: every sketch's profiles become loops of one extrusion per ExtrudeFeature (in sequence order); the
curves of a loop are chained so that each starts where the previous ends (a reversed curve is flipped); the part
is scaled so its bounding box fits in [-0.75, 0.75] (DeepCAD's normalisation factor) when `normalize`. Sketch
frames (origin, x/z axes) become the plane's Euler angles; Onshape's symmetric depth (the total) is halved into
e1 per side. Not read: taper angles, "UpToFace" style extents, and non-planar references.
"""

from __future__ import annotations

import json
import math
import pathlib
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from generative.cad.commands import (
    BOOLEANS,
    EXTENTS,
    SYMMETRIC,
    Arc,
    CADError,
    Circle,
    Extrusion,
    Line,
    Plane,
    Program,
    from_vector,
)

NORMALIZATION = 0.75
_OPS = {f"{b}FeatureOperation": i for i, b in enumerate(BOOLEANS)}
_EXTENT_TYPES = {f"{e}FeatureExtentType": i for i, e in enumerate(EXTENTS)}
_TOL = 1e-6


def _xyz(d: Mapping[str, float]) -> np.ndarray:
    return np.array([d["x"], d["y"], d.get("z", 0.0)], float)


def _pt(v) -> dict[str, float]:
    v = [float(t) for t in v] + [0.0] * (3 - len(v))
    return {"x": v[0], "y": v[1], "z": v[2]}


def plane_from_axes(origin: np.ndarray, x_axis: np.ndarray, z_axis: np.ndarray) -> Plane:
    """Euler angles (theta, phi, gamma) of R = Rz(phi) Ry(theta) Rz(gamma) with R e_x = x_axis, R e_z = z_axis."""
    n = z_axis / np.linalg.norm(z_axis)
    theta = math.acos(float(np.clip(n[2], -1, 1)))
    phi = math.atan2(n[1], n[0]) if abs(math.sin(theta)) > 1e-9 else 0.0
    cp, sp, ct, st = math.cos(phi), math.sin(phi), math.cos(theta), math.sin(theta)
    rz_t = np.array([[cp, sp, 0], [-sp, cp, 0], [0, 0, 1.0]])
    ry_t = np.array([[ct, 0, -st], [0, 1.0, 0], [st, 0, ct]])
    u = ry_t @ rz_t @ x_axis
    return Plane(theta, phi, math.atan2(u[1], u[0]), tuple(float(t) for t in origin))


def _curve_ends(c: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    return _xyz(c["start_point"])[:2], _xyz(c["end_point"])[:2]


def _loop_from_json(curves: list[Mapping[str, Any]], scale: float, where: str) -> tuple:
    if len(curves) == 1 and curves[0]["type"] == "Circle3D":
        c = curves[0]
        centre = _xyz(c["center_point"])[:2] * scale
        return (Circle(float(centre[0]), float(centre[1]), float(c["radius"]) * scale),)
    out = []
    prev_end = None
    ends = [_curve_ends(c) for c in curves]
    for j, (c, (s, e)) in enumerate(zip(curves, ends)):
        if c["type"] not in ("Line3D", "Arc3D"):
            raise CADError(f"{where} curve {j}: type {c['type']!r}: expected Line3D, Arc3D or a lone Circle3D")
        if prev_end is None:  # orient the first curve so that it chains into the second
            nxt = ends[(j + 1) % len(ends)]
            reverse = len(ends) > 1 and min(np.linalg.norm(s - nxt[0]), np.linalg.norm(s - nxt[1])) < _TOL
        else:
            reverse = np.linalg.norm(s - prev_end) > _TOL and np.linalg.norm(e - prev_end) < _TOL
        end = s if reverse else e
        if c["type"] == "Line3D":
            out.append(Line(*(float(t) for t in end * scale)))
        else:
            sweep = abs(float(c["end_angle"]) - float(c["start_angle"]))
            ccw = float(c.get("normal", {"z": 1.0})["z"]) > 0
            out.append(Arc(*(float(t) for t in end * scale), sweep, ccw != reverse))
        prev_end = end
    return tuple(out)


def from_json(data: Mapping[str, Any] | str | pathlib.Path, *, normalize: bool = True) -> Program:
    """A DeepCAD JSON (dict, text or path) -> program."""
    if isinstance(data, (str, pathlib.Path)) and not str(data).lstrip().startswith("{"):
        path = pathlib.Path(data)
        if not path.is_file():
            raise CADError(f"DeepCAD JSON {str(path)!r}: no such file")
        data = json.loads(path.read_text())
    elif isinstance(data, str):
        data = json.loads(data)
    for key in ("entities", "sequence"):
        if key not in data:
            raise CADError(f"DeepCAD JSON without {key!r}: expected keys 'entities' and 'sequence'")
    scale = 1.0
    if normalize and "properties" in data and "bounding_box" in data["properties"]:
        bb = data["properties"]["bounding_box"]
        extent = np.max(np.abs(np.stack([_xyz(bb["min_point"]), _xyz(bb["max_point"])])))
        scale = NORMALIZATION / extent if extent > 0 else 1.0
    entities = data["entities"]
    program = []
    for step in data["sequence"]:
        ent = entities[step["entity"]]
        if ent["type"] != "ExtrudeFeature":
            continue
        loops, plane = [], None
        for ref in ent["profiles"]:
            sketch = entities[ref["sketch"]]
            tr = sketch["transform"]
            plane = plane_from_axes(_xyz(tr["origin"]) * scale, _xyz(tr["x_axis"]), _xyz(tr["z_axis"]))
            for j, loop in enumerate(sketch["profiles"][ref["profile"]]["loops"]):
                loops.append(_loop_from_json(loop["profile_curves"], scale, f"sketch {ref['sketch']} loop {j}"))
        if plane is None:
            raise CADError(f"extrude {step['entity']}: no profiles: expected at least one sketch profile")
        op = ent["operation"]
        extent_type = ent.get("extent_type", "OneSideFeatureExtentType")
        if op not in _OPS or extent_type not in _EXTENT_TYPES:
            raise CADError(f"extrude {step['entity']}: operation {op!r} / extent {extent_type!r}: expected one of "
                           f"{sorted(_OPS)} / {sorted(_EXTENT_TYPES)}")
        e1 = float(ent["extent_one"]["distance"]["value"]) * scale
        e2 = float(ent.get("extent_two", {}).get("distance", {}).get("value", 0.0)) * scale
        u = _EXTENT_TYPES[extent_type]
        if u == SYMMETRIC:
            e1, e2 = e1 / 2.0, 0.0
        program.append(Extrusion(tuple(loops), plane, e1, e2, _OPS[op], u))
    if not program:
        raise CADError("DeepCAD JSON with no ExtrudeFeature: expected at least one extrusion")
    return tuple(program)


def _curve_json(c, start: np.ndarray) -> dict[str, Any]:
    cid = uuid.uuid4().hex[:12]
    if isinstance(c, Line):
        return {"type": "Line3D", "start_point": _pt(start), "end_point": _pt((c.x, c.y)), "curve": cid}
    if isinstance(c, Circle):
        return {"type": "Circle3D", "center_point": _pt((c.x, c.y)), "radius": c.r, "normal": _pt((0, 0, 1)),
                "curve": cid}
    from generative.cad.executor import arc_center
    end = np.array([c.x, c.y])
    centre, radius = arc_center(start, end, c.sweep, c.ccw)
    a0 = math.atan2(*(start - centre)[::-1])
    ref = (start - centre) / radius
    return {"type": "Arc3D", "start_point": _pt(start), "end_point": _pt(end), "center_point": _pt(centre),
            "radius": radius, "start_angle": 0.0, "end_angle": c.sweep, "reference_vector": _pt(ref),
            "normal": _pt((0, 0, 1 if c.ccw else -1)), "curve": cid, "start_angle_abs": a0}


def to_json(program: Program) -> dict[str, Any]:
    """Program -> DeepCAD JSON layout (lengths as they are; the bounding box is the sketch-origin hull)."""
    entities: dict[str, Any] = {}
    sequence = []
    for k, ext in enumerate(program):
        sid, eid, pid = f"sketch{k}", f"extrude{k}", f"profile{k}"
        x, y, n = ext.plane.frame()
        loops = []
        for loop in ext.loops:
            start = np.array([loop[-1].x, loop[-1].y], float)
            curves = []
            for c in loop:
                curves.append(_curve_json(c, start))
                start = np.array([c.x, c.y], float)
            loops.append({"is_outer": not loops, "profile_curves": curves})
        entities[sid] = {"type": "Sketch", "name": f"Sketch {k + 1}",
                         "profiles": {pid: {"loops": loops, "properties": {}}},
                         "transform": {"origin": _pt(ext.plane.origin), "x_axis": _pt(x), "y_axis": _pt(y),
                                       "z_axis": _pt(n)}, "reference_plane": {}}
        e1 = ext.e1 * 2.0 if ext.extent == SYMMETRIC else ext.e1
        entities[eid] = {"type": "ExtrudeFeature", "name": f"Extrude {k + 1}",
                         "profiles": [{"profile": pid, "sketch": sid}],
                         "operation": f"{BOOLEANS[ext.boolean]}FeatureOperation",
                         "extent_type": f"{EXTENTS[ext.extent]}FeatureExtentType",
                         "extent_one": {"distance": {"type": "ModelParameter", "value": e1, "name": "none",
                                                     "role": "AlongDistance"}},
                         "extent_two": {"distance": {"type": "ModelParameter", "value": ext.e2, "name": "none",
                                                     "role": "AgainstDistance"}},
                         "start_extent": {"type": "ProfilePlaneStartDefinition"}}
        sequence += [{"index": 2 * k, "type": "Sketch", "entity": sid},
                     {"index": 2 * k + 1, "type": "ExtrudeFeature", "entity": eid}]
    return {"entities": entities, "sequence": sequence, "properties": {}}


def load_vec(path: str | pathlib.Path) -> np.ndarray:
    """A `cad_vec` array from `.h5` (dataset `vec`, needs h5py) or `.npy`."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise CADError(f"cad_vec file {str(path)!r}: no such file")
    if path.suffix == ".npy":
        return np.load(path)
    if path.suffix in (".h5", ".hdf5"):
        try:
            import h5py
        except ImportError as e:
            raise ImportError("h5py is missing: reading DeepCAD's .h5 vectors needs it (pip install h5py)") from e
        with h5py.File(path, "r") as f:
            return np.asarray(f["vec"][:])
    raise CADError(f"cad_vec file {str(path)!r}: expected a .h5 (dataset 'vec') or .npy file")


def load_program(path: str | pathlib.Path) -> Program:
    path = pathlib.Path(path)
    return from_json(path) if path.suffix == ".json" else from_vector(load_vec(path))

"""Execute a program into a watertight triangle mesh: loops -> shapely polygons (arcs and circles discretised),
a profile = the even-odd combination of its loops (inner loops are holes), extruded with trimesh, placed on its
sketch plane, combined with the running solid by manifold3d booleans.

Every failure is a `CADError` naming the extrusion and loop: a self-intersecting (bow-tie) loop, a degenerate
arc (zero sweep, a full turn, coincident end points), a zero-area loop or profile, a zero extent, an empty or
non-watertight result. The invalid ratio of generated programs is the fraction that raise here.

`export_stl` writes any part; `export_step` needs the optional `build123d` extra (exact B-rep via OCP).
"""

from __future__ import annotations

import math
import pathlib

import numpy as np

from generative.cad.commands import (
    ARC,
    CUT,
    INTERSECT,
    JOIN,
    NEW,
    ONE_SIDE,
    SYMMETRIC,
    TWO_SIDES,
    Arc,
    CADError,
    Circle,
    Extrusion,
    Line,
    Program,
)

SEGMENTS_PER_TURN = 64  # arc / circle discretisation
EPS = 1e-9
MIN_AREA = 1e-6


def _need_geometry():
    try:
        import manifold3d  # noqa: F401
        import shapely  # noqa: F401
        import trimesh  # noqa: F401
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError(f"{e.name} is missing: the CAD executor needs the [cad] extra "
                          "(pip install -e '.[cad]': trimesh, shapely, manifold3d, mapbox-earcut)") from e


def arc_center(start: np.ndarray, end: np.ndarray, sweep: float, ccw: bool) -> tuple[np.ndarray, float]:
    """Centre and radius of the arc from `start` to `end` turning `sweep` radians (counter-clockwise if ccw)."""
    chord = end - start
    c = float(np.hypot(*chord))
    if c < EPS:
        raise CADError("degenerate arc: start and end points coincide: expected distinct end points "
                       "(use a Circle for a full turn)")
    if not (EPS < sweep < 2 * math.pi - EPS):
        raise CADError(f"degenerate arc: sweep {sweep:.4g} rad: expected in (0, 2 pi)")
    radius = c / (2.0 * math.sin(sweep / 2.0))
    mid = (start + end) / 2.0
    normal = np.array([-chord[1], chord[0]]) / c  # left of the chord
    # The centre lies left of the chord for a ccw arc shorter than half a turn, right for a longer one.
    h = radius * math.cos(sweep / 2.0)
    centre = mid + (normal * h if ccw else -normal * h)
    return centre, abs(radius)


def arc_points(start: np.ndarray, end: np.ndarray, sweep: float, ccw: bool,
               segments_per_turn: int = SEGMENTS_PER_TURN) -> np.ndarray:
    """Points after `start` up to and including `end` along the arc."""
    centre, radius = arc_center(start, end, sweep, ccw)
    a0 = math.atan2(start[1] - centre[1], start[0] - centre[0])
    n = max(2, int(math.ceil(segments_per_turn * sweep / (2 * math.pi))))
    sign = 1.0 if ccw else -1.0
    angles = a0 + sign * sweep * np.arange(1, n + 1) / n
    pts = centre + radius * np.stack([np.cos(angles), np.sin(angles)], 1)
    pts[-1] = end
    return pts


def circle_points(c: Circle, segments: int = SEGMENTS_PER_TURN) -> np.ndarray:
    if c.r <= EPS:
        raise CADError(f"circle of radius {c.r:.4g}: expected a positive radius")
    t = 2 * math.pi * np.arange(segments) / segments
    return np.stack([c.x + c.r * np.cos(t), c.y + c.r * np.sin(t)], 1)


def loop_points(loop, where: str = "loop") -> np.ndarray:
    """(M, 2) polygon of a loop (not repeated at the end)."""
    if not loop:
        raise CADError(f"{where}: empty loop: expected at least one curve")
    if any(isinstance(c, Circle) for c in loop):
        if len(loop) != 1:
            raise CADError(f"{where}: a circle with {len(loop) - 1} other curves: expected a circle alone in its loop")
        return circle_points(loop[0])
    start = np.array([loop[-1].x, loop[-1].y], float)
    pts = []
    for j, c in enumerate(loop):
        end = np.array([c.x, c.y], float)
        if isinstance(c, Line):
            if np.hypot(*(end - start)) < EPS:
                raise CADError(f"{where} curve {j}: zero-length line: expected distinct end points")
            pts.append(end[None])
        elif isinstance(c, Arc):
            try:
                pts.append(arc_points(start, end, c.sweep, c.ccw))
            except CADError as e:
                raise CADError(f"{where} curve {j}: {e}") from None
        start = end
    out = np.concatenate(pts, 0)
    if len(out) < 3:
        raise CADError(f"{where}: {len(loop)} curve(s) enclose no area: expected a closed loop of >= 3 points")
    return out


def loop_polygon(loop, where: str = "loop"):
    import shapely
    from shapely.geometry import Polygon
    pts = loop_points(loop, where)
    if np.linalg.matrix_rank(pts - pts.mean(0), tol=1e-9) < 2:
        raise CADError(f"{where}: collinear loop, loop area 0: expected > {MIN_AREA}")
    poly = Polygon(pts)
    if not poly.is_valid:
        raise CADError(f"{where}: self-intersecting loop ({shapely.is_valid_reason(poly)}): expected a simple closed "
                       "curve (no bow-tie)")
    if poly.area < MIN_AREA:
        raise CADError(f"{where}: loop area {poly.area:.3g}: expected > {MIN_AREA}")
    return poly


def profile_polygon(ext: Extrusion, where: str = "extrusion"):
    """The region enclosed by the loops under the even-odd rule (a loop inside another is a hole)."""
    region = None
    for j, loop in enumerate(ext.loops):
        poly = loop_polygon(loop, f"{where} loop {j}")
        region = poly if region is None else region.symmetric_difference(poly)
    if region is None or region.is_empty or region.area < MIN_AREA:
        raise CADError(f"{where}: empty profile: expected loops that enclose an area")
    return region


def _extent(ext: Extrusion, where: str) -> tuple[float, float]:
    """(low, high) along the sketch normal. Symmetric: e1 to each side (DeepCAD's vector convention; the JSON
    reader halves Onshape's total symmetric depth)."""
    if ext.extent == ONE_SIDE:
        lo, hi = 0.0, ext.e1
    elif ext.extent == SYMMETRIC:
        lo, hi = -ext.e1, ext.e1
    elif ext.extent == TWO_SIDES:
        lo, hi = -ext.e2, ext.e1
    else:
        raise CADError(f"{where}: extent type {ext.extent}: expected 0..2")
    lo, hi = min(lo, hi), max(lo, hi)
    if hi - lo < EPS:
        raise CADError(f"{where}: extrusion depth {hi - lo:.3g}: expected a nonzero extent")
    return lo, hi


def extrude(ext: Extrusion, where: str = "extrusion"):
    """The extruded body of one extrusion, in world coordinates (a trimesh.Trimesh)."""
    import trimesh
    from shapely.geometry import MultiPolygon
    region = profile_polygon(ext, where)
    lo, hi = _extent(ext, where)
    polys = list(region.geoms) if isinstance(region, MultiPolygon) else [region]
    parts = [trimesh.creation.extrude_polygon(p, hi - lo) for p in polys if p.area >= MIN_AREA]
    if not parts:
        raise CADError(f"{where}: profile of pieces too small to extrude")
    body = trimesh.util.concatenate(parts) if len(parts) > 1 else parts[0]
    x, y, n = ext.plane.frame()
    transform = np.eye(4)
    transform[:3, 0], transform[:3, 1], transform[:3, 2] = x * ext.scale, y * ext.scale, n
    transform[:3, 3] = np.asarray(ext.plane.origin) + n * lo
    body.apply_transform(transform)
    return body


def _manifold(mesh):
    import manifold3d
    m = manifold3d.Manifold(manifold3d.Mesh(vert_properties=np.asarray(mesh.vertices, np.float32),
                                            tri_verts=np.asarray(mesh.faces, np.uint32)))
    if m.status() != manifold3d.Error.NoError:
        raise CADError(f"extruded body is not a manifold ({m.status()}): expected a closed solid")
    return m


def _trimesh(m):
    import trimesh
    mesh = m.to_mesh()
    return trimesh.Trimesh(vertices=np.asarray(mesh.vert_properties)[:, :3], faces=np.asarray(mesh.tri_verts),
                           process=True)


def execute(program: Program) -> trimesh.Trimesh:  # noqa: F821
    """The solid of a program; CADError when any step is invalid or the result is empty / not watertight."""
    _need_geometry()
    if not program:
        raise CADError("empty program: expected at least one extrusion")
    solid = None
    for k, ext in enumerate(program):
        body = _manifold(extrude(ext, f"extrusion {k}"))
        if solid is None:
            if ext.boolean in (CUT, INTERSECT):
                raise CADError(f"extrusion {k}: a {('cut', 'intersect')[ext.boolean - CUT]} with nothing to act on: "
                               "expected NewBody or Join first")
            solid = body
        elif ext.boolean in (NEW, JOIN):
            solid = solid + body
        elif ext.boolean == CUT:
            solid = solid - body
        elif ext.boolean == INTERSECT:
            solid = solid ^ body
        else:
            raise CADError(f"extrusion {k}: boolean {ext.boolean}: expected 0..3")
    if solid.is_empty() or solid.volume() < MIN_AREA * 1e-3:
        raise CADError("the program's solid is empty: expected a nonzero volume")
    mesh = _trimesh(solid)
    if not mesh.is_watertight:
        raise CADError("the program's solid is not watertight")
    return mesh


def is_valid(program: Program) -> bool:
    try:
        execute(program)
    except CADError:
        return False
    return True


def export_stl(program: Program, path: str | pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    execute(program).export(path)
    return path


def export_step(program: Program, path: str | pathlib.Path) -> pathlib.Path:
    """A B-rep STEP through build123d / OCP (optional extra `cad-brep`): the same polygonal loops (arcs and circles
    discretised as in the mesh executor), planes and booleans, so the solid's volume equals `execute`'s (tested).
    Each profile is first checked as the mesh executor checks it (a bow-tie, a degenerate arc, a collinear loop
    raise the same one-line CADError): OCP itself builds a bow-tie face without complaint."""
    try:
        import build123d as bd
    except ImportError as e:
        raise ImportError("build123d is missing: STEP export needs the [cad-brep] extra "
                          "(pip install -e '.[cad-brep]')") from e
    solid = None
    for k, ext in enumerate(program):
        x, _, n = ext.plane.frame()
        profile_polygon(ext, f"extrusion {k}")
        lo, hi = _extent(ext, f"extrusion {k}")
        plane = bd.Plane(origin=tuple(np.asarray(ext.plane.origin) + n * lo), x_dir=tuple(x), z_dir=tuple(n))
        faces = None
        for j, loop in enumerate(ext.loops):
            pts = loop_points(loop, f"extrusion {k} loop {j}") * ext.scale
            wire = bd.Wire.make_polygon([plane.from_local_coords((float(px), float(py))) for px, py in pts], close=True)
            face = bd.Face(wire)
            faces = face if faces is None else (faces - face if faces.intersect(face) else faces + face)
        body = bd.extrude(faces, amount=hi - lo, dir=tuple(n))
        if solid is None:
            solid = body
        elif ext.boolean in (NEW, JOIN):
            solid = solid + body
        elif ext.boolean == CUT:
            solid = solid - body
        else:
            solid = solid & body
    path = pathlib.Path(path)
    bd.export_step(solid, str(path))
    return path


__all__ = ["ARC", "arc_center", "execute", "export_step", "export_stl", "extrude", "is_valid", "loop_polygon",
           "profile_polygon"]

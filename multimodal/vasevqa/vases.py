"""Procedural Greek vases: a surface-of-revolution profile per shape class, handles, painted decoration (figure /
ground technique, band patterns, fabric palettes, wear by date) as per-face colours, and GLB export.

The six attributes of the released QA schema are drawn per vase (`sample_attributes`); `build_mesh` turns them
into a closed triangle mesh (the body, with a foot cap and a dark mouth cap standing for the interior seen from
above) plus open tube handles, every face coloured. The face count is padded to a fixed `MAX_FACES` so the
jitted renderer (`render.py`) compiles once for every vase.

Profiles are piecewise linear in (height fraction, radius); `profile_volume` is the closed form of the solid of
revolution (a sum of frusta, pi h / 3 (r0^2 + r0 r1 + r1^2)), and a mesh of N segments holds exactly
N sin(2 pi / N) / (2 pi) of it when its rings sit at the profile's knots.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Sequence

import numpy as np

from core.config import BadInputError

FABRICS = ("Attic", "Corinthian", "Laconian", "Boeotian")
TECHNIQUES = ("black-figure", "red-figure")
SHAPES = ("amphora", "lekythos", "hydria", "kylix", "krater", "oinochoe")
DATES = ("c. 575-550 BCE", "c. 550-525 BCE", "c. 525-500 BCE", "c. 500-475 BCE", "c. 475-450 BCE")
BANDS = ("meander", "rays", "tongues", "ivy", "dots")
# two workshops per fabric; painter 0 paints one large figure on each side, painter 1 a frieze of four small ones
PAINTERS = {"Attic": ("Antimenes Painter", "Berlin Painter"),
            "Corinthian": ("Chimaera Painter", "Cavalcade Painter"),
            "Laconian": ("Hunt Painter", "Rider Painter"),
            "Boeotian": ("Horse-bird Painter", "Dancers Painter")}
ATTRIBUTIONS = tuple(p for f in FABRICS for p in PAINTERS[f])
SUBJECTS = ("a warrior", "a procession")  # by painter style: one large figure / a frieze
ATTRIBUTES = ("Fabric", "Technique", "Shape", "Dating", "Decoration", "Attribution")

# clay colour (RGB in [0, 1]) per fabric; the black gloss is shared
CLAY = {"Attic": (0.82, 0.46, 0.22), "Corinthian": (0.92, 0.80, 0.56), "Laconian": (0.66, 0.30, 0.22),
        "Boeotian": (0.80, 0.66, 0.48)}
GLOSS = (0.08, 0.06, 0.05)
INTERIOR = (0.18, 0.10, 0.06)
WEAR = (0.16, 0.12, 0.09, 0.06, 0.03)  # colour-noise sd per date bucket: older sherds are more worn

# (height fraction, radius) knots per shape, and the total height; radius and height in the same units
PROFILES = {
    "amphora": (1.0, ((0.0, 0.15), (0.05, 0.15), (0.09, 0.09), (0.22, 0.25), (0.42, 0.33), (0.62, 0.27),
                      (0.74, 0.13), (0.88, 0.11), (0.95, 0.15), (1.0, 0.16))),
    "lekythos": (1.0, ((0.0, 0.12), (0.05, 0.12), (0.08, 0.07), (0.14, 0.16), (0.55, 0.18), (0.62, 0.15),
                       (0.67, 0.05), (0.84, 0.045), (0.92, 0.09), (1.0, 0.07))),
    "hydria": (0.9, ((0.0, 0.17), (0.05, 0.17), (0.10, 0.13), (0.35, 0.30), (0.55, 0.36), (0.68, 0.30),
                     (0.77, 0.12), (0.90, 0.11), (1.0, 0.18))),
    "kylix": (0.45, ((0.0, 0.17), (0.06, 0.17), (0.12, 0.04), (0.40, 0.05), (0.50, 0.26), (0.78, 0.42),
                     (1.0, 0.46))),
    "krater": (0.85, ((0.0, 0.18), (0.06, 0.18), (0.12, 0.11), (0.30, 0.27), (0.60, 0.33), (0.74, 0.32),
                      (0.88, 0.38), (1.0, 0.42))),
    "oinochoe": (0.9, ((0.0, 0.16), (0.04, 0.16), (0.10, 0.20), (0.40, 0.30), (0.60, 0.24), (0.76, 0.09),
                       (0.90, 0.11), (1.0, 0.15))),
}
# handles: (kind, azimuth, t0, t1) vertical from height fraction t0 to t1, or (kind, azimuth, t, half-angle)
HANDLES = {
    "amphora": (("v", 0.0, 0.60, 0.86), ("v", math.pi, 0.60, 0.86)),
    "lekythos": (("v", math.pi / 2, 0.62, 0.86),),
    "hydria": (("h", 0.0, 0.50, 0.35), ("h", math.pi, 0.50, 0.35), ("v", math.pi / 2, 0.62, 0.92)),
    "kylix": (("h", 0.0, 0.86, 0.30), ("h", math.pi, 0.86, 0.30)),
    "krater": (("v", 0.0, 0.62, 0.95), ("v", math.pi, 0.62, 0.95)),
    "oinochoe": (("v", math.pi / 2, 0.55, 0.92),),
}
N_THETA = 32          # segments around the axis
N_RINGS = 26          # rings along the height
HANDLE_SEGMENTS = (8, 5)  # along the handle, around its tube
MAX_FACES = 2 * N_THETA * (N_RINGS - 1) + 2 * N_THETA + 3 * 2 * HANDLE_SEGMENTS[0] * HANDLE_SEGMENTS[1]
SCALE = 1.0           # world units per profile unit; the vase is centred on its mid-height


@dataclasses.dataclass(frozen=True)
class VaseAttributes:
    fabric: str
    technique: str
    shape: str
    dating: str
    shoulder_band: str
    foot_band: str
    attribution: str

    def __post_init__(self):
        for name, allowed in (("fabric", FABRICS), ("technique", TECHNIQUES), ("shape", SHAPES),
                              ("dating", DATES), ("shoulder_band", BANDS), ("foot_band", BANDS),
                              ("attribution", ATTRIBUTIONS)):
            if getattr(self, name) not in allowed:
                raise BadInputError(f"vase {name}={getattr(self, name)!r}: expected one of {allowed}")

    @property
    def painter_style(self) -> int:
        return PAINTERS[self.fabric].index(self.attribution) if self.attribution in PAINTERS[self.fabric] else 0

    @property
    def decoration(self) -> str:
        return f"{self.shoulder_band} on the shoulder and {self.foot_band} at the foot"

    @property
    def subject(self) -> str:
        return SUBJECTS[self.painter_style]

    def value(self, attribute: str) -> str:
        return {"Fabric": self.fabric, "Technique": self.technique, "Shape": self.shape, "Dating": self.dating,
                "Decoration": self.decoration, "Attribution": self.attribution}[attribute]


def sample_attributes(rng: np.random.Generator) -> VaseAttributes:
    fabric = FABRICS[rng.integers(len(FABRICS))]
    shoulder, foot = rng.choice(len(BANDS), 2, replace=False)
    return VaseAttributes(fabric=fabric, technique=TECHNIQUES[rng.integers(2)], shape=SHAPES[rng.integers(len(SHAPES))],
                          dating=DATES[rng.integers(len(DATES))], shoulder_band=BANDS[shoulder], foot_band=BANDS[foot],
                          attribution=PAINTERS[fabric][rng.integers(2)])


def profile(shape: str) -> tuple[float, np.ndarray]:
    if shape not in PROFILES:
        raise BadInputError(f"shape {shape!r}: expected one of {SHAPES}")
    height, knots = PROFILES[shape]
    return height * SCALE, np.asarray(knots, np.float64) * np.array([1.0, SCALE])


def radius_at(knots: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.interp(t, knots[:, 0], knots[:, 1])


def profile_volume(height: float, knots: np.ndarray) -> float:
    """The solid of revolution of a piecewise-linear profile: a sum of frusta."""
    t, r = np.asarray(knots, np.float64).T
    h = np.diff(t) * height
    return float(np.sum(math.pi * h / 3.0 * (r[:-1] ** 2 + r[:-1] * r[1:] + r[1:] ** 2)))


def ring_heights(knots: np.ndarray, n_rings: int = N_RINGS) -> np.ndarray:
    """Ring positions: every knot, then the rest spread uniformly (so the mesh follows the profile exactly)."""
    t_knots = np.asarray(knots)[:, 0]
    extra = n_rings - len(t_knots)
    if extra < 0:
        raise BadInputError(f"n_rings={n_rings}: expected at least the profile's {len(t_knots)} knots")
    uniform = np.linspace(0, 1, extra + 2)[1:-1]
    return np.unique(np.concatenate([t_knots, uniform + 1e-6]))[:n_rings] if extra else t_knots


def body_mesh(height: float, knots: np.ndarray, *, n_theta: int = N_THETA, n_rings: int = N_RINGS):
    """(vertices (V, 3), faces (F, 3), face_t (F,), face_theta (F,), part (F,)) of the closed body: the side
    wall, a foot cap (part 1) and a mouth cap (part 2, the interior's shadow); part 0 is the wall."""
    t = ring_heights(knots, n_rings)
    n_rings = len(t)
    r = radius_at(knots, t)
    theta = np.arange(n_theta) * 2 * math.pi / n_theta
    z = t * height - height / 2
    verts = np.stack([np.outer(r, np.cos(theta)), np.outer(r, np.sin(theta)), np.repeat(z[:, None], n_theta, 1)], -1)
    verts = verts.reshape(-1, 3)
    bottom, top = len(verts), len(verts) + 1
    verts = np.concatenate([verts, [[0, 0, z[0]], [0, 0, z[-1]]]])
    faces, ft, fth, part = [], [], [], []
    for i in range(n_rings - 1):
        for j in range(n_theta):
            a, b = i * n_theta + j, i * n_theta + (j + 1) % n_theta
            c, d = a + n_theta, b + n_theta
            faces += [(a, b, d), (a, d, c)]  # outward normals (counter-clockwise seen from outside)
            tm, thm = (t[i] + t[i + 1]) / 2, (j + 0.5) * 2 * math.pi / n_theta
            ft += [tm, tm]
            fth += [thm, thm]
            part += [0, 0]
    last = (n_rings - 1) * n_theta
    for j in range(n_theta):
        jn = (j + 1) % n_theta
        faces.append((bottom, jn, j))
        faces.append((top, last + j, last + jn))
        thm = (j + 0.5) * 2 * math.pi / n_theta
        ft += [0.0, 1.0]
        fth += [thm, thm]
        part += [1, 2]
    return verts, np.asarray(faces, np.int64), np.asarray(ft), np.asarray(fth), np.asarray(part)


def handle_mesh(height: float, knots: np.ndarray, spec: tuple, *, segments: tuple[int, int] = HANDLE_SEGMENTS):
    """An open tube along an arc that bulges out of the body: vertical (from t0 to t1 at one azimuth) or
    horizontal (at height t, spanning +/- half-angle around an azimuth)."""
    kind, azimuth, a, b = spec
    n_s, n_c = segments
    s = np.linspace(0, 1, n_s + 1)
    tube = 0.018 * SCALE
    if kind == "v":
        t = a + (b - a) * s
        rad = radius_at(knots, t) + 0.10 * SCALE * np.sin(math.pi * s)
        phi = np.full_like(s, azimuth)
    else:
        t = np.full_like(s, a)
        rad = radius_at(knots, t) + 0.07 * SCALE * np.sin(math.pi * s)
        phi = azimuth - b + 2 * b * s
    centre = np.stack([rad * np.cos(phi), rad * np.sin(phi), t * height - height / 2], -1)
    tangent = np.gradient(centre, axis=0)
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    ref = np.array([0.0, 0.0, 1.0]) if kind == "h" else np.stack([-np.sin(phi), np.cos(phi), 0 * phi], -1)
    n1 = np.cross(tangent, ref)
    n1 /= np.linalg.norm(n1, axis=1, keepdims=True) + 1e-12
    n2 = np.cross(tangent, n1)
    ang = np.arange(n_c) * 2 * math.pi / n_c
    ring = np.cos(ang)[None, :, None] * n1[:, None] + np.sin(ang)[None, :, None] * n2[:, None]
    verts = centre[:, None] + tube * ring
    verts = verts.reshape(-1, 3)
    faces = []
    for i in range(n_s):
        for j in range(n_c):
            p, q = i * n_c + j, i * n_c + (j + 1) % n_c
            faces += [(p, q, q + n_c), (p, q + n_c, p + n_c)]
    return verts, np.asarray(faces, np.int64)


def _band_pattern(band: str, theta: np.ndarray, u: np.ndarray) -> np.ndarray:
    """True where a band of type `band` is painted dark; theta around the axis, u in [0, 1] across the band."""
    k = 8  # repeats around the vase
    phase = (theta * k / (2 * math.pi)) % 1.0
    if band == "meander":   # a key pattern: alternating top / bottom hooks
        return np.where(phase < 0.5, u > 0.5, u < 0.5) | (np.abs(phase - 0.5) < 0.12)
    if band == "rays":      # upward triangles
        return u < 1.0 - 2.0 * np.abs(phase - 0.5)
    if band == "tongues":   # alternating dark / light tongues
        return (phase < 0.5) & (u > 0.2)
    if band == "ivy":       # a wavy stem
        return np.abs(u - 0.5 - 0.35 * np.sin(2 * math.pi * phase)) < 0.2
    if band == "dots":      # a row of dots
        return (np.abs(phase - 0.5) < 0.2) & (np.abs(u - 0.5) < 0.3)
    raise BadInputError(f"band {band!r}: expected one of {BANDS}")


SHOULDER_BAND = (0.70, 0.80)
FOOT_BAND = (0.12, 0.24)
PANEL = (0.32, 0.66)


def face_colours(attrs: VaseAttributes, face_t: np.ndarray, face_theta: np.ndarray, part: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """Per-face RGB: clay ground or black gloss by technique, the figure panel by painter style, the two bands,
    a black lip and foot, and wear noise by date."""
    clay = np.asarray(CLAY[attrs.fabric]) * (1 + 0.04 * rng.standard_normal(3))
    gloss = np.asarray(GLOSS)
    figure_dark = attrs.technique == "black-figure"  # black figures on clay; red-figure: clay figures on black
    ground = clay if figure_dark else gloss
    figure = gloss if figure_dark else clay
    n = len(face_t)
    colour = np.repeat(ground[None], n, 0)
    lo, hi = PANEL
    in_panel = (face_t >= lo) & (face_t <= hi)
    offset = rng.uniform(-0.15, 0.15)
    if attrs.painter_style == 0:
        centres, half_width, top = np.array([-math.pi / 2, math.pi / 2]), 0.42, hi
    else:
        centres, half_width, top = np.arange(4) * math.pi / 2 - math.pi / 4, 0.20, lo + 0.6 * (hi - lo)
    d = np.abs((face_theta[:, None] - centres[None] - offset + math.pi) % (2 * math.pi) - math.pi).min(axis=1)
    colour[in_panel & (d < half_width) & (face_t <= top)] = figure
    for (b0, b1), band in ((SHOULDER_BAND, attrs.shoulder_band), (FOOT_BAND, attrs.foot_band)):
        inside = (face_t >= b0) & (face_t < b1)
        u = (face_t - b0) / (b1 - b0)
        dark = _band_pattern(band, face_theta, u)
        colour[inside] = np.where(dark[inside, None], gloss, clay)
    colour[(face_t < 0.06) | (face_t > 0.95)] = gloss
    colour[part == 1] = gloss
    colour[part == 2] = INTERIOR
    wear = WEAR[DATES.index(attrs.dating)]
    colour = colour + wear * rng.standard_normal((n, 1)) + 0.3 * wear * rng.standard_normal((n, 3))
    return np.clip(colour, 0.0, 1.0)


@dataclasses.dataclass
class VaseMesh:
    vertices: np.ndarray   # (V, 3)
    faces: np.ndarray      # (F, 3) int
    colours: np.ndarray    # (F, 3) in [0, 1]
    body_faces: int        # the first body_faces faces are the closed body

    def triangles(self, max_faces: int = MAX_FACES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(triangles (max_faces, 3, 3), colours (max_faces, 3), valid (max_faces,)): padded for the renderer."""
        f = len(self.faces)
        if f > max_faces:
            raise BadInputError(f"mesh with {f} faces: expected at most max_faces={max_faces}")
        tri = np.zeros((max_faces, 3, 3), np.float32)
        col = np.zeros((max_faces, 3), np.float32)
        valid = np.zeros(max_faces, bool)
        tri[:f], col[:f], valid[:f] = self.vertices[self.faces], self.colours, True
        return tri, col, valid

    def trimesh(self):
        import trimesh

        rgba = np.concatenate([np.round(self.colours * 255), np.full((len(self.faces), 1), 255)], 1).astype(np.uint8)
        return trimesh.Trimesh(self.vertices, self.faces, face_colors=rgba, process=False)

    def body_trimesh(self):
        import trimesh

        n = self.body_faces
        return trimesh.Trimesh(self.vertices, self.faces[:n], process=False)

    def export_glb(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.trimesh().export(str(path), file_type="glb")
        return path


def build_mesh(attrs: VaseAttributes, rng: np.random.Generator, *, n_theta: int = N_THETA,
               n_rings: int = N_RINGS) -> VaseMesh:
    height, knots = profile(attrs.shape)
    verts, faces, ft, fth, part = body_mesh(height, knots, n_theta=n_theta, n_rings=n_rings)
    colours = face_colours(attrs, ft, fth, part, rng)
    body = len(faces)
    all_v, all_f, all_c = [verts], [faces], [colours]
    offset = len(verts)
    for spec in HANDLES[attrs.shape]:
        hv, hf = handle_mesh(height, knots, spec)
        all_v.append(hv)
        all_f.append(hf + offset)
        all_c.append(np.clip(np.repeat(np.asarray(GLOSS)[None], len(hf), 0), 0, 1))
        offset += len(hv)
    return VaseMesh(np.concatenate(all_v), np.concatenate(all_f), np.concatenate(all_c), body)


def load_glb(path: str | pathlib.Path) -> VaseMesh:
    """A GLB (ours, or a released TripoSG model) as a VaseMesh: faces coloured from the file's face or vertex
    colours, or its texture sampled at the face centroids' UVs; grey when it has none."""
    import trimesh

    path = pathlib.Path(path)
    if not path.exists():
        raise BadInputError(f"GLB file {str(path)!r}: expected an existing .glb file")
    scene = trimesh.load(str(path), force="mesh", process=False)
    mesh = scene if isinstance(scene, trimesh.Trimesh) else scene.dump(concatenate=True)
    visual = mesh.visual
    colours = None
    try:
        if getattr(visual, "kind", None) == "texture":
            visual = visual.to_color()
        fc = np.asarray(visual.face_colors, np.float32)[:, :3] / 255.0
        colours = fc if len(fc) == len(mesh.faces) else None
    except Exception:  # noqa: BLE001 - a GLB without usable colours is rendered grey
        colours = None
    if colours is None:
        colours = np.full((len(mesh.faces), 3), 0.6, np.float32)
    v = np.asarray(mesh.vertices, np.float64)
    v = v - (v.max(0) + v.min(0)) / 2
    v = v / max(np.abs(v).max(), 1e-9) * 0.5 * SCALE
    return VaseMesh(v, np.asarray(mesh.faces, np.int64), colours, len(mesh.faces))


def polygon_factor(n_theta: int) -> float:
    """The fraction of a solid of revolution that an n-segment polygonal mesh of it holds."""
    return n_theta * math.sin(2 * math.pi / n_theta) / (2 * math.pi)


__all__: Sequence[str] = ("ATTRIBUTES", "BANDS", "DATES", "FABRICS", "SHAPES", "TECHNIQUES", "ATTRIBUTIONS",
                          "VaseAttributes", "VaseMesh", "build_mesh", "load_glb", "profile", "profile_volume",
                          "sample_attributes", "polygon_factor")

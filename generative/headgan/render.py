"""HeadsLite: a procedural 360-degree head renderer in JAX (sphere-traced SDF primitives, RGB + mask).

A head is an ellipsoid skull with a hair cap, two ears, a nose, eyes and a mouth on the face side (+z), and a
ponytail on the back whose colour and size are the *back-only identity cue*: from the front it is hidden
behind the skull. Identity parameters live in [0, 1]^NUM_PARAMS (see PARAM_NAMES). Cameras sit on a sphere of
radius `CAMERA_RADIUS` around the origin and look at it; yaw 0 is the frontal view, yaw +-pi the back view,
pitch > 0 looks from above. The same `camera_rays` drives the GAN's volume renderer.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

PARAM_NAMES = ("radius_x", "radius_y", "radius_z", "ear_size", "hairline", "hair_length",
               "skin_r", "skin_g", "skin_b", "hair_r", "hair_g", "hair_b", "cue_r", "cue_g", "cue_b", "cue_size")
NUM_PARAMS = len(PARAM_NAMES)
#: parameters that cannot be seen from the front (the ponytail's colour and size)
BACK_ONLY = (12, 13, 14, 15)
#: parameters visible from every view (skin and hair colour, skull shape): used for cross-view consistency
VIEW_INVARIANT = (0, 1, 2, 6, 7, 8, 9, 10, 11)

CAMERA_RADIUS = 2.7
FOV_DEG = 36.0
BOUND_RADIUS = 1.0  # every head lies inside this sphere; the GAN's rays are bounded by it too
TRACE_STEPS = 48


def camera_frame(yaw: jax.Array, pitch: jax.Array, radius: float = CAMERA_RADIUS):
    """Camera centre (3,) and orthonormal right, up, forward axes of a look-at-origin camera."""
    pos = radius * jnp.stack([jnp.sin(yaw) * jnp.cos(pitch), jnp.sin(pitch), jnp.cos(yaw) * jnp.cos(pitch)])
    forward = -pos / radius
    right = jnp.stack([jnp.cos(yaw), jnp.zeros_like(yaw), -jnp.sin(yaw)])  # = normalize(cross(forward, +y))
    up = jnp.cross(right, forward)
    return pos, right, up, forward


def camera_rays(yaw: jax.Array, pitch: jax.Array, res: int, *, radius: float = CAMERA_RADIUS,
                fov_deg: float = FOV_DEG) -> tuple[jax.Array, jax.Array]:
    """Ray origins and unit directions, each (res, res, 3), through pixel centres; row 0 is the image top."""
    pos, right, up, forward = camera_frame(yaw, pitch, radius)
    half = jnp.tan(jnp.deg2rad(fov_deg) / 2)
    s = (jnp.arange(res) + 0.5) / res * 2 - 1  # pixel centres in (-1, 1)
    px, py = jnp.meshgrid(s, s, indexing="xy")  # px: column (left to right), py: row (top to bottom)
    d = forward + half * (px[..., None] * right - py[..., None] * up)
    d = d / jnp.linalg.norm(d, axis=-1, keepdims=True)
    return jnp.broadcast_to(pos, d.shape), d


def ray_sphere(origins: jax.Array, dirs: jax.Array, radius: float = BOUND_RADIUS):
    """Entry and exit distances of unit rays through the origin-centred sphere, and whether they hit it."""
    b = jnp.sum(origins * dirs, -1)
    c = jnp.sum(origins * origins, -1) - radius**2
    disc = b * b - c
    hit = disc > 0
    root = jnp.where(hit, jnp.sqrt(jnp.where(hit, disc, 1.0)), 0.0)  # no NaN gradient where a ray misses
    return jnp.maximum(-b - root, 0.0), jnp.maximum(-b + root, 0.0), hit


def _geometry(p: jax.Array) -> dict:
    """Physical sizes from identity parameters p in [0, 1]^NUM_PARAMS."""
    rx, ry, rz = 0.5 + 0.14 * p[0], 0.62 + 0.14 * p[1], 0.55 + 0.14 * p[2]
    return {"radii": jnp.stack([rx, ry, rz]), "ear": 0.08 + 0.1 * p[3],
            "hairline": 0.05 + 0.45 * p[4], "hair_length": -0.55 + 0.5 * p[5],
            "skin": 0.3 + 0.65 * p[6:9], "hair": 0.05 + 0.6 * p[9:12], "cue": p[12:15], "cue_size": 0.14 + 0.08 * p[15]}


def _ellipsoid_sdf(q, radii):
    k0 = jnp.linalg.norm(q / radii, axis=-1)
    k1 = jnp.linalg.norm(q / (radii * radii), axis=-1)
    return k0 * (k0 - 1.0) / jnp.maximum(k1, 1e-6)


def _sphere_sdf(q, centre, r):
    return jnp.linalg.norm(q - centre, axis=-1) - r


def primitive_sdfs(q: jax.Array, g: dict) -> jax.Array:
    """Signed distances (..., 4) to skull, ears, nose and ponytail."""
    rx, ry, rz = g["radii"]
    skull = _ellipsoid_sdf(q, g["radii"])
    ear_centre = jnp.stack([rx, -0.05 * ry, jnp.zeros(())])
    mirrored = jnp.concatenate([jnp.abs(q[..., :1]), q[..., 1:]], -1)  # both ears from one sphere
    ears = _sphere_sdf(mirrored, ear_centre, g["ear"])
    nose = _sphere_sdf(q, jnp.stack([jnp.zeros(()), -0.12 * ry, rz]), 0.09 * jnp.ones(()))
    tail = _sphere_sdf(q, jnp.stack([jnp.zeros(()), 0.05 * ry, -(rz + 0.6 * g["cue_size"])]), g["cue_size"])
    return jnp.stack([skull, ears, nose, tail], -1)


def _albedo(q: jax.Array, which: jax.Array, g: dict) -> jax.Array:
    """Surface colour (..., 3) at points q on primitive `which` (0 skull, 1 ears, 2 nose, 3 ponytail)."""
    n = q / (g["radii"] * jnp.linalg.norm(q / g["radii"], axis=-1, keepdims=True))  # direction on the skull
    hair = (n[..., 1] > g["hairline"]) | ((n[..., 2] < -0.15) & (n[..., 1] > g["hair_length"]))
    eye_dirs = jnp.array([[0.36, 0.12, 0.92], [-0.36, 0.12, 0.92]])
    eye_dirs = eye_dirs / jnp.linalg.norm(eye_dirs, axis=-1, keepdims=True)
    u = n / jnp.linalg.norm(n, axis=-1, keepdims=True)
    eyes = jnp.max(u @ eye_dirs.T, -1) > 0.985
    mouth = (jnp.abs(u[..., 0]) < 0.22) & (jnp.abs(u[..., 1] + 0.45) < 0.05) & (u[..., 2] > 0.5)
    skin = jnp.broadcast_to(g["skin"], q.shape)
    face = jnp.where(eyes[..., None], jnp.array([0.05, 0.05, 0.1]),
                     jnp.where(mouth[..., None], jnp.array([0.7, 0.15, 0.15]), skin))
    skull = jnp.where(hair[..., None], g["hair"], face)
    return jnp.select([which[..., None] == 0, which[..., None] == 3], [skull, jnp.broadcast_to(g["cue"], q.shape)],
                      skin)


def render_head(params: jax.Array, yaw: jax.Array, pitch: jax.Array, res: int = 32, supersample: int = 2
                ) -> tuple[jax.Array, jax.Array]:
    """RGB (res, res, 3) in [0, 1] on a black background and coverage mask (res, res) of one head.

    Sphere tracing (TRACE_STEPS steps) of the union of the primitives inside the bounding sphere, headlight
    Lambertian shading, `supersample`^2 rays per pixel averaged for anti-aliased edges.
    """
    if params.shape[-1] != NUM_PARAMS:
        raise ValueError(f"params of shape {params.shape}: expected (..., {NUM_PARAMS})")
    g = _geometry(params)
    hi = res * supersample
    origins, dirs = camera_rays(yaw, pitch, hi)
    near, far, inside = ray_sphere(origins, dirs, BOUND_RADIUS + 0.05)

    def sdf(q):
        return jnp.min(primitive_sdfs(q, g), -1)

    def march(t, _):
        d = sdf(origins + t[..., None] * dirs)
        return jnp.minimum(t + d, far + 1.0), None

    t, _ = jax.lax.scan(march, near, None, length=TRACE_STEPS)
    q = origins + t[..., None] * dirs
    hit = inside & (t < far) & (jnp.abs(sdf(q)) < 2e-3)
    eps = 1e-3
    offsets = jnp.eye(3) * eps
    grad = jnp.stack([sdf(q + o) - sdf(q - o) for o in offsets], -1)
    normal = grad / jnp.maximum(jnp.linalg.norm(grad, axis=-1, keepdims=True), 1e-8)
    which = jnp.argmin(primitive_sdfs(q, g), -1)
    shade = 0.35 + 0.65 * jnp.clip(jnp.sum(-dirs * normal, -1), 0.0, 1.0)
    rgb = jnp.where(hit[..., None], _albedo(q, which, g) * shade[..., None], 0.0)
    mask = hit.astype(jnp.float32)
    rgb = rgb.reshape(res, supersample, res, supersample, 3).mean((1, 3))
    mask = mask.reshape(res, supersample, res, supersample).mean((1, 3))
    return jnp.clip(rgb, 0.0, 1.0), mask


def chunked(fn, chunk: int):
    """Apply a jitted batch function to arrays of any length in fixed-size chunks (one compile per chunk
    size): the last chunk is padded with copies of row 0 and cut off; outputs are concatenated on axis 0 and come
    back as NumPy arrays. Inputs are cut and outputs joined on the host: on the device each slice, pad and join
    of a new length or offset would compile an eager program of its own (dozens per evaluation)."""

    def apply(*arrays):
        arrays = [np.asarray(a) for a in arrays]
        n = arrays[0].shape[0]
        outs = []
        for s in range(0, n, chunk):
            part = [a[s:s + chunk] for a in arrays]
            m = part[0].shape[0]
            if m < chunk:
                part = [np.concatenate([p, np.repeat(p[:1], chunk - m, 0)]) for p in part]
            outs.append((m, fn(*part)))
        outs = [jax.tree.map(lambda x, m=m: x[:m], o) for m, o in jax.device_get(outs)]
        return jax.tree.map(lambda *xs: np.concatenate(xs), *outs)

    return apply


@functools.partial(jax.jit, static_argnames=("res", "supersample"))
def _render_chunk(params, yaw, pitch, res, supersample):
    return jax.vmap(lambda p, y, pi: render_head(p, y, pi, res, supersample))(params, yaw, pitch)


def render_batch(params: jax.Array, yaw: jax.Array, pitch: jax.Array, res: int = 32, supersample: int = 2,
                 chunk: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """`render_head` over a batch (N, NUM_PARAMS), (N,), (N,): ((N, res, res, 3), (N, res, res)) NumPy arrays,
    jitted in fixed-size chunks so any N reuses one compiled program."""
    params, yaw, pitch = jnp.asarray(params), jnp.asarray(yaw, jnp.float32), jnp.asarray(pitch, jnp.float32)
    return chunked(lambda p, y, pi: _render_chunk(p, y, pi, res, supersample), chunk)(params, yaw, pitch)



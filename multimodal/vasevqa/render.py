"""A jitted JAX software rasteriser for the six released views (front, back, left, right, top, bottom).

Orthographic cameras around the vase's centre; each camera is (forward, up, right = forward x up), looking
along `forward`. Every pixel centre is tested against every triangle with edge functions (double-sided, so
the inside of the wall shows through the mouth), the nearest hit along `forward` wins (a z-buffer as a min
over faces), and its face colour is shaded by a headlight, 0.45 + 0.55 |n . forward|. The background is a
light studio grey. Shapes are static (a padded face count), so one compile serves every vase.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError

VIEWS = ("front", "back", "left", "right", "top", "bottom")
# (forward, up) per view: the camera looks along forward
CAMERAS = {
    "front": ((0.0, 1.0, 0.0), (0.0, 0.0, 1.0)),
    "back": ((0.0, -1.0, 0.0), (0.0, 0.0, 1.0)),
    "left": ((1.0, 0.0, 0.0), (0.0, 0.0, 1.0)),
    "right": ((-1.0, 0.0, 0.0), (0.0, 0.0, 1.0)),
    "top": ((0.0, 0.0, -1.0), (0.0, 1.0, 0.0)),
    "bottom": ((0.0, 0.0, 1.0), (0.0, -1.0, 0.0)),
}
BACKGROUND = 0.92
EXTENT = 0.56  # half-width of the orthographic window in world units


def camera_basis(view: str) -> np.ndarray:
    """(3, 3) rows right, up, forward of a view (orthonormal, right-handed: right = forward x up)."""
    if view not in CAMERAS:
        raise BadInputError(f"view {view!r}: expected one of {VIEWS}")
    forward, up = (np.asarray(v, np.float32) for v in CAMERAS[view])
    return np.stack([np.cross(forward, up), up, forward])


def all_bases() -> np.ndarray:
    return np.stack([camera_basis(v) for v in VIEWS])


def project(points: np.ndarray, view: str, size: int, extent: float = EXTENT) -> np.ndarray:
    """World points (..., 3) -> (row, col, depth) in pixel units of a size x size view (pixel centres at .5)."""
    basis = camera_basis(view)
    cam = np.asarray(points) @ basis.T
    col = (cam[..., 0] + extent) / (2 * extent) * size
    row = (extent - cam[..., 1]) / (2 * extent) * size
    return np.stack([row, col, cam[..., 2]], -1)


def _render_view(triangles: jax.Array, colours: jax.Array, valid: jax.Array, basis: jax.Array, size: int,
                 extent: float) -> jax.Array:
    cam = jnp.einsum("fvk,jk->fvj", triangles, basis)  # (F, 3 vertices, [x, y, depth])
    xs = (jnp.arange(size) + 0.5) / size * 2 * extent - extent
    px, py = jnp.meshgrid(xs, -xs)  # row i has y = extent - (i + .5) * pixel
    p = jnp.stack([px.ravel(), py.ravel()], -1)  # (P, 2)
    a, b, c = cam[:, 0, :2], cam[:, 1, :2], cam[:, 2, :2]

    def edge(u, v, q):  # (F, 2), (F, 2), (P, 2) -> (P, F)
        return (v[None, :, 0] - u[None, :, 0]) * (q[:, None, 1] - u[None, :, 1]) \
            - (v[None, :, 1] - u[None, :, 1]) * (q[:, None, 0] - u[None, :, 0])

    area = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    ok = valid & (jnp.abs(area) > 1e-10)
    safe = jnp.where(ok, area, 1.0)
    w0 = edge(b, c, p) / safe[None]
    w1 = edge(c, a, p) / safe[None]
    w2 = 1.0 - w0 - w1
    inside = (w0 >= 0) & (w1 >= 0) & (w2 >= 0) & ok[None]
    depth = w0 * cam[None, :, 0, 2] + w1 * cam[None, :, 1, 2] + w2 * cam[None, :, 2, 2]
    depth = jnp.where(inside, depth, jnp.inf)
    nearest = jnp.argmin(depth, axis=1)
    hit = jnp.isfinite(jnp.min(depth, axis=1))
    e1 = triangles[:, 1] - triangles[:, 0]
    e2 = triangles[:, 2] - triangles[:, 0]
    normal = jnp.cross(e1, e2)
    normal = normal / (jnp.linalg.norm(normal, axis=-1, keepdims=True) + 1e-12)
    shade = 0.45 + 0.55 * jnp.abs(normal @ basis[2])
    rgb = colours[nearest] * shade[nearest, None]
    rgb = jnp.where(hit[:, None], rgb, BACKGROUND)
    return rgb.reshape(size, size, 3)


@functools.partial(jax.jit, static_argnames=("size", "extent"))
def render_views(triangles: jax.Array, colours: jax.Array, valid: jax.Array, *, size: int = 32,
                 extent: float = EXTENT) -> jax.Array:
    """Triangles (F, 3, 3), face colours (F, 3), valid (F,) -> the six views (6, size, size, 3) in [0, 1],
    in `VIEWS` order (one view at a time, so memory is one (pixels x faces) buffer)."""
    bases = jnp.asarray(all_bases())
    return jax.lax.map(lambda basis: _render_view(triangles, colours, valid, basis, size, extent), bases)


def render_mesh(mesh, size: int = 32) -> np.ndarray:
    """A `vases.VaseMesh` -> uint8 views (6, size, size, 3)."""
    tri, col, valid = mesh.triangles()
    views = render_views(jnp.asarray(tri), jnp.asarray(col), jnp.asarray(valid), size=size)
    return np.asarray(np.round(np.clip(views, 0, 1) * 255), np.uint8)


def stack_views(views: np.ndarray) -> np.ndarray:
    """(..., 6, H, W, 3) uint8 -> (..., H, W, 18) float in [0, 1]: the six views as channels, the VLM's input."""
    views = np.asarray(views)
    if views.shape[-4:-3] != (6,) or views.shape[-1] != 3:
        raise BadInputError(f"views {views.shape}: expected (..., 6, H, W, 3)")
    moved = np.moveaxis(views, -4, -2)  # (..., H, W, 6, 3)
    return (moved.reshape(*moved.shape[:-2], 18).astype(np.float32) / 255.0)


def contact_sheet(views: np.ndarray) -> np.ndarray:
    """(6, H, W, 3) -> one (H, 6 W, 3) strip in VIEWS order."""
    return np.concatenate(list(views), axis=1)

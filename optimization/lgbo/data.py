"""Benchmark problems (all maximised): Hartmann-6, Branin and Ackley in closed form, and the Olympus
crossed_barrel, HPLC and LNP3 datasets as discrete candidate pools (shipped in `datasets/olympus/`, MIT).

A `Problem` carries what the simulated preference oracles need: the optimum's location and a poor region.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import pathlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError
from optimization.lgbo.space import Continuous, Space, sobol

OLYMPUS_DIR = pathlib.Path(__file__).parent / "datasets" / "olympus"
OLYMPUS = {"crossed_barrel": "toughness", "hplc": "peak_area", "lnp3": "drug_loading"}


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """A maximisation problem. Closed form: `f` maps encoded x (..., D) -> (...). Pool: `pool_*` rows."""

    name: str
    space: Space
    optimum: float  # the maximum value (closed form: known; pool: the best row)
    floor: float  # reference low value: progress = (best - floor) / (optimum - floor)
    optimum_u: np.ndarray  # (P,) unit coordinates of the maximiser
    poor_u: np.ndarray  # (P,) unit coordinates of the centre of a poor region (misaligned oracle)
    f: Callable[[jax.Array], jax.Array] | None = None
    pool_x: np.ndarray | None = None  # (N, D) encoded
    pool_u: np.ndarray | None = None  # (N, P)
    pool_y: np.ndarray | None = None  # (N,)

    @property
    def is_pool(self) -> bool:
        return self.pool_x is not None


# closed-form functions (on the unit cube; maximised) --------------------------------------------------------
_H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                 [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]], np.float64)
_H_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]], np.float64)
HARTMANN6_MAX = 3.32237
HARTMANN6_ARGMAX = np.array([0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573])


def hartmann6(x: jax.Array) -> jax.Array:
    """Hartmann-6 (positive form, maximum 3.32237) on [0, 1]^6: x (..., 6) -> (...)."""
    inner = jnp.sum(jnp.asarray(_H_A, x.dtype) * (x[..., None, :] - jnp.asarray(_H_P, x.dtype)) ** 2, axis=-1)
    return jnp.sum(jnp.asarray(_H_ALPHA, x.dtype) * jnp.exp(-inner), axis=-1)


def branin(x: jax.Array) -> jax.Array:
    """Negated Branin on [0, 1]^2 mapped to [-5, 10] x [0, 15]; maximum -0.397887."""
    x1, x2 = 15.0 * x[..., 0] - 5.0, 15.0 * x[..., 1]
    b, c, t = 5.1 / (4 * math.pi ** 2), 5.0 / math.pi, 1.0 / (8 * math.pi)
    return -((x2 - b * x1 ** 2 + c * x1 - 6.0) ** 2 + 10.0 * (1 - t) * jnp.cos(x1) + 10.0)


def ackley(x: jax.Array) -> jax.Array:
    """Negated Ackley on [0, 1]^d mapped to [-32.768, 32.768]^d; maximum 0 at the centre."""
    z = 65.536 * x - 32.768
    d = x.shape[-1]
    return -(-20.0 * jnp.exp(-0.2 * jnp.sqrt(jnp.sum(z * z, -1) / d))
             - jnp.exp(jnp.sum(jnp.cos(2 * math.pi * z), -1) / d)
             + 20.0 + math.e)


def _poor_centre(u_ref: np.ndarray, y_ref: np.ndarray, opt_u: np.ndarray) -> np.ndarray:
    """Among the worst decile of a reference set, the point farthest from the optimum."""
    worst = y_ref <= np.quantile(y_ref, 0.1)
    dist = np.linalg.norm(u_ref - opt_u, axis=-1)
    return u_ref[np.argmax(np.where(worst, dist, -1.0))]


def _closed_form(name, f, d, optimum, opt_u) -> Problem:
    space = Space(tuple(Continuous(name=f"x{j}", low=0.0, high=1.0) for j in range(d)))
    u_ref = sobol(4096, d, seed=1)
    with jax.enable_x64(True):
        y_ref = np.asarray(f(jnp.asarray(u_ref)))
    floor = 0.0 if name == "hartmann6" else float(y_ref.min())
    return Problem(name=name, space=space, optimum=optimum, floor=floor, optimum_u=np.asarray(opt_u, np.float64),
                   poor_u=_poor_centre(u_ref, y_ref, np.asarray(opt_u)), f=f)


def olympus_pool(name: str, *, ordinal: bool = True) -> Problem:
    """An Olympus dataset as a candidate pool; objective: the first measurement (maximised).

    ordinal: categorical parameters whose options are numeric levels (LNP3's inputs) are ordinal features (one
    scaled feature each); true categoricals (LNP3's solid lipid) stay one-hot. ordinal=False one-hot encodes
    every categorical (the encoding before issue 42)."""
    if name not in OLYMPUS:
        raise BadInputError(f"Olympus dataset {name!r} unknown, expected one of {sorted(OLYMPUS)}")
    config = json.loads((OLYMPUS_DIR / name / "config.json").read_text())
    space = Space.from_json(config["parameters"], numeric_as_ordinal=ordinal)
    measurements = [m["name"] for m in config["measurements"]]
    col = space.n_params + measurements.index(OLYMPUS[name])
    with open(OLYMPUS_DIR / name / "data.csv", newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    u = np.stack([space.to_unit(r[:space.n_params]) for r in rows])
    y = np.asarray([float(r[col]) for r in rows], np.float64)
    x = np.asarray(space.encode_unit(jnp.asarray(u)), np.float64)
    best = int(np.argmax(y))
    return Problem(name=name, space=space, optimum=float(y[best]), floor=0.0, optimum_u=u[best],
                   poor_u=_poor_centre(u, y, u[best]), pool_x=x, pool_u=u, pool_y=y)


def get_problem(name: str, *, ordinal: bool = True) -> Problem:
    """hartmann6, branin, ackley (d = 6), or an Olympus pool (crossed_barrel, hplc, lnp3; `ordinal` as in
    olympus_pool)."""
    if name == "hartmann6":
        return _closed_form(name, hartmann6, 6, HARTMANN6_MAX, HARTMANN6_ARGMAX)
    if name == "branin":
        return _closed_form(name, branin, 2, -0.397887, [(math.pi + 5.0) / 15.0, 2.275 / 15.0])
    if name == "ackley":
        return _closed_form(name, ackley, 6, 0.0, np.full(6, 0.5))
    if name in OLYMPUS:
        return olympus_pool(name, ordinal=ordinal)
    raise BadInputError(f"problem {name!r} unknown, expected hartmann6, branin, ackley or one of {sorted(OLYMPUS)}")


PROBLEMS = ("hartmann6", "branin", "ackley", *OLYMPUS)

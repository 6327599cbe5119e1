"""Search spaces: continuous box parameters and categorical parameters, and their three coordinate systems.

- values: what a user or an LLM sees (floats in natural units; option strings for categoricals);
- unit coordinates `u` in [0, 1]^P, one per parameter (categorical option i of k sits at (i + 0.5) / k);
  LLM regions (boxes) live here;
- encoded features `x` in [0, 1]^D that the GP sees (continuous: u; categorical: one-hot; ordinal, a categorical
  whose options are numeric levels: one feature, the level's value min-max scaled into [0, 1]).
Every suggestion is decoded from a feasible encoding, so it never leaves the box or names a missing option.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Continuous:
    name: str
    low: float
    high: float

    def __post_init__(self):
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise BadInputError(f"parameter {self.name!r}: bounds ({self.low}, {self.high}) must be finite with "
                                "low < high")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Categorical:
    name: str
    options: tuple[str, ...]

    def __post_init__(self):
        if len(self.options) < 2 or len(set(self.options)) != len(self.options):
            raise BadInputError(f"parameter {self.name!r}: options {self.options} must be >= 2 distinct strings")

    def index(self, value: Any) -> int:
        """Option index of a value: the option string, or a number equal to a numeric option."""
        s = str(value).strip()
        if s in self.options:
            return self.options.index(s)
        try:
            v = float(s)
            for i, o in enumerate(self.options):
                try:
                    if float(o) == v:
                        return i
                except ValueError:
                    pass
        except ValueError:
            pass
        raise BadInputError(f"parameter {self.name!r}: value {value!r} is not one of the options {self.options}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ordinal(Categorical):
    """A categorical parameter whose options are numeric levels (e.g. concentrations 0, 12, 24, 48): shown to a
    user or an LLM as its options, encoded for the GP as ONE feature, the level min-max scaled into [0, 1], so
    the kernel sees that 24 lies between 12 and 48 (one-hot would make every pair of levels equally far)."""

    def __post_init__(self):
        super().__post_init__()
        try:
            lv = [float(o) for o in self.options]
        except ValueError:
            raise BadInputError(
                f"ordinal parameter {self.name!r}: options {self.options} must all be numbers") from None
        if len(set(lv)) != len(lv):
            raise BadInputError(f"ordinal parameter {self.name!r}: levels {lv} must be distinct numbers")

    @property
    def features(self) -> np.ndarray:
        """(k,) encoded value of each option: (level - min) / (max - min)."""
        lv = np.asarray([float(o) for o in self.options], np.float64)
        return (lv - lv.min()) / (lv.max() - lv.min())


Parameter = Continuous | Categorical | Ordinal


def _width(p) -> int:
    """Encoded features of one parameter."""
    if isinstance(p, Continuous) or isinstance(p, Ordinal):
        return 1
    return len(p.options)


@dataclasses.dataclass(frozen=True)
class Space:
    params: tuple[Parameter, ...]

    def __post_init__(self):
        if not self.params:
            raise BadInputError("a Space needs at least one parameter, got none")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise BadInputError(f"parameter names {names} must be unique")

    # sizes -----------------------------------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        return len(self.params)

    @property
    def dim(self) -> int:
        return sum(_width(p) for p in self.params)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def continuous_mask(self) -> np.ndarray:
        """(D,) 1.0 on encoded features that gradient ascent may move (continuous), 0.0 on one-hot ones."""
        out = []
        for p in self.params:
            out += [1.0] if isinstance(p, Continuous) else [0.0] * _width(p)
        return np.asarray(out)

    # values <-> unit ---------------------------------------------------------------------------------------
    def check_values(self, values: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        """Validate a point given as a list (parameter order) or a {name: value} dict; return the list."""
        if isinstance(values, Mapping):
            missing = [n for n in self.names if n not in values]
            extra = [k for k in values if k not in self.names]
            if missing or extra:
                raise BadInputError(f"point {dict(values)} must name exactly the parameters {self.names} "
                                    f"(missing {missing}, unknown {extra})")
            values = [values[n] for n in self.names]
        values = list(values)
        if len(values) != self.n_params:
            raise BadInputError(f"point {values} has {len(values)} entries, expected {self.n_params} "
                                f"({self.names})")
        out = []
        for p, v in zip(self.params, values):
            if isinstance(p, Continuous):
                try:
                    f = float(v)
                except (TypeError, ValueError):
                    raise BadInputError(f"parameter {p.name!r}: value {v!r} is not a number") from None
                if not math.isfinite(f) or not (p.low <= f <= p.high):
                    raise BadInputError(f"parameter {p.name!r}: value {f} is outside the bounds [{p.low}, {p.high}]")
                out.append(f)
            else:
                out.append(p.options[p.index(v)])
        return out

    def to_unit(self, values) -> np.ndarray:
        """Values (validated) -> u: (P,)."""
        values = self.check_values(values)
        u = []
        for p, v in zip(self.params, values):
            if isinstance(p, Continuous):
                u.append((v - p.low) / (p.high - p.low))
            else:
                u.append((p.index(v) + 0.5) / len(p.options))
        return np.asarray(u, np.float64)

    def from_unit(self, u) -> list[Any]:
        """u: (P,) -> values (continuous clipped into the bounds; categorical by the option interval)."""
        u = np.asarray(u, np.float64)
        out = []
        for p, ui in zip(self.params, u):
            ui = float(np.clip(ui, 0.0, 1.0))
            if isinstance(p, Continuous):
                out.append(p.low + ui * (p.high - p.low))
            else:
                out.append(p.options[min(int(ui * len(p.options)), len(p.options) - 1)])
        return out

    def to_dict_point(self, values) -> dict[str, Any]:
        return dict(zip(self.names, values))

    # unit <-> encoded (jnp, jittable) ---------------------------------------------------------------------
    def snap_unit(self, u):
        """Move categorical coordinates of u: (..., P) to their option centres."""
        cols = []
        for j, p in enumerate(self.params):
            c = u[..., j]
            if isinstance(p, Categorical):
                k = len(p.options)
                c = (jnp.clip(jnp.floor(c * k), 0, k - 1) + 0.5) / k
            cols.append(c)
        return jnp.stack(cols, axis=-1)

    def encode_unit(self, u):
        """u: (..., P) -> x: (..., D)."""
        cols = []
        for j, p in enumerate(self.params):
            c = jnp.clip(u[..., j], 0.0, 1.0)
            if isinstance(p, Continuous):
                cols.append(c[..., None])
            else:
                k = len(p.options)
                idx = jnp.clip(jnp.floor(c * k), 0, k - 1).astype(jnp.int32)
                if isinstance(p, Ordinal):
                    cols.append(jnp.asarray(p.features, u.dtype)[idx][..., None])
                else:
                    cols.append((idx[..., None] == jnp.arange(k)).astype(u.dtype))
        return jnp.concatenate(cols, axis=-1)

    def unit_of_encoded(self, x):
        """x: (..., D) -> u: (..., P) (categorical: the argmax option's centre)."""
        cols, o = [], 0
        for p in self.params:
            if isinstance(p, Continuous):
                cols.append(jnp.clip(x[..., o], 0.0, 1.0))
                o += 1
            elif isinstance(p, Ordinal):   # the nearest level
                k = len(p.options)
                near = jnp.argmin(jnp.abs(x[..., o, None] - jnp.asarray(p.features, x.dtype)), axis=-1)
                cols.append((near + 0.5) / k)
                o += 1
            else:
                k = len(p.options)
                cols.append((jnp.argmax(x[..., o:o + k], axis=-1) + 0.5) / k)
                o += k
        return jnp.stack(cols, axis=-1)

    def encode(self, values) -> np.ndarray:
        with jax.enable_x64(True):
            return np.asarray(self.encode_unit(jnp.asarray(self.to_unit(values), jnp.float64)))

    def decode(self, x) -> list[Any]:
        with jax.enable_x64(True):
            return self.from_unit(np.asarray(self.unit_of_encoded(jnp.asarray(x, jnp.float64))))

    # serialisation ------------------------------------------------------------------------------------------
    def to_json(self) -> list[dict]:
        out = []
        for p in self.params:
            if isinstance(p, Continuous):
                out.append({"name": p.name, "type": "continuous", "low": p.low, "high": p.high})
            elif isinstance(p, Ordinal):
                out.append({"name": p.name, "type": "ordinal", "options": list(p.options)})
            else:
                out.append({"name": p.name, "type": "categorical", "options": list(p.options)})
        return out

    @classmethod
    def from_json(cls, spec: Sequence[Mapping[str, Any]], *, numeric_as_ordinal: bool = False) -> Space:
        """From a list of {"name", "type": "continuous", "low", "high"} / {"name", "type": "categorical" or
        "ordinal", "options"} (the Olympus config.json `parameters` list is accepted as is). With
        numeric_as_ordinal, a categorical whose options all parse as numbers becomes an Ordinal."""
        if isinstance(spec, Mapping) and "parameters" in spec:
            spec = spec["parameters"]
        if not isinstance(spec, Sequence) or isinstance(spec, str):
            raise BadInputError(f"space spec must be a list of parameter dicts, got {type(spec).__name__}")
        params = []
        for s in spec:
            if not isinstance(s, Mapping) or "name" not in s or "type" not in s:
                raise BadInputError(f"parameter spec {s!r} needs 'name' and 'type'")
            if s["type"] == "continuous":
                params.append(Continuous(name=str(s["name"]), low=float(s["low"]), high=float(s["high"])))
            elif s["type"] in ("categorical", "ordinal"):
                opts = tuple(str(o) for o in s["options"])
                ordinal = s["type"] == "ordinal" or (numeric_as_ordinal and _all_numeric(opts))
                params.append((Ordinal if ordinal else Categorical)(name=str(s["name"]), options=opts))
            else:
                raise BadInputError(f"parameter {s['name']!r}: type {s['type']!r}, expected 'continuous', "
                                    "'categorical' or 'ordinal'")
        return cls(tuple(params))


def _all_numeric(options) -> bool:
    try:
        [float(o) for o in options]
    except ValueError:
        return False
    return True


def sobol(n: int, d: int, seed: int) -> np.ndarray:
    """n scrambled Sobol points in [0, 1]^d (float64, deterministic in seed)."""
    from scipy.stats import qmc

    return qmc.Sobol(d, scramble=True, seed=seed).random(n)

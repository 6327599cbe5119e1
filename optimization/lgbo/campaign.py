"""Ask/tell campaigns for lab use: suggestions survive lab round-trips through a JSON file.

    c = Campaign.create("run.json", space, n_init=4, oracle={"kind": "openai", "base_url": ..., "model": ...})
    xs = c.ask(3)            # list of {name: value}; saved as pending in run.json
    c.tell(xs, [1.2, 0.7, 3.1])
    c = Campaign.load("run.json")   # next day, another process: the same state, the same pending suggestions

`ask` is deterministic in the file's state (seed, observations, round): the initial design is a scrambled
Sobol sequence, the MAP fit starts from fixed values, and an LLM answer is stored with the pending
suggestions, so a resumed `ask` returns exactly what the killed process had suggested.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError
from optimization import gp
from optimization.lgbo import acquisition, model, oracles, prompts
from optimization.lgbo.space import Space, sobol

VERSION = 1


class CampaignFileError(BadInputError):
    """A campaign file that cannot be read back (corrupt JSON or a wrong schema)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    n_init: int = 4  # Sobol initial design before the GP takes over
    seed: int = 0
    n_grid: int = 512
    n_candidates: int = 8192
    refine_starts: int = 8  # multi-start gradient ascent (continuous spaces; 0 = off)
    gp: str = "map"  # "map" or "nuts" (fully Bayesian hyperparameters, averaged acquisition)
    nuts_samples: int = 32
    fit_steps: int = 40
    goal: str = "maximize"

    def __post_init__(self):
        if self.n_init < 1:
            raise BadInputError(f"n_init={self.n_init}: expected >= 1")
        if self.gp not in ("map", "nuts"):
            raise BadInputError(f"gp={self.gp!r}: expected 'map' or 'nuts'")
        if self.goal not in ("maximize", "minimize"):
            raise BadInputError(f"goal={self.goal!r}: expected 'maximize' or 'minimize'")
        if self.n_grid < 8 or self.n_candidates < 1 or self.fit_steps < 1 or self.refine_starts < 0:
            raise BadInputError(f"settings {self}: expected n_grid >= 8, n_candidates >= 1, fit_steps >= 1, "
                                "refine_starts >= 0")


class Campaign:
    def __init__(self, path: str | os.PathLike, space: Space, settings: Settings, *,
                 oracle: Mapping[str, Any] | None = None, pool: Sequence[Sequence[Any]] | None = None,
                 observations: list[dict] | None = None, pending: dict | None = None,
                 rounds: list[dict] | None = None):
        self.path = pathlib.Path(path)
        self.space, self.settings = space, settings
        self.oracle_spec = dict(oracle or {"kind": "none"})
        self.oracle = oracles.make_oracle(self.oracle_spec)
        self.pool = None if pool is None else [space.check_values(r) for r in pool]
        self.observations = observations or []  # [{"x": [values], "y": float}]
        self.pending = pending  # {"round", "n", "suggestions", "preference", "llm"} or None
        self.rounds = rounds or []

    # files ---------------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, path, space: Space, *, oracle=None, pool=None, overwrite: bool = False, **settings) -> Campaign:
        path = pathlib.Path(path)
        if path.exists() and not overwrite:
            raise BadInputError(f"campaign file {path} exists; load it with Campaign.load or pass overwrite=True")
        c = cls(path, space, Settings(**settings), oracle=oracle, pool=pool)
        c.save()
        return c

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "space": self.space.to_json(), "settings": dataclasses.asdict(self.settings),
                "oracle": self.oracle_spec, "pool": self.pool, "observations": self.observations,
                "pending": self.pending, "rounds": self.rounds}

    def save(self) -> pathlib.Path:
        """Atomic write (temp file + rename), so a killed process never leaves half a file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        os.replace(tmp, self.path)
        return self.path

    @classmethod
    def load(cls, path) -> Campaign:
        path = pathlib.Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise CampaignFileError(f"campaign file {path} does not exist") from None
        except IsADirectoryError:
            raise CampaignFileError(f"campaign file {path} is a folder; expected the campaign's JSON file") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CampaignFileError(f"campaign file {path} is corrupt (not JSON: {e})") from None
        try:
            if not isinstance(d, dict) or d.get("version") != VERSION:
                raise BadInputError(f"expected a JSON object with version {VERSION}")
            space = Space.from_json(d["space"])
            c = cls(path, space, Settings(**d["settings"]), oracle=d["oracle"], pool=d["pool"],
                    pending=d["pending"], rounds=list(d["rounds"]))
            for o in d["observations"]:
                c._add(o["x"], o["y"])
        except (KeyError, TypeError, ValueError) as e:
            raise CampaignFileError(f"campaign file {path} is corrupt ({type(e).__name__}: {e})") from None
        return c

    # ask / tell ----------------------------------------------------------------------------------------------
    def _add(self, x, y) -> None:
        vals = self.space.check_values(x)
        try:
            y = float(y)
        except (TypeError, ValueError):
            raise BadInputError(f"observation y={y!r} for x={vals} is not a number") from None
        if not math.isfinite(y):
            raise BadInputError(f"observation y={y} for x={vals} is not finite; drop the point or tell a measured "
                                "value")
        self.observations.append({"x": vals, "y": y})

    def tell(self, xs: Sequence[Any] | Mapping[str, Any], ys: Sequence[float] | float) -> None:
        """Record measured points (dicts or lists in parameter order) and values; validates all before adding."""
        if isinstance(xs, Mapping) or (xs and not isinstance(xs[0], (Mapping, list, tuple))):
            xs, ys = [xs], [ys] if np.ndim(ys) == 0 else ys
        ys = list(np.atleast_1d(np.asarray(ys, dtype=object)))
        if len(xs) != len(ys):
            raise BadInputError(f"tell got {len(xs)} points and {len(ys)} values; expected as many of each")
        before = list(self.observations)
        try:
            for x, y in zip(xs, ys):
                self._add(x, y)
        except ValueError:
            self.observations = before
            raise
        self.pending = None
        self.save()

    def ask(self, n: int = 1, *, preference: str | None = None, reuse_pending: bool = True) -> list[dict[str, Any]]:
        """n suggestions as {name: value} dicts. A pending ask of the same size is returned unchanged.

        preference: an answer in the LLM format (`[region, [[lb], [ub]], c]`) supplied by hand; it replaces
        the oracle for this round."""
        if n < 1:
            raise BadInputError(f"ask(n={n}): expected n >= 1")
        if reuse_pending and self.pending is not None and self.pending["n"] == n and preference is None:
            return [self.space.to_dict_point(s) for s in self.pending["suggestions"]]
        if self.pending is not None:  # an unanswered ask is replaced: same round index, same randomness
            round_ = self.pending["round"]
            self.rounds = [r for r in self.rounds if r["round"] != round_]
        else:
            round_ = len(self.rounds)
        info: dict[str, Any] = {"round": round_, "n": n, "n_obs": len(self.observations)}
        if len(self.observations) < self.settings.n_init:
            sugg = self._initial(n)
            info.update(kind="initial", preference=None, llm=None)
        else:
            if preference is not None:
                region, llm = prompts.parse_answer(preference, self.space), {"source": "user", "texts": [preference]}
            else:
                history = [(o["x"], o["y"]) for o in self.observations]
                if hasattr(self.oracle, "last_reasoning"):   # the last LLM answer of the saved rounds
                    texts = [t for r in self.rounds if (r.get("llm") or {}).get("source") == "openai"
                             for t in (r["llm"].get("texts") or [])[:1]]
                    self.oracle.last_reasoning = prompts.reasoning_of(texts[-1]) if texts else ""
                ans = self.oracle.propose(self.space, history, round_)
                region, llm = ans.region, {"source": self.oracle_spec.get("kind"), "texts": ans.texts,
                                           "error": ans.error}
            sugg, acq = self._bo(n, region, round_)
            info.update(kind="bo", preference=prompts.region_to_json(region), llm=llm, acq=acq)
        info["suggestions"] = sugg
        self.pending = info
        self.rounds.append(info)
        self.save()
        return [self.space.to_dict_point(s) for s in sugg]

    def _pool_u(self) -> np.ndarray:
        return np.stack([self.space.to_unit(r) for r in self.pool])

    def _observed_mask(self, pool_u: np.ndarray) -> np.ndarray:
        seen = {tuple(np.round(self.space.to_unit(o["x"]), 12)) for o in self.observations}
        return np.asarray([tuple(np.round(u, 12)) in seen for u in pool_u])

    def _initial(self, n: int) -> list[list[Any]]:
        start = len(self.observations)
        if self.pool is not None:
            pool_u = self._pool_u()
            free = np.flatnonzero(~self._observed_mask(pool_u))
            if len(free) < n:
                raise BadInputError(f"ask({n}): only {len(free)} unobserved pool rows are left")
            # Sobol points snapped to their nearest free pool rows
            target = sobol(start + n, self.space.n_params, self.settings.seed)[start:]
            out = []
            for t in target:
                j = free[np.argmin(np.linalg.norm(pool_u[free] - t, axis=1))]
                free = free[free != j]
                out.append(self.pool[j])
            return out
        u = sobol(start + n, self.space.n_params, self.settings.seed)[start:]
        with jax.enable_x64(True):
            return [self.space.from_unit(np.asarray(self.space.snap_unit(jnp.asarray(ui)))) for ui in u]

    def _bo(self, n: int, region: model.Region | None, round_: int) -> tuple[list[list[Any]], list[float]]:
        s, space = self.settings, self.space
        with jax.enable_x64(True):
            n_obs = len(self.observations)
            n_max = max(16, 1 << (n_obs - 1).bit_length())  # power-of-two buffers: few recompiles
            d = space.dim
            x = np.zeros((n_max, d))
            y = np.zeros(n_max)
            sign = 1.0 if s.goal == "maximize" else -1.0
            for i, o in enumerate(self.observations):
                x[i] = space.encode(o["x"])
                y[i] = sign * o["y"]
            mask = (np.arange(n_max) < n_obs).astype(np.float64)
            x, y, mask = jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask)
            ys, _, _ = gp.standardize(y, mask)
            key = jax.random.fold_in(jax.random.key(s.seed), round_)
            if s.gp == "map":
                params = jax.tree.map(lambda a: a[None], _fit_map(x, ys, mask, s.fit_steps))
            else:
                params = gp.fit_nuts(x, ys, mask, key, num_warmup=2 * s.nuts_samples,
                                     num_samples=s.nuts_samples, thinning=1)
            region = model.no_region(space.n_params) if region is None else model.Region(
                *(jnp.asarray(v) for v in region))
            grid_u = space.snap_unit(jnp.asarray(sobol(s.n_grid, space.n_params, seed=s.seed + 1)))
            if self.pool is not None:
                pool_u = self._pool_u()
                cands_u = jnp.asarray(pool_u)
                available = jnp.asarray(~self._observed_mask(pool_u))
                if int(available.sum()) < n:
                    raise BadInputError(f"ask({n}): only {int(available.sum())} unobserved pool rows are left")
                refine_starts = 0
            else:
                cands_u = space.snap_unit(jnp.asarray(sobol(s.n_candidates, space.n_params,
                                                            seed=s.seed * 7919 + round_ + 2)))
                available = jnp.ones(cands_u.shape[0], bool)
                refine_starts = min(s.refine_starts, s.n_candidates)
            settings = acquisition.AcqSettings(q=n, refine_starts=refine_starts)
            xq, idx, vals = _suggest(params, x, ys, mask, region, grid_u, space.encode_unit(grid_u),
                                     space.encode_unit(cands_u), available, jnp.asarray(space.continuous_mask()),
                                     acquisition.qmc_normal(512 if n == 1 else 1024, n, seed=s.seed), settings)
            idx, vals = np.asarray(idx), np.asarray(vals)
        if self.pool is not None:
            sugg = [self.pool[int(i)] for i in idx]
        else:
            sugg = [space.decode(np.asarray(v)) for v in xq]
        return sugg, [float(v) for v in vals]

    # status --------------------------------------------------------------------------------------------------
    def best(self) -> dict[str, Any] | None:
        if not self.observations:
            return None
        pick = max if self.settings.goal == "maximize" else min
        o = pick(self.observations, key=lambda o: o["y"])
        return {"x": self.space.to_dict_point(o["x"]), "y": o["y"]}

    def best_so_far(self) -> np.ndarray:
        y = np.asarray([o["y"] for o in self.observations], np.float64)
        if y.size == 0:
            return y
        return np.maximum.accumulate(y) if self.settings.goal == "maximize" else np.minimum.accumulate(y)

    def status(self) -> dict[str, Any]:
        return {"file": str(self.path), "observations": len(self.observations), "rounds": len(self.rounds),
                "n_init": self.settings.n_init, "best": self.best(),
                "pending": None if self.pending is None else [self.space.to_dict_point(s)
                                                              for s in self.pending["suggestions"]],
                "oracle": self.oracle_spec.get("kind", "none"),
                "last_preference": next((r["preference"] for r in reversed(self.rounds) if r.get("preference")), None)}

    def plot(self, path: str | os.PathLike) -> pathlib.Path:
        """Best-so-far against the number of experiments."""
        from core.plots import line_plot

        b = self.best_so_far()
        return line_plot(path, {"best so far": (np.arange(1, len(b) + 1), b)}, title=self.path.stem,
                         xlabel="experiments", ylabel="best objective")


@functools.partial(jax.jit, static_argnames=("steps",))
def _fit_map(x, ys, mask, steps: int) -> gp.GPParams:
    return gp.fit_map(x, ys, mask, None, steps=steps)


@functools.partial(jax.jit, static_argnames=("settings",))
def _suggest(params, x, ys, mask, region, grid_u, grid_x, cands_x, available, cont, base,
             settings: acquisition.AcqSettings):
    """Posterior(s), lift(s) and the acquisition's picks; params carry a leading sample axis."""
    posts = jax.vmap(gp.posterior, (0, None, None, None))(params, x, ys, mask)
    lifts = jax.vmap(model.make_lift, (0, None, None, None))(posts, region, grid_u, grid_x)
    best = jnp.max(jnp.where(mask > 0, ys, -jnp.inf))
    return acquisition.suggest(posts, lifts, best, cands_x, available, cont, base, settings)

"""Heterogeneous federated bandit environments, pure JAX and vmappable over seeds.

An environment is a frozen (hashable) dataclass holding static sizes and settings, with

    init(key) -> params                                   # one instance (a pytree of arrays)
    step(params, t, key) -> (feedback (V, K), mean (K,))  # t = 1, 2, ... (int32)

`feedback[v, k]` is the loss agent v would observe on arm k at round t (an algorithm reads only the entry
of the arm it pulls); `mean[k]` is the expected global loss (1/V) sum_v E[loss_{v,t}(k)] at round t, the
quantity that regret is measured against (the global best arm minimises its cumulative sum).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from core.config import BadInputError
from core.data import input_file, input_folder


def clipped_normal_mean(mu: jax.Array, sd: float) -> jax.Array:
    """E[clip(mu + sd Z, 0, 1)], Z ~ N(0, 1), exactly: mu (Phi(b) - Phi(a)) + sd (phi(a) - phi(b)) + 1 - Phi(b).

    a = -mu / sd and b = (1 - mu) / sd; reduces to clip(mu, 0, 1) at sd = 0.
    """
    mu = jnp.asarray(mu)
    if sd == 0:
        return jnp.clip(mu, 0.0, 1.0)
    a = -mu / sd
    b = (1.0 - mu) / sd
    pdf = lambda z: jnp.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return mu * (ndtr(b) - ndtr(a)) + sd * (pdf(a) - pdf(b)) + 1.0 - ndtr(b)


def _check_sizes(V: int, K: int) -> None:
    if int(V) != V or V < 1:
        raise BadInputError(f"number of agents V must be a positive integer, got {V}")
    if int(K) != K or K < 2:
        raise BadInputError(f"number of arms K must be an integer >= 2, got {K}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StochasticEnv:
    """Heterogeneous stochastic bandit: mu_{v,k} ~ U[0, 1] per agent, feedback clip(mu + sd N(0,1), 0, 1).

    Agents' local best arms differ; the global best arm minimises the agent-average expected (clipped)
    loss.  With corruption_rounds > 0 it is the corrupted-stochastic regime: in rounds t <= C every loss
    is flipped to 1 - loss (the best arm looks worst), after which the stochastic losses return.
    """

    V: int
    K: int
    noise_sd: float = 0.1
    corruption_rounds: int = 0

    def __post_init__(self):
        _check_sizes(self.V, self.K)
        if not self.noise_sd >= 0:
            raise BadInputError(f"noise_sd must be >= 0, got {self.noise_sd}")
        if self.corruption_rounds < 0:
            raise BadInputError(f"corruption_rounds must be >= 0, got {self.corruption_rounds}")

    def init(self, key: jax.Array) -> dict:
        mu = jax.random.uniform(key, (self.V, self.K))
        return {"mu": mu, "mean": jnp.mean(clipped_normal_mean(mu, self.noise_sd), 0)}

    def step(self, params: dict, t: jax.Array, key: jax.Array):
        z = jax.random.normal(key, (self.V, self.K))
        loss = jnp.clip(params["mu"] + self.noise_sd * z, 0.0, 1.0)
        mean = params["mean"]
        if self.corruption_rounds:
            corrupt = t <= self.corruption_rounds
            loss = jnp.where(corrupt, 1.0 - loss, loss)
            mean = jnp.where(corrupt, 1.0 - mean, mean)
        return loss, mean


@dataclasses.dataclass(frozen=True, kw_only=True)
class FixedMeansEnv:
    """Stochastic bandit with given per-agent means (a tuple of V tuples of K floats), clipped Gaussian noise."""

    means: tuple[tuple[float, ...], ...]
    noise_sd: float = 0.1

    def __post_init__(self):
        mu = np.asarray(self.means, dtype=float)
        if mu.ndim != 2:
            raise BadInputError(f"means must be V rows of K floats, got shape {mu.shape}")
        _check_sizes(*mu.shape)
        if np.any((mu < 0) | (mu > 1)):
            raise BadInputError("means must lie in [0, 1]")

    @property
    def V(self) -> int:
        return len(self.means)

    @property
    def K(self) -> int:
        return len(self.means[0])

    def init(self, key: jax.Array) -> dict:
        del key
        mu = jnp.asarray(self.means, jnp.float32)
        return {"mu": mu, "mean": jnp.mean(clipped_normal_mean(mu, self.noise_sd), 0)}

    def step(self, params: dict, t: jax.Array, key: jax.Array):
        z = jax.random.normal(key, params["mu"].shape)
        return jnp.clip(params["mu"] + self.noise_sd * z, 0.0, 1.0), params["mean"]


def _agent_offsets(key, V, K, scale):
    """Heterogeneous per-agent offsets in [-scale, scale] with zero mean over agents (for every arm)."""
    o = jax.random.uniform(key, (V, K), minval=-1.0, maxval=1.0)
    o = o - jnp.mean(o, 0, keepdims=True)
    return scale * o / jnp.maximum(jnp.max(jnp.abs(o)), 1e-12)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwitchingEnv:
    """Oblivious adversarial instance whose globally best arm switches over time.

    Global losses: every arm 0.5, except the current best arm b(t), which gets 0.5 - gap.  b(t) cycles
    through arms 0, 1, ..., n_best-1 in blocks whose lengths grow geometrically (block j has
    ceil(block0 * growth^j) rounds), so the best arm in hindsight keeps changing at every horizon.
    Agent v sees the global loss plus a fixed offset o_{v,k} (|o| <= hetero, zero mean over agents),
    so no agent can identify the global best arm from its own losses.  Losses lie in [0, 1] without
    clipping (0.5 - gap - hetero >= 0), so the agent average equals the global loss exactly.
    """

    V: int
    K: int
    gap: float = 0.2
    hetero: float = 0.25
    n_best: int = 2
    block0: int = 10
    growth: float = 1.5

    def __post_init__(self):
        _check_sizes(self.V, self.K)
        if not (0 < self.gap and 0.5 + self.hetero <= 1.0 and 0.5 - self.gap - self.hetero >= 0):
            raise BadInputError(f"need 0 < gap, 0.5 + hetero <= 1 and gap + hetero <= 0.5, got gap={self.gap}, "
                                f"hetero={self.hetero}")
        if not 1 <= self.n_best <= self.K:
            raise BadInputError(f"n_best must be in [1, K={self.K}], got {self.n_best}")
        if self.block0 < 1 or self.growth < 1:
            raise BadInputError(f"need block0 >= 1 and growth >= 1, got {self.block0}, {self.growth}")

    def best_arm(self, t: jax.Array) -> jax.Array:
        """b(t): index of the block holding round t, modulo n_best (closed form for geometric blocks)."""
        t = jnp.asarray(t, jnp.float32)
        if self.growth == 1.0:
            block = jnp.floor((t - 1) / self.block0)
        else:   # block j starts at 1 + block0 (g^j - 1) / (g - 1)
            g = self.growth
            block = jnp.floor(jnp.log1p((t - 1) * (g - 1) / self.block0) / math.log(g))
        return block.astype(jnp.int32) % self.n_best

    def init(self, key: jax.Array) -> dict:
        return {"offset": _agent_offsets(key, self.V, self.K, self.hetero)}

    def step(self, params: dict, t: jax.Array, key: jax.Array):
        del key
        mean = 0.5 - self.gap * jax.nn.one_hot(self.best_arm(t), self.K)
        return mean[None, :] + params["offset"], mean


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConstantGapSwitchingEnv:
    """Oblivious non-stationary instance with a fixed best arm and a constant gap: where sqrt(T) and T^(2/3) separate.

    Rounds fall into blocks of geometrically growing length (as SwitchingEnv).  In block j every global loss is
    shifted by base_j = lo + shift (j mod 2), the runner-up arm r_j = 1 + (j mod (K-1)) has loss base_j + gap
    and every other arm base_j + gap + spread; arm 0 has loss base_j.  So arm 0 is best in every round by
    exactly `gap` (the best arm in hindsight is arm 0 at every horizon and the regret of a policy is gap times
    its expected number of suboptimal pulls, at least), while the level and the ranking of the other arms
    switch, so the sequence is not i.i.d.  Forced exploration at rate t^(-1/3) (FedExp3) costs order
    gap T^(2/3); an algorithm with sqrt(T) adversarial regret pays at most order sqrt(T) here.  Agents see
    zero-mean offsets (|o| <= hetero) as in SwitchingEnv; no clipping is needed.
    """

    V: int
    K: int
    gap: float = 0.2
    spread: float = 0.2
    lo: float = 0.2
    shift: float = 0.15
    hetero: float = 0.2
    block0: int = 10
    growth: float = 1.5

    def __post_init__(self):
        _check_sizes(self.V, self.K)
        top = self.lo + self.shift + self.gap + self.spread + self.hetero
        if not (self.gap > 0 and self.spread >= 0 and self.shift >= 0 and self.lo - self.hetero >= 0 and top <= 1):
            raise BadInputError(f"need gap > 0, spread, shift >= 0, lo >= hetero and lo + shift + gap + spread + "
                                f"hetero <= 1; got gap={self.gap}, spread={self.spread}, lo={self.lo}, "
                                f"shift={self.shift}, hetero={self.hetero} (top {top:.3g})")
        if self.block0 < 1 or self.growth < 1:
            raise BadInputError(f"need block0 >= 1 and growth >= 1, got {self.block0}, {self.growth}")

    def block(self, t: jax.Array) -> jax.Array:
        t = jnp.asarray(t, jnp.float32)
        if self.growth == 1.0:
            return jnp.floor((t - 1) / self.block0).astype(jnp.int32)
        g = self.growth
        return jnp.floor(jnp.log1p((t - 1) * (g - 1) / self.block0) / math.log(g)).astype(jnp.int32)

    def init(self, key: jax.Array) -> dict:
        return {"offset": _agent_offsets(key, self.V, self.K, self.hetero)}

    def step(self, params: dict, t: jax.Array, key: jax.Array):
        del key
        j = self.block(t)
        base = self.lo + self.shift * (j % 2).astype(jnp.float32)
        runner = 1 + j % (self.K - 1)
        k = jnp.arange(self.K)
        mean = base + jnp.where(k == 0, 0.0, self.gap + jnp.where(k == runner, 0.0, self.spread))
        return mean[None, :] + params["offset"], mean


@dataclasses.dataclass(frozen=True, kw_only=True)
class FTLTrapEnv:
    """The oblivious sequence that defeats follow-the-leader, made heterogeneous.

    Global losses of arms 0 and 1: round 1 (lo + span/2, lo); then arm 1 gets lo + span on even rounds and
    lo on odd ones, arm 0 the reverse, so the leader flips every round and FTL always picks the arm about
    to lose.  The other arms get lo + span.  Agents see these plus zero-mean offsets (|o| <= hetero).
    """

    V: int
    K: int
    lo: float = 0.25
    span: float = 0.5
    hetero: float = 0.25

    def __post_init__(self):
        _check_sizes(self.V, self.K)
        if not (self.lo - self.hetero >= 0 and self.lo + self.span + self.hetero <= 1 and self.span > 0):
            raise BadInputError(f"need lo - hetero >= 0, lo + span + hetero <= 1, span > 0; got lo={self.lo}, "
                                f"span={self.span}, hetero={self.hetero}")

    def init(self, key: jax.Array) -> dict:
        return {"offset": _agent_offsets(key, self.V, self.K, self.hetero)}

    def step(self, params: dict, t: jax.Array, key: jax.Array):
        del key
        even = (t % 2) == 0
        a0 = jnp.where(t == 1, 0.5, jnp.where(even, 0.0, 1.0))
        a1 = jnp.where(t == 1, 0.0, jnp.where(even, 1.0, 0.0))
        pattern = jnp.concatenate([jnp.stack([a0, a1]), jnp.ones((self.K - 2,))])
        mean = self.lo + self.span * pattern
        return mean[None, :] + params["offset"], mean


RATING_LEVELS = np.arange(1, 11) / 2.0          # 0.5, 1.0, ..., 5.0 (MovieLens half-star scale)


def read_movielens(path: str | pathlib.Path, *, num_users: int, max_arms: int | None = None) -> dict:
    """Read MovieLens-format ratings.csv + movies.csv from a folder into per-(user, genre) rating histograms.

    Arms are the genres (split on '|', '(no genres listed)' included), sorted by name; agents are the
    num_users users with the most ratings (ties by id).  Returns {"counts": (V, K, 10) int64 over the
    half-star levels, "genres": [...], "users": [...]}.  The MovieLens licence forbids redistributing the
    data: the user supplies the folder.
    """
    import pandas as pd

    path = pathlib.Path(path)
    if path.exists():  # a missing folder is named by the per-file check below
        input_folder(path, "MovieLens ratings.csv and movies.csv (e.g. ml-latest-small)")
    files = {"ratings": path / "ratings.csv", "movies": path / "movies.csv"}
    need = {"ratings": ("userId", "movieId", "rating"), "movies": ("movieId", "genres")}
    frames = {}
    for name, f in files.items():
        if not f.exists():
            raise BadInputError(f"MovieLens folder {str(path)!r} has no {f.name}; expected ratings.csv and movies.csv")
        input_file(f, f"MovieLens {f.name} with columns {list(need[name])}")
        try:
            df = pd.read_csv(f)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise BadInputError(f"{f}: not a readable CSV ({type(err).__name__}: {' '.join(str(err).split())}); "
                                f"expected MovieLens columns {list(need[name])}") from None
        missing = [c for c in need[name] if c not in df.columns]
        if missing:
            raise BadInputError(f"{f} lacks column(s) {missing}; expected columns {list(need[name])}, got "
                                f"{list(df.columns)}")
        frames[name] = df
    ratings, movies = frames["ratings"], frames["movies"]
    r = pd.to_numeric(ratings["rating"], errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(r).all():
        row = int(np.flatnonzero(~np.isfinite(r))[0])
        raw = ratings["rating"].iloc[row]
        raise BadInputError(f"{files['ratings']}: rating={'(blank)' if pd.isna(raw) else repr(raw)} on data line "
                            f"{row + 2}: expected a number of half stars in [0.5, 5]")
    if len(r) == 0:
        raise BadInputError(f"{files['ratings']} has no ratings")
    if np.any((r < 0.5) | (r > 5.0)) or np.any(np.abs(r * 2 - np.round(r * 2)) > 1e-9):
        raise BadInputError(f"{files['ratings']}: ratings must be half stars in [0.5, 5], got range [{r.min()}, "
                            f"{r.max()}]")
    genres = movies.assign(genre=movies["genres"].astype(str).str.split("|")).explode("genre")[["movieId", "genre"]]
    names = sorted(genres["genre"].unique())
    if max_arms is not None:
        names = names[:max_arms]
    if len(names) < 2:
        raise BadInputError(f"MovieLens data gives {len(names)} genre(s); expected >= 2 arms")
    users = ratings["userId"].value_counts()
    users = sorted(users.index, key=lambda u: (-users[u], u))
    if len(users) < num_users:
        raise BadInputError(f"MovieLens data has {len(users)} users; expected >= num_users={num_users}")
    users = users[:num_users]
    merged = ratings[ratings["userId"].isin(users)].merge(genres, on="movieId")
    merged = merged[merged["genre"].isin(names)]
    u_idx = {u: i for i, u in enumerate(users)}
    g_idx = {g: i for i, g in enumerate(names)}
    counts = np.zeros((num_users, len(names), len(RATING_LEVELS)), np.int64)
    lvl = np.round(merged["rating"].to_numpy(dtype=float) * 2).astype(int) - 1
    np.add.at(counts, (merged["userId"].map(u_idx).to_numpy(), merged["genre"].map(g_idx).to_numpy(), lvl), 1)
    return {"counts": counts, "genres": names, "users": [int(u) for u in users]}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RatingsEnv:
    """Ratings-derived environment: users are agents, genres are arms, loss = (5.5 - rating) / 5.

    Pulling genre k, agent v observes the loss of one of its own ratings of a movie of that genre, drawn
    uniformly (a stationary stochastic environment, heterogeneous across users).  Convention for a genre
    the user never rated: the loss is `missing_loss` (default 1.0, as bad as a half-star rating; the
    FedExp3 code instead returns 0 for a day without rating, which biases toward unrated genres).
    The rating histograms are read from the folder once, on the host.
    """

    path: str
    V: int
    missing_loss: float = 1.0

    def __post_init__(self):
        if not 0 <= self.missing_loss <= 1:
            raise BadInputError(f"missing_loss must be in [0, 1], got {self.missing_loss}")

    @property
    def data(self) -> dict:
        return _cached_movielens(self.path, self.V)

    @property
    def K(self) -> int:
        return len(self.data["genres"])

    def init(self, key: jax.Array) -> dict:
        del key
        counts = jnp.asarray(self.data["counts"], jnp.float32)
        n = counts.sum(-1)
        has = n > 0
        probs = counts / jnp.maximum(n, 1.0)[..., None]
        losses = jnp.asarray((5.5 - RATING_LEVELS) / 5.0, jnp.float32)
        exp_loss = jnp.where(has, probs @ losses, self.missing_loss)
        logits = jnp.where(counts > 0, jnp.log(jnp.maximum(probs, 1e-30)), -jnp.inf)
        logits = jnp.where(has[..., None], logits, 0.0)
        return {"logits": logits, "has": has, "mean": jnp.mean(exp_loss, 0)}

    def step(self, params: dict, t: jax.Array, key: jax.Array):
        lvl = jax.random.categorical(key, params["logits"])
        loss = (5.5 - (lvl.astype(jnp.float32) + 1.0) / 2.0) / 5.0
        return jnp.where(params["has"], loss, self.missing_loss), params["mean"]


_MOVIELENS_CACHE: dict = {}


def _cached_movielens(path: str, V: int) -> dict:
    k = (str(pathlib.Path(path).resolve()), V)
    if k not in _MOVIELENS_CACHE:
        _MOVIELENS_CACHE[k] = read_movielens(path, num_users=V)
    return _MOVIELENS_CACHE[k]


SETTINGS = ("stochastic", "corrupted", "adversarial", "constant_gap", "ftl_trap", "movielens")


def make_env(setting: str, *, V: int, K: int, noise_sd: float = 0.1, corruption_rounds: int = 300,
             gap: float = 0.2, ratings_path: str = "", missing_loss: float = 1.0):
    """Build the environment named by `setting` (one of SETTINGS)."""
    if setting == "stochastic":
        return StochasticEnv(V=V, K=K, noise_sd=noise_sd)
    if setting == "corrupted":
        return StochasticEnv(V=V, K=K, noise_sd=noise_sd, corruption_rounds=corruption_rounds)
    if setting == "adversarial":
        return SwitchingEnv(V=V, K=K, gap=gap)
    if setting == "constant_gap":
        return ConstantGapSwitchingEnv(V=V, K=K, gap=gap)
    if setting == "ftl_trap":
        return FTLTrapEnv(V=V, K=K)
    if setting == "movielens":
        if not ratings_path:
            raise BadInputError("setting 'movielens' needs ratings_path, a folder with MovieLens ratings.csv and "
                                "movies.csv")
        return RatingsEnv(path=ratings_path, V=V, missing_loss=missing_loss)
    raise BadInputError(f"unknown setting {setting!r}, expected one of {SETTINGS}")

"""Communication networks and doubly stochastic gossip matrices (numpy, computed once per experiment).

Graphs: complete, ring, sqrt(V) x sqrt(V) grid, random geometric graph (RGG, unit square, radius r).
Gossip: the max-degree rule P = I - (Deg - A) / (d_max + 1), Metropolis-Hastings weights, and the
fastest-mixing symmetric chain (Boyd, Diaconis & Xiao 2004), found without an SDP solver by their projected
subgradient method on the edge weights.
Spectral quantities are computed: sigma_2(P) from an SVD, the diameter D by breadth-first search, and the
paper's topology delay C^P_t = min(log(V t), sqrt V) / (1 - sigma_2) + 2 + D.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.sparse import csgraph

from core.config import BadInputError

TOPOLOGIES = ("complete", "ring", "grid", "rgg")
GOSSIP_RULES = ("max_degree", "metropolis", "fastest")


def complete_graph(V: int) -> np.ndarray:
    _check_size(V)
    return np.ones((V, V), dtype=bool) & ~np.eye(V, dtype=bool)


def ring_graph(V: int) -> np.ndarray:
    _check_size(V)
    A = np.zeros((V, V), dtype=bool)
    i = np.arange(V)
    A[i, (i + 1) % V] = A[(i + 1) % V, i] = True
    A[i, i] = False
    return A


def grid_graph(V: int) -> np.ndarray:
    """sqrt(V) x sqrt(V) grid (4-neighbour lattice, no wrap-around)."""
    _check_size(V)
    s = math.isqrt(V)
    if s * s != V:
        raise BadInputError(f"grid topology needs a perfect-square number of agents, got V={V}")
    A = np.zeros((V, V), dtype=bool)
    for r in range(s):
        for c in range(s):
            v = r * s + c
            if c + 1 < s:
                A[v, v + 1] = A[v + 1, v] = True
            if r + 1 < s:
                A[v, v + s] = A[v + s, v] = True
    return A


def random_geometric_graph(V: int, radius: float, seed: int, *, max_tries: int = 1000) -> np.ndarray:
    """RGG on the unit square: V uniform points, an edge when the distance is <= radius.

    Resamples (seed, seed+1, ...) until the graph is connected, up to max_tries, so a given seed always
    yields the same connected graph.
    """
    _check_size(V)
    if not radius > 0:
        raise BadInputError(f"rgg radius must be > 0, got {radius}")
    for k in range(max_tries):
        pts = np.random.default_rng(seed + k).uniform(size=(V, 2))
        d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
        A = (d <= radius) & ~np.eye(V, dtype=bool)
        if is_connected(A):
            return A
    raise BadInputError(f"no connected random geometric graph with V={V}, radius={radius} in {max_tries} draws; "
                        "expected a larger radius")


def make_graph(topology: str, V: int, *, radius: float = 0.5, seed: int = 0) -> np.ndarray:
    if topology == "complete":
        return complete_graph(V)
    if topology == "ring":
        return ring_graph(V)
    if topology == "grid":
        return grid_graph(V)
    if topology == "rgg":
        return random_geometric_graph(V, radius, seed)
    raise BadInputError(f"unknown topology {topology!r}, expected one of {TOPOLOGIES}")


def _check_size(V: int) -> None:
    if int(V) != V or V < 1:
        raise BadInputError(f"number of agents V must be a positive integer, got {V}")


def _check_adjacency(A: np.ndarray) -> np.ndarray:
    A = np.asarray(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise BadInputError(f"adjacency must be a square matrix, got shape {A.shape}")
    A = A.astype(bool)
    if not np.array_equal(A, A.T):
        raise BadInputError("adjacency must be symmetric (an undirected graph)")
    return A & ~np.eye(len(A), dtype=bool)


def is_connected(A: np.ndarray) -> bool:
    A = _check_adjacency(A)
    n, _ = csgraph.connected_components(A, directed=False)
    return n == 1


def diameter(A: np.ndarray) -> int:
    """Longest shortest path (in hops); ValueError on a disconnected graph."""
    A = _check_adjacency(A)
    if not is_connected(A):
        raise BadInputError("graph is disconnected (infinite diameter); expected a connected communication graph")
    d = csgraph.shortest_path(A.astype(float), unweighted=True, directed=False)
    return int(d.max())


def max_degree_gossip(A: np.ndarray) -> np.ndarray:
    """P = I - (Deg - A) / (d_max + 1): symmetric, doubly stochastic, supported on the graph."""
    A = _check_adjacency(A).astype(float)
    deg = A.sum(1)
    return np.eye(len(A)) - (np.diag(deg) - A) / (deg.max() + 1.0)


def metropolis_gossip(A: np.ndarray) -> np.ndarray:
    """Metropolis-Hastings weights P_uv = 1 / (1 + max(d_u, d_v)) on edges, the rest on the diagonal."""
    A = _check_adjacency(A)
    deg = A.sum(1).astype(float)
    P = np.where(A, 1.0 / (1.0 + np.maximum(deg[:, None], deg[None, :])), 0.0)
    P[np.diag_indices_from(P)] = 1.0 - P.sum(1)
    return P


def fastest_mixing_gossip(A: np.ndarray, *, iters: int = 2000, tol: float = 1e-9) -> np.ndarray:
    """Fastest-mixing symmetric chain (Boyd, Diaconis & Xiao 2004, Sec. 5), numpy only (no cvxpy).

    P = I - sum_e w_e (e_i - e_j)(e_i - e_j)^T over edges e = (i, j), so P is symmetric with unit row sums;
    projected subgradient descent on the SLEM max(lambda_2, -lambda_n) over {w >= 0, sum of w at each node <= 1},
    from the max-degree weights, steps 1 / ((d_max + 1) sqrt(k)), keeping the best iterate.  The subgradient
    averages over all eigenvectors within tol of the SLEM, which is basis-independent on repeated eigenvalues
    (rings, grids) and vanishes at optima such as 11^T / V.  Stops early when the SLEM or the subgradient < tol.
    """
    A = _check_adjacency(A)
    if not is_connected(A):
        raise BadInputError(f"graph with V={len(A)} is disconnected; no gossip matrix mixes, expected a connected "
                            "graph")
    V = len(A)
    i, j = np.nonzero(np.triu(A, 1))
    if len(i) == 0:
        return np.eye(V)
    step = 1.0 / (A.sum(1).max() + 1.0)
    w = np.full(len(i), step)                           # the max-degree rule
    best, best_w = np.inf, w
    for k in range(1, iters + 1):
        lam, U = np.linalg.eigh(_edge_gossip(w, i, j, V))   # ascending; lam[-1] = 1 (eigenvector 1 / sqrt V)
        lam, dU = lam[:-1], U[i, :-1] - U[j, :-1]
        slem = max(lam[-1], -lam[0])
        if slem < best:
            best, best_w = slem, w
        if slem < tol:
            break
        parts = [sign * (dU[:, act] ** 2).mean(1) for sign, act in ((-1, lam >= slem - tol), (1, -lam >= slem - tol))
                 if act.any()]
        g = np.mean(parts, axis=0)
        norm = np.linalg.norm(g)
        if norm < tol:
            break
        w = _project_weights(w - step / math.sqrt(k) * g / norm, i, j, V)
    return _edge_gossip(best_w, i, j, V)


def _edge_gossip(w: np.ndarray, i: np.ndarray, j: np.ndarray, V: int) -> np.ndarray:
    P = np.zeros((V, V))
    P[i, j] = P[j, i] = w
    P[np.diag_indices(V)] = np.maximum(1.0 - P.sum(1), 0.0)   # clip rounding when a node's weights sum to 1
    return P


def _project_weights(w: np.ndarray, i: np.ndarray, j: np.ndarray, V: int) -> np.ndarray:
    """Map onto {w >= 0, node sums <= 1}: clip at 0, then scale each edge by its endpoints' worst overflow."""
    w = np.maximum(w, 0.0)
    load = np.bincount(i, w, V) + np.bincount(j, w, V)
    return w / np.maximum(1.0, np.maximum(load[i], load[j]))


def gossip_matrix(A: np.ndarray, rule: str = "max_degree") -> np.ndarray:
    if rule == "max_degree":
        return max_degree_gossip(A)
    if rule == "metropolis":
        return metropolis_gossip(A)
    if rule == "fastest":
        return fastest_mixing_gossip(A)
    raise BadInputError(f"unknown gossip rule {rule!r}, expected one of {GOSSIP_RULES}")


def check_gossip(P: np.ndarray, A: np.ndarray | None = None, *, atol: float = 1e-8) -> np.ndarray:
    """Validate P: square, nonnegative, rows and columns summing to 1, zero off the graph's edges."""
    P = np.asarray(P, dtype=float)
    if P.ndim != 2 or P.shape[0] != P.shape[1]:
        raise BadInputError(f"gossip matrix must be square, got shape {P.shape}")
    if np.any(P < -atol):
        raise BadInputError(f"gossip matrix has negative entries (min {P.min():.3g}); expected nonnegative")
    rows, cols = P.sum(1), P.sum(0)
    if np.max(np.abs(rows - 1)) > atol or np.max(np.abs(cols - 1)) > atol:
        raise BadInputError(
            "gossip matrix is not doubly stochastic: row sums in "
            f"[{rows.min():.6g}, {rows.max():.6g}], column sums in [{cols.min():.6g}, {cols.max():.6g}]; "
            "expected all 1")
    if A is not None:
        A = _check_adjacency(A)
        if A.shape != P.shape:
            raise BadInputError(f"gossip matrix shape {P.shape} does not match the graph's {A.shape}")
        off = ~A & ~np.eye(len(A), dtype=bool)
        if np.any(np.abs(P[off]) > atol):
            raise BadInputError("gossip matrix puts weight on pairs that are not graph edges; expected P supported "
                                "on the graph")
    return P


def sigma2(P: np.ndarray) -> float:
    """Second largest singular value of P (1 - sigma2 is the spectral gap)."""
    s = np.linalg.svd(np.asarray(P, dtype=float), compute_uv=False)
    return float(s[1]) if len(s) > 1 else 0.0


@dataclasses.dataclass(frozen=True)
class Network:
    """A validated network: adjacency, gossip matrix, sigma_2(P), diameter D (numpy; D >= 1)."""

    name: str
    adjacency: np.ndarray
    P: np.ndarray
    sigma2: float
    diameter: int

    @property
    def V(self) -> int:
        return len(self.P)

    def delay(self, t: np.ndarray | float) -> np.ndarray:
        """C^P_t = min(log(V t), sqrt V) / (1 - sigma_2) + 2 + D (numpy; the jitted code has its own)."""
        t = np.asarray(t, dtype=float)
        return np.minimum(np.log(self.V * t), np.sqrt(self.V)) / (1.0 - self.sigma2) + 2.0 + self.diameter


def build_network(A: np.ndarray, *, rule: str = "max_degree", name: str = "custom",
                  P: np.ndarray | None = None) -> Network:
    """Check connectivity, build (or validate a given) doubly stochastic P, compute sigma_2 and D."""
    A = _check_adjacency(A)
    if not is_connected(A):
        raise BadInputError(f"communication graph {name!r} with V={len(A)} is disconnected; expected a connected graph")
    P = gossip_matrix(A, rule) if P is None else np.asarray(P, dtype=float)
    check_gossip(P, A)
    D = max(diameter(A), 1) if len(A) > 1 else 1
    s2 = sigma2(P)
    if not s2 < 1.0 - 1e-12:
        raise BadInputError(f"gossip matrix has sigma_2 = {s2:.6g}; expected < 1 (a mixing chain)")
    return Network(name=name, adjacency=A, P=P, sigma2=s2, diameter=D)


def make_network(topology: str, V: int, *, rule: str = "max_degree", radius: float = 0.5, seed: int = 0) -> Network:
    return build_network(make_graph(topology, V, radius=radius, seed=seed), rule=rule, name=topology)

"""The scale-analysis calculator: pattern tables as data, a posynomial minimiser, predicted P*/kappa.

Each per-neuron pattern assignment (a "row") prices the cost of a strongly aligned network as a sum of
monomials in the problem scales (d, widths N_l) and the free quantities of the pattern (counts M_l of
specialised neurons, amplitudes D, beta):  E~ = sum_l sum_i Delta_{l,i} + a_y.  Minimising over the free
quantities gives the energy of the row; the row with the least energy is the predicted pattern and
P*/kappa is proportional to that energy (all up to O(1) constants; see the method notes).

A sum of monomials with positive coefficients is a posynomial: in log-variables it is convex, so a
box-constrained minimisation in log-space finds the global minimum. When a row has exactly one more term
than free variables (zero "degree of difficulty"), the geometric-programming dual gives the minimum in
closed form as a monomial of the fixed scales; `scaling_law` returns it, and phase boundaries between rows
follow by equating two such monomials (`phase_boundary`), so no exponent here is typed in by hand.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.optimize

__all__ = [
    "Monomial", "Pattern", "Prediction", "ScalingLaw", "TWO_LAYER", "THREE_LAYER", "TABLES",
    "energy", "minimise", "scaling_law", "phase_boundary", "predict", "mono",
]


@dataclasses.dataclass(frozen=True)
class Monomial:
    """coef * prod_k var_k ** power_k; `powers` is a tuple of (name, power) pairs (hashable, ordered)."""

    coef: float
    powers: tuple[tuple[str, float], ...]

    def __post_init__(self):
        if not self.coef > 0:
            raise ValueError(f"Monomial coef={self.coef!r}: expected a positive number")

    def power(self, name: str) -> float:
        return dict(self.powers).get(name, 0.0)

    def names(self) -> set[str]:
        return {n for n, p in self.powers if p != 0}

    def __call__(self, values: Mapping[str, float]) -> float:
        out = self.coef
        for name, p in self.powers:
            out *= float(values[name]) ** p
        return out

    def __str__(self) -> str:
        parts = [] if self.coef == 1 else [f"{self.coef:g}"]
        for n, p in self.powers:
            if p == 0:
                continue
            parts.append(n if p == 1 else f"{n}^{_fmt(p)}")
        return "*".join(parts) or "1"


def _fmt(p: float) -> str:
    for den in (1, 2, 3, 4, 6):
        if abs(p * den - round(p * den)) < 1e-9:
            num = int(round(p * den))
            return str(num) if den == 1 else f"({num}/{den})"
    return f"{p:.4g}"


def mono(coef: float = 1.0, **powers: float) -> Monomial:
    """`mono(d=1, M2=1)` is d*M2; `mono(N2=1, M2=-1)` is N2/M2."""
    return Monomial(float(coef), tuple(sorted((k, float(v)) for k, v in powers.items())))


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One row of a pattern table.

    layers: the per-layer pattern names, e.g. ("GP", "Spec").
    delta: per layer, the monomials whose sum is that layer's sum_i Delta_{l,i}.
    a_y: the readout's RKHS cost of the target on the last hidden kernel.
    free: {name: (lower, upper)}; a bound is a number or the name of a fixed scale (e.g. "N2").
    source: "notes" (the secondary-source table) or "reconstructed" (derived here from the propagation rules).
    """

    name: str
    layers: tuple[str, ...]
    delta: tuple[tuple[Monomial, ...], ...]
    a_y: Monomial
    free: tuple[tuple[str, tuple[float | str, float | str]], ...] = ()
    source: str = "notes"

    @property
    def terms(self) -> tuple[Monomial, ...]:
        return tuple(m for layer in self.delta for m in layer) + (self.a_y,)

    @property
    def free_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.free)

    def fixed_names(self) -> tuple[str, ...]:
        names = set().union(*(t.names() for t in self.terms)) - set(self.free_names)
        for _, bounds in self.free:
            names |= {b for b in bounds if isinstance(b, str)}
        return tuple(sorted(names))


# -- the tables (method notes, Table 1 and the two-layer case) ------------------------------------------
# Two-layer erf FCN, y = He3(w*.x):
#   GP:   lazy first layer; the cubic eigenvalue of the NNGP kernel is ~d^-3, so a_y = d^3.
#   Spec: M of N first-layer neurons lock onto w* (each costs ~d nats against the prior overlap 1/sqrt(d));
#         the readout then carries the target on M of N neurons: a_y = N/M.
#   GFL (reconstructed here, not in the notes): every neuron's covariance along w* is amplified by D
#         (per-neuron cost ~D), and by propagation rule (ii) the cubic eigenvalue grows by D^3: a_y = d^3/D^3.
TWO_LAYER: tuple[Pattern, ...] = (
    Pattern(name="GP", layers=("GP",), delta=((),), a_y=mono(d=3)),
    Pattern(name="GFL", layers=("GFL",), delta=((mono(N1=1, D=1),),), a_y=mono(d=3, D=-3),
            free=(("D", (1.0, "d")),), source="reconstructed"),
    Pattern(name="Spec", layers=("Spec",), delta=((mono(M1=1, d=1),),), a_y=mono(N1=1, M1=-1),
            free=(("M1", (1.0, "N1")),)),
)

# Three-layer erf FCN, widths N1, N2 (method notes, Table 1).
THREE_LAYER: tuple[Pattern, ...] = (
    Pattern(name="GP-GP", layers=("GP", "GP"), delta=((), ()), a_y=mono(d=3)),
    Pattern(name="GP-Spec", layers=("GP", "Spec"), delta=((), (mono(M2=1, d=1),)), a_y=mono(N2=1, M2=-1),
            free=(("M2", (1.0, "N2")),)),
    Pattern(name="Spec-Mag", layers=("Spec", "Mag"),
            delta=((mono(M1=1, d=1),), (mono(N1=1, beta=1, M1=-1),)), a_y=mono(N2=1, beta=-1),
            free=(("M1", (1.0, "N1")), ("beta", (1e-12, 1e12)))),
)

TABLES: dict[str, tuple[Pattern, ...]] = {"two": TWO_LAYER, "three": THREE_LAYER}


def energy(pattern: Pattern, values: Mapping[str, float]) -> float:
    """E~ of a row at given fixed scales and free quantities (all in `values`)."""
    return float(sum(t(values) for t in pattern.terms))


def _bound(b: float | str, fixed: Mapping[str, float]) -> float:
    return float(fixed[b]) if isinstance(b, str) else float(b)


@dataclasses.dataclass(frozen=True)
class Minimum:
    energy: float
    argmin: dict[str, float]
    at_bound: tuple[str, ...]     # free quantities pinned at a bound (the unconstrained optimum is infeasible)


def minimise(pattern: Pattern, fixed: Mapping[str, float]) -> Minimum:
    """Minimise the row's energy over its free quantities within their bounds (convex in log-space)."""
    for name in pattern.fixed_names():
        if name not in fixed:
            raise ValueError(f"pattern {pattern.name}: missing scale {name!r}; got {sorted(fixed)}")
        if not float(fixed[name]) > 0:
            raise ValueError(f"pattern {pattern.name}: scale {name}={fixed[name]!r}: expected > 0")
    if not pattern.free:
        return Minimum(energy(pattern, fixed), {}, ())
    names = pattern.free_names
    lo = np.array([math.log(_bound(b[0], fixed)) for _, b in pattern.free])
    hi = np.array([math.log(_bound(b[1], fixed)) for _, b in pattern.free])
    if np.any(lo > hi):
        raise ValueError(f"pattern {pattern.name}: empty range for free quantities {names} at {dict(fixed)}")
    # log E = logsumexp(c + A z): build c (log coefficients incl. fixed scales) and A (free exponents).
    c = np.array([math.log(t.coef) + sum(p * math.log(fixed[n]) for n, p in t.powers if n not in names)
                  for t in pattern.terms])
    a = np.array([[t.power(n) for n in names] for t in pattern.terms])

    def fun(z):
        e = c + a @ z
        m = e.max()
        w = np.exp(e - m)
        s = w.sum()
        return m + math.log(s), (a.T @ w) / s

    best = None
    for z0 in (0.5 * (lo + hi).clip(-50, 50), lo.clip(-50, 50), hi.clip(-50, 50)):
        res = scipy.optimize.minimize(fun, z0, jac=True, method="L-BFGS-B", bounds=list(zip(lo, hi)),
                                      options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 1000})
        if best is None or res.fun < best.fun:
            best = res
    z = best.x
    at_bound = tuple(n for n, zi, l, h in zip(names, z, lo, hi) if min(zi - l, h - zi) < 1e-6)
    return Minimum(float(math.exp(best.fun)), {n: float(math.exp(v)) for n, v in zip(names, z)}, at_bound)


@dataclasses.dataclass(frozen=True)
class ScalingLaw:
    """The closed-form interior minimum of a row: E_min = energy and argmin as monomials of the fixed scales."""

    pattern: str
    energy: Monomial
    argmin: dict[str, Monomial]
    weights: tuple[float, ...]   # the dual weights: the share of each term in E_min

    def exponent(self, name: str) -> float:
        return self.energy.power(name)


def scaling_law(pattern: Pattern) -> ScalingLaw:
    """Closed-form minimum via the geometric-programming dual (rows with one more term than free quantities).

    Dual weights delta_j solve sum_j delta_j = 1 and sum_j delta_j A_jk = 0 (k free); then
    E_min = prod_j (c_j X_j / delta_j)^delta_j with X_j the fixed-scale part of term j, and at the optimum each
    term equals delta_j E_min, which fixes the free quantities.
    """
    terms, names = pattern.terms, pattern.free_names
    fixed = pattern.fixed_names()
    if len(terms) != len(names) + 1:
        if not names and len(terms) == 1:
            t = terms[0]
            return ScalingLaw(pattern.name, t, {}, (1.0,))
        raise ValueError(f"pattern {pattern.name}: {len(terms)} terms and {len(names)} free quantities; the "
                         "closed form needs exactly one more term than free quantities (use minimise)")
    a = np.array([[t.power(n) for n in names] for t in terms])            # (J, K)
    lhs = np.vstack([np.ones(len(terms)), a.T])                            # (K+1, J)
    rhs = np.zeros(len(names) + 1)
    rhs[0] = 1.0
    delta = np.linalg.solve(lhs, rhs)
    if np.any(delta <= 0):
        raise ValueError(f"pattern {pattern.name}: dual weights {delta} not all positive: no interior optimum")
    b = np.array([[t.power(n) for n in fixed] for t in terms])             # (J, F)
    e_pow = delta @ b
    log_coef = float(sum(dj * (math.log(t.coef) - math.log(dj)) for dj, t in zip(delta, terms)))
    e_mono = Monomial(math.exp(log_coef), tuple((n, float(p)) for n, p in zip(fixed, e_pow)))
    # term_j = delta_j * E  =>  A z = log(delta_j) + log E - log c_j - b_j . log(fixed): linear in log(fixed)
    const = np.log(delta) + log_coef - np.log([t.coef for t in terms])
    slope = e_pow[None, :] - b                                             # (J, F)
    z_const, *_ = np.linalg.lstsq(a, const, rcond=None)
    z_slope, *_ = np.linalg.lstsq(a, slope, rcond=None)                    # (K, F)
    argmin = {n: Monomial(math.exp(float(z_const[k])), tuple((f, float(z_slope[k, i]))
                                                          for i, f in enumerate(fixed)))
              for k, n in enumerate(names)}
    return ScalingLaw(pattern.name, e_mono, argmin, tuple(float(x) for x in delta))


def phase_boundary(row_a: Pattern, row_b: Pattern, solve_for: str) -> Monomial:
    """The value of scale `solve_for` at which rows a and b cost the same, as a monomial of the other scales.

    Both closed-form energies are monomials, so E_a = E_b is linear in log-scales:
    sum_k (e_a - e_b)_k log v_k = log(C_b / C_a).
    """
    la, lb = scaling_law(row_a).energy, scaling_law(row_b).energy
    names = sorted(la.names() | lb.names())
    diff = {n: la.power(n) - lb.power(n) for n in names}
    if abs(diff.get(solve_for, 0.0)) < 1e-12:
        raise ValueError(f"rows {row_a.name} and {row_b.name}: their energies do not depend differently on "
                         f"{solve_for!r}; expected a scale with a boundary")
    k = diff[solve_for]
    coef = math.exp(math.log(lb.coef / la.coef) / k)
    return Monomial(coef, tuple((n, -diff[n] / k) for n in names if n != solve_for))


@dataclasses.dataclass(frozen=True)
class Prediction:
    pattern: str                         # the winning row
    energy: float                        # its minimum energy: P*/kappa up to an O(1) constant
    argmin: dict[str, float]             # its free quantities at the minimum (counts, amplitudes)
    energies: dict[str, float]           # every row's minimum energy
    at_bound: tuple[str, ...]


def predict(arch: str, d: float, widths: Sequence[float], *, include_reconstructed: bool = True) -> Prediction:
    """Predicted pattern and P*/kappa (up to O(1)) for a 2- or 3-layer erf FCN on y = He3(w*.x)."""
    if arch not in TABLES:
        raise ValueError(f"arch={arch!r}: expected one of {sorted(TABLES)}")
    n_hidden = 1 if arch == "two" else 2
    if len(widths) != n_hidden:
        raise ValueError(f"widths={tuple(widths)!r}: expected {n_hidden} width(s) for arch={arch!r}")
    if not d >= 1:
        raise ValueError(f"d={d!r}: expected an input dimension >= 1")
    for i, n in enumerate(widths):
        if not n >= 1:
            raise ValueError(f"widths[{i}]={n!r}: expected a width >= 1")
    fixed = {"d": float(d), **{f"N{i + 1}": float(n) for i, n in enumerate(widths)}}
    rows = [p for p in TABLES[arch] if include_reconstructed or p.source == "notes"]
    mins = {p.name: minimise(p, fixed) for p in rows}
    win = min(mins, key=lambda k: mins[k].energy)
    return Prediction(win, mins[win].energy, mins[win].argmin, {k: m.energy for k, m in mins.items()},
                      mins[win].at_bound)


def table_markdown(arch: str) -> str:
    """The pattern table with its closed-form minima, as markdown (for the README)."""
    lines = ["| pattern | source | Delta per layer | a_y | minimiser | E_min |", "|---|---|---|---|---|---|"]
    for p in TABLES[arch]:
        law = scaling_law(p)
        deltas = "; ".join(" + ".join(str(m) for m in layer) or "0" for layer in p.delta)
        argmin = ", ".join(f"{k} = {v}" for k, v in law.argmin.items()) or "-"
        lines.append(f"| {p.name} | {p.source} | {deltas} | {p.a_y} | {argmin} | {law.energy} |")
    return "\n".join(lines)

"""Continual-learning metrics on an accuracy matrix R, R[i, j] = accuracy on task j after training task i.

Definitions (Lopez-Paz & Ranzato 2017; Chaudhry et al. 2018): average accuracy = mean_j R[T-1, j];
BWT = mean_{j<T-1} (R[T-1, j] - R[j, j]); forgetting = mean_{j<T-1} (max_{i<T-1} R[i, j] - R[T-1, j]);
FWT = mean_{j>0} (R[j-1, j] - b_j), b_j the accuracy of the untrained network on task j.
"""

from __future__ import annotations

import numpy as np


def _check(r: np.ndarray) -> np.ndarray:
    r = np.asarray(r, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] != r.shape[1] or r.shape[0] < 1:
        raise ValueError(f"accuracy matrix of shape {r.shape}, expected a square (T, T) matrix with T >= 1")
    return r


def average_accuracy(r) -> float:
    r = _check(r)
    return float(r[-1].mean())


def backward_transfer(r) -> float:
    r = _check(r)
    t = r.shape[0]
    if t < 2:
        return 0.0
    return float(np.mean(r[-1, :-1] - np.diag(r)[:-1]))


def forgetting(r) -> float:
    r = _check(r)
    t = r.shape[0]
    if t < 2:
        return 0.0
    best = r[:-1, :-1].max(axis=0)
    return float(np.mean(best - r[-1, :-1]))


def forward_transfer(r, baseline) -> float:
    r = _check(r)
    b = np.asarray(baseline, dtype=np.float64)
    if b.shape != (r.shape[0],):
        raise ValueError(f"baseline of shape {b.shape}, expected ({r.shape[0]},)")
    if r.shape[0] < 2:
        return 0.0
    return float(np.mean([r[j - 1, j] - b[j] for j in range(1, r.shape[0])]))


def summarize(r, baseline=None) -> dict[str, float]:
    """All the metrics of one run as a dict (accuracies in the units of R)."""
    out = {"avg_acc": average_accuracy(r), "bwt": backward_transfer(r), "forgetting": forgetting(r)}
    if baseline is not None:
        out["fwt"] = forward_transfer(r, baseline)
    return out

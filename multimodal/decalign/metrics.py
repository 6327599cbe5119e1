"""Evaluation metrics in the MMSA convention (host-side numpy, run once per evaluation).

Regression (MOSI/MOSEI/SIMS): MAE, Pearson correlation, Acc-2 and weighted F1 on the non-zero labels
(prediction > 0 vs truth > 0, examples whose truth is exactly 0 dropped), the "has-0" variant
(>= 0 vs >= 0 on all examples) for reference, and Acc-7 after clipping to [-3, 3] and rounding.
Classification (IEMOCAP): weighted accuracy (overall accuracy) and weighted F1 (support-weighted), plus
the unweighted (class-balanced) accuracy.
"""

from __future__ import annotations

import numpy as np


def weighted_f1(truth: np.ndarray, pred: np.ndarray) -> float:
    """Support-weighted F1 over the classes present in `truth` (sklearn's average='weighted')."""
    truth, pred = np.asarray(truth), np.asarray(pred)
    classes, support = np.unique(truth, return_counts=True)
    total = 0.0
    for c, n in zip(classes, support):
        tp = np.sum((pred == c) & (truth == c))
        fp = np.sum((pred == c) & (truth != c))
        fn = np.sum((pred != c) & (truth == c))
        f1 = 2 * tp / (2 * tp + fp + fn) if tp > 0 else 0.0
        total += n * f1
    return float(total / max(len(truth), 1))


def regression_metrics(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """MMSA regression metrics for predictions and labels (N,) in sentiment units."""
    pred = np.asarray(pred, np.float64).reshape(-1)
    truth = np.asarray(truth, np.float64).reshape(-1)
    if pred.shape != truth.shape or pred.size == 0:
        raise ValueError(f"pred shape {pred.shape} and truth shape {truth.shape}: expected equal, non-empty")
    mae = float(np.mean(np.abs(pred - truth)))
    if np.std(pred) > 0 and np.std(truth) > 0:
        corr = float(np.corrcoef(pred, truth)[0, 1])
    else:
        corr = 0.0
    nz = truth != 0
    bin_t, bin_p = truth[nz] > 0, pred[nz] > 0
    acc2 = float(np.mean(bin_t == bin_p)) if nz.any() else float("nan")
    f1 = weighted_f1(bin_t, bin_p) if nz.any() else float("nan")
    h_t, h_p = truth >= 0, pred >= 0
    acc7 = float(np.mean(np.round(np.clip(pred, -3, 3)) == np.round(np.clip(truth, -3, 3))))
    return {"mae": mae, "corr": corr, "acc2": acc2, "f1": f1, "acc7": acc7,
            "acc2_has0": float(np.mean(h_t == h_p)), "f1_has0": weighted_f1(h_t, h_p)}


def classification_metrics(logits: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """IEMOCAP-style metrics from logits (N, C) and integer labels (N,)."""
    logits = np.asarray(logits)
    truth = np.asarray(truth).reshape(-1)
    if logits.ndim != 2 or logits.shape[0] != truth.shape[0]:
        raise ValueError(f"logits shape {logits.shape}, truth shape {truth.shape}: expected (N, C) and (N,)")
    pred = np.argmax(logits, -1)
    per_class = [np.mean(pred[truth == c] == c) for c in np.unique(truth)]
    return {"wacc": float(np.mean(pred == truth)), "waf1": weighted_f1(truth, pred),
            "uacc": float(np.mean(per_class))}

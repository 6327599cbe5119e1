"""Metrics of the end-to-end stage: pooled WER of a first hypothesis and of the n-best oracle (jiwer, after
the cascade's normalisation), and cross-task retrieval between two sets of trial embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bit import phonemes


def word_errors(ref: str, hyp: str) -> tuple[int, int]:
    """(edit distance in words, reference words), after the WER's normalisation (bit.phonemes.normalise)."""
    import jiwer
    r, h = " ".join(phonemes.normalise(ref)), " ".join(phonemes.normalise(hyp))
    if not r:
        raise ValueError(f"reference {ref!r} has no words: expected a sentence")
    out = jiwer.process_words(r, h)
    return out.substitutions + out.deletions + out.insertions, len(r.split())


def wer_scores(refs: Sequence[str], hyps: Sequence[Sequence[str]]) -> dict[str, float]:
    """Pooled WER of each sentence's first hypothesis, and the n-best oracle WER (each sentence's best)."""
    if len(refs) != len(hyps) or any(len(h) == 0 for h in hyps):
        raise ValueError(f"{len(refs)} references and {len(hyps)} hypothesis lists: expected one non-empty list each")
    first = oracle = words = 0
    for ref, hs in zip(refs, hyps):
        errs = [word_errors(ref, h)[0] for h in hs]
        first += errs[0]
        oracle += min(errs)
        words += word_errors(ref, ref)[1]
    return {"wer": first / words, "wer_oracle": oracle / words}


def retrieval_accuracy(queries: np.ndarray, keys: np.ndarray) -> float:
    """Top-1 cross-retrieval: the fraction of rows i whose most cosine-similar key is key i (chance 1 / N)."""
    q = np.asarray(queries, np.float64)
    k = np.asarray(keys, np.float64)
    if q.ndim != 2 or q.shape != k.shape:
        raise ValueError(f"queries {q.shape} and keys {k.shape}: expected the same (N, D) shape")
    q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    k = k / np.maximum(np.linalg.norm(k, axis=1, keepdims=True), 1e-12)
    return float(np.mean((q @ k.T).argmax(1) == np.arange(len(q))))


def mean_features(arrays: dict) -> np.ndarray:
    """Each trial's time-averaged input features over its valid bins (N, F): the no-model retrieval baseline."""
    x, length = np.asarray(arrays["x"]), np.asarray(arrays["length"])
    valid = np.arange(x.shape[1])[None, :, None] < length[:, None, None]
    return (x * valid).sum(1) / np.maximum(length[:, None], 1)

"""Phoneme and word error rates (jiwer) and greedy CTC collapse."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bit import phonemes


def greedy_ids(logp: np.ndarray, frames: int) -> list[int]:
    """Best path: argmax per frame, merge repeats, drop blanks."""
    best = np.asarray(logp[:frames]).argmax(-1)
    out, prev = [], -1
    for c in best:
        if c != prev and c != phonemes.BLANK:
            out.append(int(c))
        prev = c
    return out


def _join(ids: Sequence[int]) -> str:
    return " ".join(phonemes.SYMBOLS[int(i)] for i in ids)


def per(refs: Sequence[Sequence[int]], hyps: Sequence[Sequence[int]]) -> float:
    """Phoneme error rate (SIL included, as BIT's PER), pooled over sentences (jiwer edit distance)."""
    import jiwer
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references vs {len(hyps)} hypotheses: expected equal counts")
    hyp = [_join(h) if len(h) else "" for h in hyps]
    return float(jiwer.wer([_join(r) for r in refs], hyp))


def wer(refs: Sequence[str], hyps: Sequence[str]) -> float:
    import jiwer
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references vs {len(hyps)} hypotheses: expected equal counts")
    return float(jiwer.wer([" ".join(phonemes.normalise(r)) for r in refs],
                           [" ".join(phonemes.normalise(h)) for h in hyps]))

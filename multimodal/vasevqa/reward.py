"""The GRPO reward, R = sum_i w_i r_i - P + B over the six attributes (a reconstruction: the released reward
plugin `external_vase_acc` is not public, so its weights, similarities, penalty and bonus are unknown).

Ours: a caption is parsed for each attribute's value (the vocabulary of `vases`); r_i is 1 for the right value,
0 for a wrong or missing one, with partial credit where the attribute is ordered or composite: Dating
1 - |bucket difference| / (number of buckets - 1), Decoration 0.5 per band right (shoulder, foot).
P = penalty x (fraction of the six attributes that are missing + the fraction of repeated words).
B = bonus when all six are exactly right.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

from core.config import check
from multimodal.vasevqa import vases


@dataclasses.dataclass(frozen=True, kw_only=True)
class RewardConfig:
    weights: tuple[float, ...] = (1 / 6,) * 6   # Fabric, Technique, Shape, Dating, Decoration, Attribution
    penalty: float = 0.2                        # P = penalty x (missing-attribute fraction + repeated-word fraction)
    bonus: float = 0.2                          # B, added when all six attributes are exactly right

    def __post_init__(self):
        check(len(self.weights) == 6 and all(w >= 0 for w in self.weights), "reward.weights", self.weights,
              "six non-negative weights (Fabric, Technique, Shape, Dating, Decoration, Attribution)")
        check(self.penalty >= 0, "reward.penalty", self.penalty, ">= 0")
        check(self.bonus >= 0, "reward.bonus", self.bonus, ">= 0")


def _first(text: str, options: Sequence[str]) -> str | None:
    """The option that occurs first in text (whole words), or None."""
    best, where = None, len(text) + 1
    for o in options:
        m = re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", text)
        if m and m.start() < where:
            best, where = o, m.start()
    return best


def parse(caption: str) -> dict[str, object]:
    """{attribute: value or None}; Decoration is a (shoulder band, foot band) pair of values or Nones."""
    text = caption.strip()
    out: dict[str, object] = {"Fabric": _first(text, vases.FABRICS), "Technique": _first(text, vases.TECHNIQUES),
                              "Shape": _first(text, vases.SHAPES), "Attribution": _first(text, vases.ATTRIBUTIONS)}
    dates = re.findall(r"(\d{3})-(\d{3})", text)
    out["Dating"] = None
    for a, b in dates:
        candidate = f"c. {a}-{b} BCE"
        if candidate in vases.DATES:
            out["Dating"] = candidate
            break
    shoulder = re.search(r"(\w+) on the shoulder", text)
    foot = re.search(r"(\w+) at the foot", text)
    out["Decoration"] = (shoulder.group(1) if shoulder and shoulder.group(1) in vases.BANDS else None,
                         foot.group(1) if foot and foot.group(1) in vases.BANDS else None)
    return out


def attribute_scores(caption: str, truth: vases.VaseAttributes) -> np.ndarray:
    """r_i for the six attributes in `vases.ATTRIBUTES` order, each in [0, 1]."""
    p = parse(caption)
    r = np.zeros(6)
    r[0] = float(p["Fabric"] == truth.fabric)
    r[1] = float(p["Technique"] == truth.technique)
    r[2] = float(p["Shape"] == truth.shape)
    if p["Dating"] is not None:
        r[3] = 1.0 - abs(vases.DATES.index(p["Dating"]) - vases.DATES.index(truth.dating)) / (len(vases.DATES) - 1)
    shoulder, foot = p["Decoration"]
    r[4] = 0.5 * float(shoulder == truth.shoulder_band) + 0.5 * float(foot == truth.foot_band)
    r[5] = float(p["Attribution"] == truth.attribution)
    return r


def missing_fraction(caption: str) -> float:
    p = parse(caption)
    missing = sum(p[a] is None for a in ("Fabric", "Technique", "Shape", "Dating", "Attribution"))
    missing += 0.5 * sum(b is None for b in p["Decoration"])
    return missing / 6.0


def repeat_fraction(caption: str) -> float:
    words = caption.lower().split()
    return 0.0 if not words else 1.0 - len(set(words)) / len(words)


def reward(caption: str, truth: vases.VaseAttributes, config: RewardConfig = RewardConfig()) -> float:
    r = attribute_scores(caption, truth)
    total = float(np.dot(config.weights, r))
    total -= config.penalty * (missing_fraction(caption) + repeat_fraction(caption))
    exact = (r == 1.0).all()
    return total + (config.bonus if exact else 0.0)


def attribute_accuracy(captions: Sequence[str], truths: Sequence[vases.VaseAttributes]) -> dict[str, float]:
    """Per-attribute exact accuracy over a set of captions (r_i == 1), the method note's extra metric."""
    scores = np.stack([attribute_scores(c, t) for c, t in zip(captions, truths)]) if captions else np.zeros((0, 6))
    return {a: float(np.mean(scores[:, i] == 1.0)) if len(scores) else float("nan")
            for i, a in enumerate(vases.ATTRIBUTES)}

"""The released caption evaluation (VaseVQA-3D `eval/compare.py`, re-implemented from reading it), with
pluggable text encoders.

- matching: a generated record and a ground-truth record pair up when their first image names share an id,
  the first two `_`-separated parts when the name has at least three (else the name without `.jpg`); a later
  ground-truth record with the same id overwrites an earlier one; generated records without a match are
  skipped and counted.
- "CLIP score": mean cosine between the text embeddings (CLIP ViT-B/32's text tower as released) of each
  generated caption and its ground truth. "Semantic similarity": **the same computation again** (the released
  code computes it twice, so the overall score counts it twice; kept for parity, labelled so).
- "FID": Frechet distance between the sentence embeddings (all-mpnet-base-v2 as released) of the generated
  set and the ground-truth set, covariances with ddof 1 plus eps I (eps = 1e-6), sqrtm of the product, real part;
  if sqrtm fails, the released fallback tr(S1) + tr(S2) - 2 sqrt(tr(S1) tr(S2)).
- R@1/5/10: text-to-text retrieval; generated caption i ranks every matched ground-truth caption by text-
  embedding cosine (descending argsort), a hit when the ground truth i is in the top k. Ties are broken as a
  stable descending sort (the released `np.argsort(s)[::-1]` with numpy's default sort is not specified on ties).
- lexical similarity: mean Jaccard index of the lowercased whitespace word sets (0 when both are empty).
- overall = 0.25 CLIP + 0.25 semantic + 0.20 R@10 + 0.15 lexical + 0.10 R@5 + 0.05 R@1.

Encoders implement `encode(list[str]) -> (n, d)` and carry a `name`: `LSAEncoder` (TF-IDF over word uni- and
bigrams, truncated SVD, L2-normalised; fitted here on training captions, for offline runs), `HashEncoder`
(deterministic, no fitting), and `HFTextEncoder` (a local CLIP or sentence-transformers folder; needs
transformers / sentence-transformers, which the offline runs do not have).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from core.config import BadInputError

OVERALL_WEIGHTS = {"clip_score": 0.25, "semantic_similarity": 0.25, "r_at_10": 0.20, "lexical_similarity": 0.15,
                   "r_at_5": 0.10, "r_at_1": 0.05}
FID_EPS = 1e-6


class TextEncoder(Protocol):
    name: str

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _grams(text: str) -> list[str]:
    w = _words(text)
    return w + [f"{a}_{b}" for a, b in zip(w, w[1:])]


@dataclasses.dataclass
class LSAEncoder:
    """TF-IDF (word uni- and bigrams, sublinear tf, smoothed idf) projected on the top `dim` right singular
    vectors of the fitting corpus; unseen words are ignored (an all-unseen text embeds to zeros)."""

    vocab: dict[str, int]
    idf: np.ndarray
    components: np.ndarray  # (dim, vocab)
    name: str = "lsa"

    @classmethod
    def fit(cls, texts: Sequence[str], dim: int = 64) -> LSAEncoder:
        if len(texts) < 2:
            raise BadInputError(f"{len(texts)} texts to fit the LSA encoder on: expected at least 2")
        vocab: dict[str, int] = {}
        for t in texts:
            for g in _grams(t):
                vocab.setdefault(g, len(vocab))
        df = np.zeros(len(vocab))
        for t in texts:
            for g in set(_grams(t)):
                df[vocab[g]] += 1
        idf = np.log((1 + len(texts)) / (1 + df)) + 1.0
        enc = cls(vocab, idf, np.eye(1, len(vocab)), name=f"lsa{dim}")
        tfidf = enc._tfidf(texts)
        _, _, vt = np.linalg.svd(tfidf - 0.0, full_matrices=False)
        enc.components = vt[:dim]
        return enc

    def _tfidf(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(self.vocab)))
        for i, t in enumerate(texts):
            for g in _grams(t):
                j = self.vocab.get(g)
                if j is not None:
                    out[i, j] += 1
        out = np.where(out > 0, 1 + np.log(np.maximum(out, 1)), 0) * self.idf
        return _normalise(out)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return _normalise(self._tfidf(texts) @ self.components.T)

    def save(self, path: str | pathlib.Path) -> None:
        np.savez(path, idf=self.idf, components=self.components, vocab=json.dumps(self.vocab), name=self.name)

    @classmethod
    def load(cls, path: str | pathlib.Path) -> LSAEncoder:
        z = np.load(path)
        return cls(json.loads(str(z["vocab"])), z["idf"], z["components"], str(z["name"]))


@dataclasses.dataclass
class HashEncoder:
    """Signed feature hashing of word uni- and bigrams into `dim` buckets (crc32), L2-normalised."""

    dim: int = 256
    name: str = "hash256"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim))
        for i, t in enumerate(texts):
            for g in _grams(t):
                h = zlib.crc32(g.encode())
                out[i, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        return _normalise(out)


@dataclasses.dataclass
class HFTextEncoder:
    """A local model folder: `kind="clip"` (transformers CLIPModel.get_text_features, truncation at 77
    tokens as released) or `kind="sentence"` (sentence-transformers). Imported lazily."""

    path: str
    kind: str = "clip"
    batch_size: int = 32

    def __post_init__(self):
        if self.kind not in ("clip", "sentence"):
            raise BadInputError(f"text encoder kind {self.kind!r}: expected 'clip' or 'sentence'")
        if not pathlib.Path(self.path).exists():
            raise BadInputError(f"text encoder folder {self.path!r}: expected a local model folder")
        self.name = f"{self.kind}:{pathlib.Path(self.path).name}"
        self._model = None

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.kind == "sentence":
            from sentence_transformers import SentenceTransformer

            self._model = self._model or SentenceTransformer(self.path)
            return np.asarray(self._model.encode(list(texts)))
        import torch
        from transformers import CLIPModel, CLIPProcessor

        if self._model is None:
            self._model = (CLIPModel.from_pretrained(self.path), CLIPProcessor.from_pretrained(self.path))
        model, proc = self._model
        out = []
        for i in range(0, len(texts), self.batch_size):
            inputs = proc(text=list(texts[i:i + self.batch_size]), return_tensors="pt", padding=True, truncation=True)
            with torch.no_grad():
                out.append(model.get_text_features(**inputs).numpy())
        return np.concatenate(out)


# ---------------------------------------------------------------------------------------------------------
# matching

def extract_image_id(image_name: str) -> str:
    if "_" in image_name:
        parts = image_name.split("_")
        if len(parts) >= 3:
            return f"{parts[0]}_{parts[1]}"
    return image_name.replace(".jpg", "")


def match(generated: Sequence[dict[str, Any]], ground_truth: Sequence[dict[str, Any]]
          ) -> tuple[list[tuple[str, str, str]], int]:
    """[(image id, generated caption, ground-truth caption)] in the generated file's order, and the number of
    generated records skipped (no image, or no ground truth with that id)."""
    gt = {}
    for item in ground_truth:
        if item.get("images"):
            gt[extract_image_id(item["images"][0])] = item["caption"]
    pairs, skipped = [], 0
    for item in generated:
        if item.get("images"):
            key = extract_image_id(item["images"][0])
            if key in gt:
                pairs.append((key, item["caption"], gt[key]))
                continue
        skipped += 1
    return pairs, skipped


# ---------------------------------------------------------------------------------------------------------
# the released formulas, on embeddings

def paired_cosine(gen: np.ndarray, gt: np.ndarray) -> float:
    """Mean cosine of row i of gen with row i of gt (each row L2-normalised first)."""
    return float(np.mean(np.sum(_normalise(gen) * _normalise(gt), axis=-1)))


def frechet_distance(gen: np.ndarray, gt: np.ndarray, eps: float = FID_EPS) -> float:
    from scipy import linalg

    gen, gt = np.asarray(gen, np.float64), np.asarray(gt, np.float64)
    if gen.ndim != 2 or gt.ndim != 2 or gen.shape[1] != gt.shape[1] or min(len(gen), len(gt)) < 2:
        raise BadInputError(f"embeddings {gen.shape} and {gt.shape}: expected (n >= 2, d) each with the same d")
    mu1, mu2 = gen.mean(0), gt.mean(0)
    s1 = np.cov(gen, rowvar=False) + eps * np.eye(gen.shape[1])
    s2 = np.cov(gt, rowvar=False) + eps * np.eye(gt.shape[1])
    diff = mu1 - mu2
    try:
        covmean = linalg.sqrtm(s1.dot(s2))
        if np.iscomplexobj(covmean):
            covmean = covmean.real
        return float(diff.dot(diff) + np.trace(s1 + s2 - 2 * covmean))
    except Exception:  # noqa: BLE001 - the released fallback
        return float(diff.dot(diff) + np.trace(s1) + np.trace(s2) - 2 * np.sqrt(np.trace(s1) * np.trace(s2)))


def retrieval_hits(gen: np.ndarray, gt: np.ndarray, ks: Sequence[int] = (1, 5, 10)) -> dict[int, int]:
    """Per k, how many generated captions find their own ground truth among the top k of all ground truths."""
    sim = _normalise(gen) @ _normalise(gt).T
    n = len(sim)
    hits = {k: 0 for k in ks}
    for i in range(n):
        order = np.argsort(-sim[i], kind="stable")
        for k in ks:
            hits[k] += int(i in order[:k])
    return hits


def jaccard(a: str, b: str) -> float:
    wa, wb = set(a.lower().split()), set(b.lower().split())
    union = len(wa | wb)
    return 0.0 if union == 0 else len(wa & wb) / union


def lexical_similarity(gen: Sequence[str], gt: Sequence[str]) -> float:
    return float(np.mean([jaccard(a, b) for a, b in zip(gen, gt)]))


def overall_score(results: dict[str, float]) -> float:
    return float(sum(w * results.get(k, 0.0) for k, w in OVERALL_WEIGHTS.items()))


def evaluate_captions(generated: Sequence[str], ground_truth: Sequence[str], clip_encoder: TextEncoder,
                      sentence_encoder: TextEncoder | None = None) -> dict[str, Any]:
    """Every released metric on matched caption lists (same order); `sentence_encoder` (the FID's) defaults to
    `clip_encoder`. Hit counts are returned beside the rates."""
    if len(generated) != len(ground_truth) or not generated:
        raise BadInputError(f"{len(generated)} generated vs {len(ground_truth)} ground-truth captions: "
                            "expected two non-empty lists of the same length")
    sentence_encoder = sentence_encoder or clip_encoder
    e_gen, e_gt = clip_encoder.encode(list(generated)), clip_encoder.encode(list(ground_truth))
    clip = paired_cosine(e_gen, e_gt)
    hits = retrieval_hits(e_gen, e_gt)
    n = len(generated)
    out: dict[str, Any] = {
        "clip_score": clip,
        "semantic_similarity": paired_cosine(e_gen, e_gt),  # the same computation, as released
        "fid_score": frechet_distance(sentence_encoder.encode(list(generated)),
                                      sentence_encoder.encode(list(ground_truth))) if n >= 2 else float("nan"),
        "r_at_1": hits[1] / n, "r_at_5": hits[5] / n, "r_at_10": hits[10] / n,
        "hits_at_1": hits[1], "hits_at_5": hits[5], "hits_at_10": hits[10],
        "lexical_similarity": lexical_similarity(generated, ground_truth),
        "total_pairs": n, "clip_encoder": clip_encoder.name, "sentence_encoder": sentence_encoder.name,
    }
    out["overall_score"] = overall_score(out)
    return out


def evaluate_files(generated_file: str | pathlib.Path, ground_truth_file: str | pathlib.Path,
                   clip_encoder: TextEncoder, sentence_encoder: TextEncoder | None = None) -> dict[str, Any]:
    """The released entry point: two caption JSON files -> the metrics (plus matched / skipped counts)."""
    from multimodal.vasevqa.data import load_caption_json

    pairs, skipped = match(load_caption_json(generated_file), load_caption_json(ground_truth_file))
    if not pairs:
        raise BadInputError(f"no generated caption in {str(generated_file)!r} matched an image id of "
                            f"{str(ground_truth_file)!r}")
    out = evaluate_captions([p[1] for p in pairs], [p[2] for p in pairs], clip_encoder, sentence_encoder)
    out["skipped"] = skipped
    return out

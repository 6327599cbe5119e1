"""Configs of the synthetic IndicVisionBench experiment: train the small VLM on rendered OCR / VQA / MMT data
with deliberately unequal amounts per script, then score it (and the constant baseline) with the harness.

Per-language counts are given in `multimodal.indicvision.synthetic.SYNTHETIC_LANGUAGES` order (Hindi /
Devanagari, Bengali, Tamil); the test sets are equal per language.

- ``iclr26 run indicvision --preset tiny``  (seconds; a smoke run of a few steps)
- ``iclr26 run indicvision --preset demo``  (10000 steps, 374 s wall on the idle 2-core CPU; OCR anls_char
  Hindi / Bengali / Tamil 8.2 / 19.3 / 78.3 against the constant's 95.1 / 86.7 / 86.2: the conv stem and 4x the
  OCR renderings made it read; the benchmark's numbers are in benchmarks/results/indicvision.json)
"""

from __future__ import annotations

import dataclasses

from core.config import check


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    seed: int = 0
    # training data per language (Hindi, Bengali, Tamil): deliberately unequal
    ocr_train: tuple[int, ...] = (4800, 1600, 400)  # OCR word images per language (~120 / 40 / 10 per lexicon word)
    vqa_train: tuple[int, ...] = (300, 100, 25)  # VQA scenes (all six question types) per language
    mmt_train: tuple[int, ...] = (300, 100, 25)  # MMT captioned images per language (that language's reference only)
    test_per_language: int = 50       # test rows per language of each task (OCR, VQA, MMT)
    ocr_lexicon: int = 40             # words per script the OCR images show (0: a fresh random word each)
    image_size: int = 48              # rendered image side, in pixels
    # model
    patch_size: int = 8               # ViT patch side, in pixels (divides image_size)
    vit_width: int = 48               # ViT width (its heads: width // 16, at least 1)
    vit_depth: int = 1                # ViT blocks
    vit_stem: str = "conv"            # "conv" (stride-2 3x3 convolutions; reads glyph strokes) or "patch" (ViT's)
    hidden_size: int = 64             # language-model width
    num_layers: int = 2               # language-model layers
    num_heads: int = 4                # language-model attention heads
    # training
    steps: int = 10000
    batch_size: int = 16
    lr: float = 2e-3
    warmup_steps: int = 100
    length_bucket: int = 16           # batches padded to a multiple of this (a few compiles); 0: all to the longest
    eval_batch_size: int = 64         # prompts per generation batch when the harness scores
    ckpt_every: int = 250             # steps between checkpoints of a run folder's training (resumed on a rerun)
    plot: bool = True                 # write loss.png and ocr_anls_char.png in the run folder

    def __post_init__(self):
        for name in ("ocr_train", "vqa_train", "mmt_train"):
            value = getattr(self, name)
            check(len(value) == 3 and all(isinstance(v, int) and v >= 1 for v in value), name, value,
                  "three positive counts (Hindi, Bengali, Tamil)")
        for name in ("test_per_language", "image_size", "patch_size", "vit_width", "hidden_size", "batch_size",
                     "eval_batch_size", "ckpt_every"):
            check(getattr(self, name) >= 1, name, getattr(self, name), "a positive integer")
        check(self.image_size % self.patch_size == 0, "patch_size", self.patch_size,
              f"a divisor of image_size={self.image_size}")
        check(self.num_heads >= 1 and self.hidden_size % self.num_heads == 0, "num_heads", self.num_heads,
              f"a divisor of hidden_size={self.hidden_size}")
        check(self.lr > 0, "lr", self.lr, "a positive learning rate")
        check(self.vit_stem in ("conv", "patch"), "vit_stem", self.vit_stem, "'conv' or 'patch'")
        if self.vit_stem == "conv":
            check(self.patch_size & (self.patch_size - 1) == 0 and self.patch_size >= 2, "patch_size",
                  self.patch_size, "a power of two with vit_stem='conv' (each stem layer halves the image)")


def presets() -> dict[str, Config]:
    return {
        "tiny": Config(ocr_train=(16, 8, 4), vqa_train=(4, 2, 2), mmt_train=(4, 2, 2), test_per_language=3,
                       image_size=24, patch_size=8, vit_width=16, vit_depth=1, hidden_size=16, num_layers=1,
                       num_heads=2,
                       steps=3, batch_size=8, warmup_steps=1, length_bucket=0, eval_batch_size=16),
        "demo": Config(),
        "benchmark": Config(test_per_language=40),
    }

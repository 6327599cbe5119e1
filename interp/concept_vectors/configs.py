"""Config and presets of the small-scale concept-vector experiment.

Presets (commands and expected runtimes on 2 shared CPU cores):
- `tiny`: `iclr26 run concept_vectors --preset tiny` (~1 min): smoke test, numbers meaningless.
- `demo`: `iclr26 run concept_vectors --preset demo` (6 min 17 s cold on the idle 2-core machine): 4 layers x
  8 heads of width 32, d = 64 (367k parameters), 16 entities, half the prompts MC, 1,500 steps of batch 16;
  CIE / RSA heat maps, vector cosines and the steering sweep. The benchmark trains this model 8,000 steps.
- `paper`: the notes' model (4 layers, d = 128, 8 heads, ~1 M parameters), 64 entities, longer training.
"""

from __future__ import annotations

import dataclasses

from core.config import check
from core.lm.configs import LMConfig
from interp.concept_vectors.world import World, WorldConfig

STEER_WEIGHTS = (1.0, 5.0, 10.0)


def small_model(world: WorldConfig, *, hidden: int, heads: int, layers: int = 4, kv_heads: int | None = None,
                head_dim: int | None = None) -> LMConfig:
    """A Qwen2-style decoder. `head_dim` defaults to hidden // heads; the presets widen it to 32 (as Qwen3 decouples
    it from the width) because with 8-dimensional heads the decoder never learned the MC format's option lookup."""
    return LMConfig(architecture="qwen2", vocab_size=World(world).vocab_size, hidden_size=hidden,
                    intermediate_size=2 * hidden, num_layers=layers, num_heads=heads,
                    num_kv_heads=kv_heads or heads, head_dim=head_dim or hidden // heads, tie_word_embeddings=True,
                    max_position_embeddings=256)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CVConfig:
    world: WorldConfig = WorldConfig(mc_share=0.5)
    model: LMConfig = small_model(WorldConfig(), hidden=128, heads=8, head_dim=32)
    # training
    steps: int = 3000
    batch_size: int = 32
    seq_len: int = 128  # tokens per packed training row
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01
    log_every: int = 100
    # analysis (notes: 50 extraction prompts, 100 intervention prompts, 5 shots, 5 heads, w in {1, 5, 10})
    shots: int = 5  # demonstrations per extraction and ambiguous-steering prompt
    num_prompts: int = 50  # per cell, for mean activations, CIE and RSA
    num_steer_prompts: int = 100  # zero-shot / ambiguous prompts per concept
    top_k: int = 5  # heads per vector: top CIE (FV), top concept-RSA (CV), or random
    steer_weights: tuple[float, ...] = STEER_WEIGHTS  # steering strengths w swept at every layer
    sweep_batch: int = 8  # heads vmapped together in the CIE sweep
    seed: int = 0

    def __post_init__(self):
        check(self.model.vocab_size >= World(self.world).vocab_size, "model.vocab_size", self.model.vocab_size,
              f">= {World(self.world).vocab_size} (the world's vocabulary)")
        for name in ("steps", "batch_size", "log_every", "num_prompts", "num_steer_prompts", "sweep_batch"):
            check(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        check(self.seq_len >= 16 * self.world.max_shots + 15, "seq_len", self.seq_len,
              f">= {16 * self.world.max_shots + 15} (the longest training prompt)")
        check(2 <= self.shots <= self.world.max_shots, "shots", self.shots,
              f"in [2, world.max_shots={self.world.max_shots}]")
        n_heads = self.model.num_layers * self.model.num_heads
        check(1 <= self.top_k < n_heads, "top_k", self.top_k, f"in [1, {n_heads}) (the model's heads)")
        check(len(self.steer_weights) > 0 and all(w > 0 for w in self.steer_weights), "steer_weights",
              self.steer_weights, "a non-empty tuple of positive weights")
        check(self.lr > 0, "lr", self.lr, "> 0")


def presets() -> dict[str, CVConfig]:
    tiny_world = WorldConfig(num_entities=16, num_categories=4, max_shots=3)
    tiny = CVConfig(world=tiny_world, model=small_model(tiny_world, hidden=32, heads=4, layers=2), steps=20,
                    batch_size=8, seq_len=64, log_every=10, shots=3, num_prompts=6, num_steer_prompts=8, top_k=2,
                    sweep_batch=8, warmup=5)
    demo_world = WorldConfig(num_entities=16, num_categories=4, mc_share=0.5)
    demo = CVConfig(world=demo_world, model=small_model(demo_world, hidden=64, heads=8, head_dim=32), steps=1500,
                    batch_size=16, num_prompts=24, num_steer_prompts=32, log_every=50)
    return {"tiny": tiny, "demo": demo, "paper": CVConfig()}

"""Configs and presets of C2C on the knowledge-split world (and the `paper` preset's HF path).

Presets (commands and runtimes on 2 shared CPU cores):
- `tiny`: `iclr26 run c2c --preset tiny` (1 CPU-minute; 6.5 min wall on the loaded shared machine): 1-2 layer
  models, a few steps; a smoke test, numbers meaningless.
- `demo`: `iclr26 run c2c --preset demo` (~10 min wall on the shared 2-core machine at load ~14, a few
  CPU-minutes): receiver 4 layers x 128 (4 heads / 2 KV heads), sharer 6 layers x 192 (6 heads), both trained
  from scratch, then the fuser (hidden 256, 200 steps) with both frozen, and the role-swapped fuser; expect C2C
  near 0.9-1.0 on held-out two-hop questions against ~0.3 for the receiver alone.
- `paper`: receiver Qwen3-0.6B and sharer Qwen2.5-0.5B-Instruct from local HF folders (`receiver_path`,
  `sharer_path`), fuser hidden 1024 x 3 blocks, AdamW 1e-4; needs a GPU and the weights (not run here).
"""

from __future__ import annotations

import dataclasses

from core.config import check
from core.lm.configs import LMConfig
from interp.c2c.fuser import MAPPINGS

KEY_FRAMES = ("rotated", "unrotated")
ALIGN_STRATEGIES = ("first", "longest")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorldConfig:
    num_recv: int = 12  # entities whose city both models know (the receiver learns two-hop on them)
    num_hint: int = 8  # entities used only in the receiver's hinted examples (teach hint reading)
    num_fuse: int = 32  # sharer-only-city entities the fuser trains on
    num_test: int = 16  # sharer-only-city entities held out for evaluation
    num_cities: int = 12  # cities (even, >= 4); the sharer knows the colours of the first half
    num_colours: int = 6  # colours (>= 2), each city has one


@dataclasses.dataclass(frozen=True, kw_only=True)
class LMTrainConfig:
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01

    def __post_init__(self):
        for name in ("steps", "batch_size"):
            check(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        check(self.lr > 0, "lr", self.lr, "> 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FuserConfig:
    """The paper's fuser: hidden 1024, intermediate 1024, 3 FFN blocks (trunk, projection, weight), dropout 0.1;
    gate temperature annealed exponentially 1.0 -> 0.001 over `anneal_steps` (1,929 = one epoch in the paper;
    0 = this run's fuser steps)."""

    hidden: int = 1024  # width of each layer fuser's trunk
    intermediate: int = 1024  # hidden width of each FFN block
    dropout: float = 0.1  # dropout inside the FFN blocks (training only)
    gate_init: float = 0.0  # initial per-layer gate logit (inference opens the gate where it is > 0)
    temperature_start: float = 1.0  # Gumbel-sigmoid gate temperature at step 0
    temperature_end: float = 0.001  # gate temperature reached at anneal_steps, then held
    anneal_steps: int = 1929  # steps of the exponential temperature anneal (0 = the fuser's steps)
    mapping: str = "last_aligned"  # receiver-to-sharer layer map: last_aligned aligns the stacks' last layers
    key_frame: str = "rotated"  # fuse the cached (post-RoPE) keys as the reference does, or the un-rotated ones
    include_response: bool = False  # also fuse the response tokens' cache (the default fuses the prompt only)
    steps: int = 1929
    batch_size: int = 256
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1  # fraction of the fuser's steps spent in linear lr warm-up
    clip_norm: float = 1.0  # global gradient-norm clip

    def __post_init__(self):
        for name in ("hidden", "intermediate", "steps", "batch_size"):
            check(getattr(self, name) > 0, f"fuser.{name}", getattr(self, name), "> 0")
        check(0.0 <= self.dropout < 1.0, "fuser.dropout", self.dropout, "in [0, 1)")
        check(self.temperature_start > 0 and self.temperature_end > 0, "fuser.temperature_end",
              self.temperature_end, "> 0 (and temperature_start > 0)")
        check(self.anneal_steps >= 0, "fuser.anneal_steps", self.anneal_steps, ">= 0 (0 = the fuser's steps)")
        check(self.mapping in MAPPINGS, "fuser.mapping", self.mapping, f"one of {MAPPINGS}")
        check(self.key_frame in KEY_FRAMES, "fuser.key_frame", self.key_frame, f"one of {KEY_FRAMES}")
        check(self.lr > 0, "fuser.lr", self.lr, "> 0")
        check(0.0 <= self.warmup_fraction < 1.0, "fuser.warmup_fraction", self.warmup_fraction, "in [0, 1)")

    @property
    def anneal(self) -> int:
        return self.anneal_steps or self.steps


RECEIVER = LMConfig(architecture="qwen3", vocab_size=160, hidden_size=128, intermediate_size=384, num_layers=4,
                    num_heads=4, num_kv_heads=2, head_dim=32, tie_word_embeddings=True, attention_bias=False)
SHARER = LMConfig(architecture="qwen2", vocab_size=160, hidden_size=192, intermediate_size=576, num_layers=6,
                  num_heads=6, num_kv_heads=6, head_dim=32, tie_word_embeddings=True, rope_theta=1e6)


@dataclasses.dataclass(frozen=True, kw_only=True)
class C2CConfig:
    world: WorldConfig = WorldConfig()
    receiver: LMConfig = RECEIVER
    sharer: LMConfig = SHARER
    receiver_train: LMTrainConfig = LMTrainConfig()
    sharer_train: LMTrainConfig = LMTrainConfig()
    fuser: FuserConfig = FuserConfig(hidden=256, intermediate=256, steps=600, batch_size=64, lr=1e-3,
                                     anneal_steps=0)
    swap_roles: bool = True  # also train a fuser with the roles swapped (the small model receives)
    latency_queries: int = 24  # single-query timings per method, interleaved
    # the timed generation lengths: the reference's T2T writes a background text of up to max_new_tokens = 64
    # (its eval recipe) and both arms then generate an answer of up to 64 tokens
    latency_hint_tokens: int = 64  # tokens the sharer writes in the timed T2T (the reference's 64)
    latency_answer_tokens: int = 64  # answer tokens both timed arms write (the reference's 64)
    seed: int = 0
    # the `paper` preset: local HF folders (config.json, safetensors, tokenizer.json)
    receiver_path: str = ""  # the receiver's local HF folder (set with sharer_path; empty = toy world)
    sharer_path: str = ""  # the sharer's local HF folder (set with receiver_path; empty = toy world)
    align_strategy: str = "first"  # cross-tokenizer alignment of a receiver token to sharer tokens
    instruction_samples: int = 4000  # generated instruction/response pairs the HF fuser trains on (1 % test)

    def __post_init__(self):
        check(self.latency_queries >= 2, "latency_queries", self.latency_queries, ">= 2")
        check(self.latency_hint_tokens >= 1, "latency_hint_tokens", self.latency_hint_tokens, ">= 1")
        check(self.latency_answer_tokens >= 1, "latency_answer_tokens", self.latency_answer_tokens, ">= 1")
        check(self.align_strategy in ALIGN_STRATEGIES, "align_strategy", self.align_strategy,
              f"one of {ALIGN_STRATEGIES}")
        check(bool(self.receiver_path) == bool(self.sharer_path), "sharer_path", self.sharer_path,
              "set together with receiver_path (both HF folders) or neither")

    @property
    def uses_hf(self) -> bool:
        return bool(self.receiver_path)


def presets() -> dict[str, C2CConfig]:
    tiny_lm = LMTrainConfig(steps=30, batch_size=16, warmup=5)
    tiny = C2CConfig(
        world=WorldConfig(num_recv=4, num_hint=4, num_fuse=4, num_test=4, num_cities=4, num_colours=2),
        receiver=dataclasses.replace(RECEIVER, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                                     num_kv_heads=1, head_dim=16),
        sharer=dataclasses.replace(SHARER, hidden_size=48, intermediate_size=96, num_layers=2, num_heads=3,
                                   num_kv_heads=3, head_dim=16),
        receiver_train=tiny_lm, sharer_train=tiny_lm,
        fuser=FuserConfig(hidden=32, intermediate=32, steps=10, batch_size=16, lr=1e-3, anneal_steps=0),
        latency_queries=2, latency_hint_tokens=3, latency_answer_tokens=2)
    demo = C2CConfig(receiver_train=LMTrainConfig(steps=200, batch_size=32, lr=3e-3, warmup=30),
                     sharer_train=LMTrainConfig(steps=450, batch_size=32, lr=6e-3, warmup=30),
                     fuser=FuserConfig(hidden=256, intermediate=256, steps=200, batch_size=32, lr=1e-3,
                                       anneal_steps=0))
    paper = C2CConfig(receiver_path="/models/Qwen3-0.6B", sharer_path="/models/Qwen2.5-0.5B-Instruct",
                      fuser=FuserConfig(), swap_roles=False)
    return {"tiny": tiny, "demo": demo, "paper": paper}

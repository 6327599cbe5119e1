"""Config and presets of PTA-lite: a procedural corpus, a direct decoder, a planner, an actioner with and
without the requirement memory, and the requirement tagger, all trained from scratch.

Equal compute: the direct model trains for planner_steps + actioner_steps steps on the same batch size and the
same decoder size as the planner and the actioner (the tagger's few thousand MLP steps are extra, < 1 % of
the FLOPs).

Presets (2 shared CPU cores):
- `tiny`: `iclr26 run cad --preset tiny` (~1 min): smoke test, numbers meaningless.
- `demo`: `iclr26 run cad --preset demo` (~4 min): d = 64, 2 layers, 3,000 parts, 200 planner and 330
  actioner steps at batch 8 (direct: 530); renders and per-level metrics of every arm. The benchmark runs the
  same models with 1,000 actioner steps (direct: 1,200).
- `paper`: the notes' PTA-lite scale (50k parts, d = 128, 4 layers) with the planner an LLM from a local
  HuggingFace folder (`planner_path`, default /models/Qwen2.5-1.5B-Instruct; fully fine-tuned for 1,000 steps at
  lr 1e-5); needs the weights and a GPU (not run here). `--set planner_path=` gives the from-scratch planner.
  With an LLM planner the direct decoder still gets planner + actioner steps, which is not equal compute (a
  1.5B planner costs far more per step): the comparison is then PTA as the paper builds it against direct.
"""

from __future__ import annotations

import dataclasses

from core.config import check
from core.lm.configs import LMConfig
from generative.cad.tokens import VOCAB

ARMS = ("direct", "pta", "pta_no_copy", "pta_no_ram", "pta_gold_plan")
VOCAB_PADDED = (VOCAB + 7) // 8 * 8


def _lm(hidden: int, layers: int, heads: int) -> LMConfig:
    return LMConfig(architecture="qwen2", vocab_size=VOCAB_PADDED, hidden_size=hidden, intermediate_size=3 * hidden,
                    num_layers=layers, num_heads=heads, num_kv_heads=max(1, heads // 2), head_dim=hidden // heads,
                    tie_word_embeddings=True, max_position_embeddings=512)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CADConfig:
    model: LMConfig = _lm(128, 4, 4)
    n_train: int = 50000  # parts; each gives one example per instruction level
    n_test: int = 1000  # parts; evaluated at every level
    max_extrusions: int = 3  # extrusions per part at most: the base plate and up to max_extrusions - 1 features
    seq_len: int = 256  # tokens per packed training row (>= 232, the longest actioner example with its memory)
    batch_size: int = 32
    planner_steps: int = 2000  # planner (text -> plan) training steps
    actioner_steps: int = 6000  # training steps of each actioner (with and without the requirement memory)
    direct_steps: int = 0  # 0 = planner_steps + actioner_steps (equal compute)
    tagger_steps: int = 1500  # requirement (RAM) tagger training steps
    planner_path: str = ""  # local HF folder fine-tuned as the planner (empty: a from-scratch decoder)
    planner_lr: float = 1e-5  # learning rate of the LLM planner's full fine-tuning (with planner_path)
    planner_seq_len: int = 256  # tokens per packed training row of the LLM planner (with planner_path)
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    eval_batch: int = 100  # prompts per greedy-decoding batch at evaluation
    chamfer_points: int = 2000  # surface points sampled per mesh for the Chamfer distance
    arms: tuple[str, ...] = ARMS  # arms to train and score: direct, pta, pta_no_copy, pta_no_ram, pta_gold_plan
    renders: int = 6  # test parts rendered per arm (PNG)
    seed: int = 0
    log_every: int = 100

    def __post_init__(self):
        check(self.model.vocab_size >= VOCAB, "model.vocab_size", self.model.vocab_size, f">= {VOCAB}")
        for name in ("n_train", "n_test", "seq_len", "batch_size", "planner_steps", "actioner_steps", "tagger_steps",
                     "eval_batch", "chamfer_points", "log_every"):
            check(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        check(self.direct_steps >= 0, "direct_steps", self.direct_steps, ">= 0 (0 = planner + actioner steps)")
        check(1 <= self.max_extrusions <= 3, "max_extrusions", self.max_extrusions, "1..3")
        check(self.seq_len >= 232, "seq_len", self.seq_len, ">= 232 (the longest actioner example with its memory)")
        check(self.lr > 0, "lr", self.lr, "> 0")
        check(self.planner_lr > 0, "planner_lr", self.planner_lr, "> 0")
        check(self.planner_seq_len > 0, "planner_seq_len", self.planner_seq_len, "> 0")
        check(len(self.arms) > 0 and all(a in ARMS for a in self.arms), "arms", self.arms, f"a subset of {ARMS}")
        check(self.renders >= 0, "renders", self.renders, ">= 0")

    @property
    def total_direct_steps(self) -> int:
        return self.direct_steps or self.planner_steps + self.actioner_steps


def presets() -> dict[str, CADConfig]:
    # tiny: every decoder trains 3 steps (one compiled step; not equal compute, the numbers mean nothing)
    tiny = CADConfig(model=_lm(32, 1, 2), n_train=64, n_test=4, planner_steps=3, actioner_steps=3, direct_steps=3,
                     tagger_steps=20,
                     batch_size=4, eval_batch=16, chamfer_points=256, renders=2, log_every=2, warmup=2)
    # demo: the planner gets 200 of the 530 steps (at 80 it wrote the most common base for every part)
    demo = CADConfig(model=_lm(64, 2, 4), n_train=3000, n_test=30, planner_steps=200, actioner_steps=330,
                     tagger_steps=600, batch_size=8, lr=3e-3, eval_batch=60, chamfer_points=1000, log_every=50,
                     warmup=30)
    return {"tiny": tiny, "demo": demo, "paper": CADConfig(planner_path="/models/Qwen2.5-1.5B-Instruct",
                                                           planner_steps=1000)}

"""Config and presets of the small-model experiment: a from-scratch `core.lm` decoder trained on forward
execution and interventional items (r revealed) of the `if_else` training templates, then evaluated on the
interventional, counterfactual and factual variants of every split.

Presets (commands and expected runtimes on 2 shared CPU cores):
- `tiny`: `iclr26 run counterfactuals --preset tiny` (~30 s): smoke test, numbers meaningless.
- `demo`: `iclr26 run counterfactuals --preset demo` (~40 s idle, more under load): a 2-layer d = 64 model,
  250 steps of batch 16 with execution traces on level-1 items; expect interventional EM above counterfactual
  EM on if_else.
- `paper`: L = 4, d = 128, 3000 steps on levels 1-3 with control-flow traces, Fourier number embeddings and
  the execution of every code family (hours on 2 CPU cores; the benchmark runs a scaled-down version, see
  `benchmarks/counterfactuals.py`).
"""

from __future__ import annotations

import dataclasses

from core.config import check
from core.lm.configs import LMConfig
from rl_tools.counterfactuals.data import TRACE_STYLES, WORDS

VOCAB = len(WORDS)
NUMBER_INITS = ("random", "fourier")
EXEC_FAMILIES = ("if_else_long", "while", "multi_r", "math")  # code families besides if_else
QWEN_DIR = "/models/Qwen2.5-1.5B-Instruct"  # the cf_sft / cf_rl paper presets' chat model (the user's weights)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CFConfig:
    model: LMConfig = LMConfig(architecture="qwen2", vocab_size=VOCAB, hidden_size=128, intermediate_size=384,
                               num_layers=4, num_heads=4, num_kv_heads=2, head_dim=32, tie_word_embeddings=True)
    n_train: int = 20000  # if_else_train items (each gives a factual and an interventional example)
    n_eval: int = 300  # items per evaluation split
    max_level: int = 3  # difficulty levels 1..max_level
    trace: bool = False  # train on execution traces before the answer (data.py)
    trace_style: str = "values"  # "values" (y after each assignment), "steps" (every operation) or "flow"
    # (every operation, the program shown as a labelled control-flow graph): data.py
    number_init: str = "random"  # "fourier": number words start at cos/sin features of their value (train.py)
    exec_families: tuple[str, ...] = ()  # other code families whose execution the base also learns
    n_exec: int = 2000  # items per family in exec_families (programs disjoint from the evaluation's)
    seq_len: int = 160  # packed training rows (longer examples are dropped)
    batch_size: int = 32
    steps: int = 3000
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    eval_batch: int = 64  # items per batch of the greedy evaluation
    seed: int = 0
    log_every: int = 100

    def __post_init__(self):
        check(self.model.vocab_size >= VOCAB, "model.vocab_size", self.model.vocab_size,
              f">= {VOCAB} (the compact vocabulary)")
        for name in ("n_train", "n_eval", "seq_len", "batch_size", "steps", "eval_batch", "log_every"):
            check(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        check(self.max_level in (1, 2, 3), "max_level", self.max_level, "1, 2 or 3")
        check(self.seq_len >= 96, "seq_len", self.seq_len, ">= 96 (the longest training example)")
        check(self.lr > 0, "lr", self.lr, "> 0")
        check(self.trace_style in TRACE_STYLES, "trace_style", self.trace_style, f"one of {TRACE_STYLES}")
        check(self.number_init in NUMBER_INITS, "number_init", self.number_init, f"one of {NUMBER_INITS}")
        check(set(self.exec_families) <= set(EXEC_FAMILIES), "exec_families", self.exec_families,
              f"a subset of {EXEC_FAMILIES}")
        check(self.n_exec > 0, "n_exec", self.n_exec, "> 0")


def presets() -> dict[str, CFConfig]:
    small = LMConfig(architecture="qwen2", vocab_size=VOCAB, hidden_size=64, intermediate_size=192, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=16, tie_word_embeddings=True)
    tiny = CFConfig(model=LMConfig(architecture="qwen2", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                   num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, tie_word_embeddings=True),
                    n_train=200, n_eval=16, steps=10, batch_size=8, log_every=5, eval_batch=16, warmup=2)
    # batch 16: 32 s warm on the idle 2 cores against 46 s at batch 32, the same interventional > counterfactual
    # order on if_else (0.25 vs 0.15 EM; 0.23 vs 0.17 at 32)
    demo = CFConfig(model=small, n_train=3000, n_eval=48, steps=250, batch_size=16, log_every=50, max_level=1,
                    trace=True)
    paper = CFConfig(trace=True, trace_style="flow", number_init="fourier", exec_families=EXEC_FAMILIES,
                     seq_len=256)
    return {"tiny": tiny, "demo": demo, "paper": paper}


def train_presets() -> dict[str, dict[str, object]]:
    """Presets of the SFT-vs-RL experiments `cf_sft` and `cf_rl` (`sft_rl.py`); each runs the base first.

    - `tiny`: smoke test (~1 min).
    - `demo`: the demo base at batch 32 (250 steps, level 1, traces), then 150 SFT steps or 15 GRPO steps (G = 8);
      under 10 min on 2 CPU cores each.
    - `paper`: the paper's setting: Qwen2.5-1.5B-Instruct from `model_dir` (a HuggingFace folder the user
      supplies; `--set model_dir=...` for another path or size) on the `paper` data (levels 1-3), English
      prompts and teacher traces (`hf.py`), 1000 full fine-tuning SFT steps of 8 rows x 2048 tokens, or 200
      GRPO steps with the paper's 16 prompts x 24 rollouts; a GPU run, never run here (no weights, no GPU).
    """
    from rl_tools.counterfactuals.sft_rl import CFTrainConfig

    base = presets()
    tiny_base = dataclasses.replace(base["tiny"], trace=True, max_level=1, n_eval=8)
    demo_base = dataclasses.replace(base["demo"], batch_size=32)  # as before the counterfactuals demo's batch 16
    out: dict[str, dict[str, object]] = {}
    for arm in ("sft", "rl"):
        out[arm] = {
            "tiny": CFTrainConfig(base=tiny_base, arms=(arm,), sft_steps=3, rl_steps=2, prompts_per_step=2,
                                  group_size=4, rl_max_new_tokens=8, eval_max_new_tokens=12),
            "demo": CFTrainConfig(base=demo_base, arms=(arm,), sft_steps=150, rl_steps=15, prompts_per_step=8,
                                  group_size=8, eval_max_new_tokens=96),
            "paper": CFTrainConfig(base=dataclasses.replace(base["paper"], eval_batch=32), arms=(arm,),
                                   model_dir=QWEN_DIR, sft_steps=1000, sft_batch=8, sft_seq_len=2048, sft_lr=1e-5,
                                   rl_steps=200, prompts_per_step=16, group_size=24, rl_lr=1e-6,
                                   rl_max_new_tokens=1024, eval_max_new_tokens=1024),
        }
    return out

"""TRM experiment configs: the world, the policy / TRM trunk, behaviour cloning, TRM training, RL arms.

Presets:
- `tiny`: `iclr26 run trm --preset tiny`, ~1 min on 2 CPU cores; a smoke run of every stage (2 RL steps).
- `demo`: `iclr26 run trm --preset demo`, a few minutes on an idle 2-core CPU: BC, the TRM (AUC on held-out
  calls), outcome-only GRPO vs TRM + turn-level GRPO for one seed. Measured (benchmarks/trm.py, 3 seeds): BC
  start 0.20-0.35 sampled EM, TRM AUC 0.72-0.75 on scripted calls and 0.54-0.66 on the policy's calls.
- `paper`: the reproduction scale of methods/trm.md (d = 128, 4 layers, 10k TRM trajectories, every arm,
  5 seeds, 200 RL steps); hours on 2 CPU cores, meant for a GPU.
"""

from __future__ import annotations

import dataclasses

from core.config import check
from core.lm.configs import LMConfig
from rl_tools.trm.data import LABEL_KINDS
from rl_tools.trm.rl import ARMS
from rl_tools.trm.world import World, WorldConfig


def policy_model(width: int = 64, layers: int = 2, world: WorldConfig = WorldConfig()) -> LMConfig:
    """The decoder for the policy and the TRM trunk (Qwen2 layout, tied embeddings) over ToolWorld's vocabulary."""
    heads = max(2, width // 32)
    return LMConfig(architecture="qwen2", vocab_size=World(world).tokenizer.vocab_size, hidden_size=width,
                    intermediate_size=2 * width, num_layers=layers, num_heads=heads, num_kv_heads=heads,
                    head_dim=width // heads, tie_word_embeddings=True, max_position_embeddings=256)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TRMConfig:
    """One experiment: BC policy -> TRM -> RL arms, per seed.

    clean_fraction: share of BC traces without a corruption (sets the starting success rate).
    label_kind: the TRM target, "product" (necessity x quality, the paper's), "quality" or "necessity".
    label_noise: each necessity / quality bit flipped with this probability (an imperfect LLM judge).
    alpha_grpo / alpha_ppo: the weight of the call rewards (GRPO: after normalisation).
    eval_questions x eval_samples held-out episodes at the sampling temperature measure EM and the calls.
    """

    world: WorldConfig = WorldConfig(num_entities=32, max_value=49)
    model: LMConfig = policy_model(64, 2, WorldConfig(num_entities=32, max_value=49))
    seq_len: int = 64  # tokens per BC / TRM row, and most response tokens of a rollout
    max_calls: int = 7  # tool calls per trace the TRM is trained and scored on, at most
    clean_fraction: float = 0.1
    num_bc: int = 6000  # scripted traces (oracle + corrupted) the policy is behaviour-cloned on
    bc_steps: int = 600  # behaviour-cloning steps
    bc_batch: int = 32  # behaviour-cloning batch size
    bc_lr: float = 3e-3  # behaviour-cloning peak learning rate (warm-up, cosine decay)
    num_trm: int = 3000  # labelled scripted traces the TRM trains on
    num_trm_eval: int = 500  # held-out labelled traces (noise-free) for the TRM's AUC
    trm_steps: int = 200  # TRM training steps
    trm_batch: int = 32  # TRM batch size
    trm_lr: float = 1e-3  # TRM peak learning rate (warm-up, cosine decay)
    label_kind: str = "product"
    label_noise: float = 0.0
    arms: tuple[str, ...] = ("grpo_outcome", "grpo_trm_turn")  # RL arms run from the same BC start (rl.ARMS)
    alpha_grpo: float = 0.2  # weight of the call rewards in the GRPO arms (after normalisation)
    alpha_ppo: float = 0.2  # weight of the call rewards in the PPO arms
    seeds: tuple[int, ...] = (0,)
    num_prompts: int = 512  # training questions the RL arms draw from
    rl_steps: int = 32  # RL updates per arm and seed
    prompts_per_step: int = 16  # questions per RL update
    group_size: int = 8  # sampled episodes per question (the GRPO group)
    rl_lr: float = 1e-3  # RL learning rate
    kl_coef: float = 0.0  # weight of the KL penalty to the reference policy (0: off)
    temperature: float = 0.7  # sampling temperature of RL rollouts and held-out evaluation
    max_turns: int = 8  # turns (one action each) per episode, at most
    max_new_tokens: int = 6  # tokens per action, at most
    eval_questions: int = 128  # held-out questions for EM and call metrics
    eval_samples: int = 4  # sampled episodes per held-out question

    def __post_init__(self):
        check(0.0 <= self.clean_fraction <= 1.0, "clean_fraction", self.clean_fraction, "in [0, 1]")
        check(self.label_kind in LABEL_KINDS, "label_kind", self.label_kind, f"one of {LABEL_KINDS}")
        check(0.0 <= self.label_noise < 0.5, "label_noise", self.label_noise, "in [0, 0.5)")
        check(len(self.arms) >= 1 and all(a in ARMS for a in self.arms), "arms", self.arms,
              f"names from {sorted(ARMS)}")
        check(len(self.seeds) >= 1, "seeds", self.seeds, "at least one seed")
        check(self.model.vocab_size == World(self.world).tokenizer.vocab_size, "model.vocab_size",
              self.model.vocab_size, f"ToolWorld's vocabulary size {World(self.world).tokenizer.vocab_size}")
        for name in ("num_bc", "bc_steps", "bc_batch", "num_trm", "num_trm_eval", "trm_steps", "trm_batch",
                     "num_prompts", "rl_steps", "prompts_per_step", "group_size", "eval_questions", "eval_samples",
                     "max_turns", "max_new_tokens", "max_calls"):
            check(getattr(self, name) >= 1, name, getattr(self, name), ">= 1")
        check(self.group_size >= 2, "group_size", self.group_size, ">= 2 (GRPO needs a group)")
        check(self.seq_len >= 56, "seq_len", self.seq_len, ">= 56 (the longest scripted trace)")
        check(self.max_new_tokens >= 5, "max_new_tokens", self.max_new_tokens, ">= 5 (the longest action)")
        check(self.alpha_grpo >= 0 and self.alpha_ppo >= 0, "alpha_grpo", (self.alpha_grpo, self.alpha_ppo),
              "non-negative alphas")
        check(self.prompts_per_step <= self.num_prompts, "prompts_per_step", self.prompts_per_step,
              f"at most num_prompts={self.num_prompts}")


def presets() -> dict[str, TRMConfig]:
    tiny = TRMConfig(world=WorldConfig(num_entities=16, max_value=20),
                     model=policy_model(32, 1, WorldConfig(num_entities=16, max_value=20)),
                     num_bc=128, bc_steps=10, num_trm=64, num_trm_eval=32, trm_steps=5, trm_batch=16,
                     arms=("grpo_trm_turn", "ppo_trm"), num_prompts=16, rl_steps=2,
                     prompts_per_step=2, group_size=4, eval_questions=4, eval_samples=2)
    demo = TRMConfig()
    paper = TRMConfig(world=WorldConfig(), model=policy_model(128, 4), num_bc=20000, bc_steps=3000, num_trm=10000,
                      num_trm_eval=2000, trm_steps=2000, arms=tuple(ARMS), seeds=(0, 1, 2, 3, 4), rl_steps=200,
                      prompts_per_step=16, group_size=8, eval_questions=512)
    return {"tiny": tiny, "demo": demo, "paper": paper}

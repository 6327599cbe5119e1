"""rl_toy: a verifiable task that shows the RL loop learns (issue #29 part 5).

A tiny `core.lm` decoder is first fitted by SFT to *imperfect* solutions of string reversal: a fraction
`label_noise` of the training answers copies the sequence instead of reversing it (a consistent wrong
solution, as a weaker model's traces would be), so the SFT model's greedy exact match is well below 1 while
its samples still find the right answer often enough for a reward to teach. Then GRPO and PPO
(`core.rl.trainer`) train it against an exact-match reward on the
true reversal, with a KL penalty to the SFT model. Measured per seed: greedy exact match on held-out prompts
before and after RL, and the exact per-token KL(policy || SFT) on the policy's own samples.

    iclr26 run rl_toy --preset demo --workdir /tmp/rl_toy      # 3 seeds, GRPO and PPO
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core import data as data_lib
from core import plots
from core import train as train_lib
from core.config import check
from core.lm import data as lm_data
from core.lm import losses as lm_losses
from core.lm import model as model_lib
from core.lm.configs import LMConfig
from core.lm.generate import SamplingConfig, generate, pad_prompts
from core.optim import OptimizerConfig, make_optimizer
from core.rl.losses import LossConfig
from core.rl.rollout import RolloutConfig
from core.rl.trainer import RLConfig, RLTrainer


class SymbolTokenizer:
    """Token ids <-> space-separated numbers (the toy task's 'text')."""

    def encode(self, text: str) -> list[int]:
        return [int(w) for w in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(str(int(t)) for t in ids)


class ExactMatch:
    """Single-turn environment: reward 1 when the answer (EOS stripped by the rollout) is the reversal."""

    def reset(self, answer: Sequence[int]) -> str:
        return SymbolTokenizer().decode([t for t in answer if t != lm_data.EOS])

    def step(self, state: str, action_text: str) -> tuple[str | None, bool, float]:
        return None, True, float(action_text.strip() == state)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLToyConfig:
    """SFT on noisy reversals, then RL to the exact-match reward. `algorithms` run from the same SFT start per
    seed. `kl_bound`: the per-token KL(policy || SFT) the claim allows at the end."""

    model: LMConfig = LMConfig(architecture="qwen2", vocab_size=12, hidden_size=64, intermediate_size=128,
                               num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, tie_word_embeddings=True)
    num_symbols: int = 8  # alphabet size of the reversal task
    min_len: int = 3  # shortest sequence to reverse
    max_len: int = 5  # longest sequence to reverse
    label_noise: float = 0.5  # fraction of SFT targets corrupted (so RL has headroom)
    num_sft: int = 4000  # SFT examples
    sft_steps: int = 300  # SFT optimisation steps
    sft_batch: int = 32  # SFT batch size
    sft_lr: float = 3e-3  # SFT learning rate
    num_prompts: int = 512  # RL training prompts
    num_eval: int = 256  # held-out evaluation prompts
    # RL algorithms run from the same SFT start (grpo, dr_grpo, rloo, ppo)
    algorithms: tuple[str, ...] = ("grpo", "ppo")
    seeds: tuple[int, ...] = (0, 1, 2)  # seeds, each an SFT start and every algorithm from it
    rl_steps: int = 60  # RL updates per algorithm
    prompts_per_step: int = 16  # prompts per RL update
    group_size: int = 8  # completions sampled per prompt (G)
    rl_lr: float = 1e-3  # RL learning rate
    kl_coef: float = 0.1  # weight of the KL(policy || SFT) penalty
    kl_bound: float = 0.5  # the per-token KL to the SFT model the claim allows at the end
    temperature: float = 1.0  # sampling temperature of the rollouts
    def __post_init__(self):
        check(0.0 <= self.label_noise < 1.0, "label_noise", self.label_noise, "in [0, 1)")
        check(self.model.vocab_size >= lm_data.vocab_size_needed("reverse", self.num_symbols), "model.vocab_size",
              self.model.vocab_size, f">= {lm_data.vocab_size_needed('reverse', self.num_symbols)}")
        check(len(self.seeds) >= 1 and len(self.algorithms) >= 1, "seeds", self.seeds,
              "at least one seed and algorithm")
        for a in self.algorithms:
            check(a in ("grpo", "dr_grpo", "rloo", "ppo"), "algorithms", self.algorithms,
                  "names from grpo, dr_grpo, rloo, ppo")

    def rl_config(self, algorithm: str, seed: int) -> RLConfig:
        rollout = RolloutConfig(group_size=self.group_size, max_new_tokens=self.max_len + 1,
                                max_response_tokens=self.max_len + 1, max_prompt_tokens=self.max_len + 2,
                                temperature=self.temperature, eos_tokens=(lm_data.EOS,), pad_id=lm_data.PAD,
                                prompt_bucket=8)
        return RLConfig(algorithm=algorithm, steps=self.rl_steps, prompts_per_step=self.prompts_per_step,
                        rollout=rollout, loss=LossConfig(kl_coef=self.kl_coef),
                        optimizer=OptimizerConfig(lr=self.rl_lr, clip_norm=1.0), seed=seed, ckpt_every=self.rl_steps,
                        lam=0.95, gamma=1.0)


def presets() -> dict[str, RLToyConfig]:
    tiny = RLToyConfig(model=LMConfig(architecture="qwen2", vocab_size=12, hidden_size=32, intermediate_size=64,
                                      num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, tie_word_embeddings=True),
                       num_sft=256, sft_steps=20, num_prompts=32, num_eval=32, seeds=(0,), rl_steps=2,
                       prompts_per_step=4, group_size=4)
    return {"tiny": tiny, "demo": RLToyConfig()}


def make_data(config: RLToyConfig, seed: int):
    """(noisy SFT rows, RL prompts and answers, eval prompts and answers), all from `seed`."""
    rng = np.random.default_rng([seed, 17])
    kw = dict(num_symbols=config.num_symbols, min_len=config.min_len, max_len=config.max_len, rng=rng)
    sft = lm_data.make_examples("reverse", config.num_sft, **kw)
    noisy = []
    for prompt, answer in sft:
        if rng.random() < config.label_noise:  # an imperfect solution: the sequence copied, not reversed
            answer = [*prompt[1:-1], lm_data.EOS]
        noisy.append((prompt, list(answer)))
    rl = lm_data.make_examples("reverse", config.num_prompts, **kw)
    evals = lm_data.make_examples("reverse", config.num_eval, **kw)
    return lm_data.to_training_rows(noisy, 2 * config.max_len + 3), rl, evals


def sft(config: RLToyConfig, seed: int, rows: dict, workdir: pathlib.Path):
    graphdef, params = model_lib.init(config.model, jax.random.key(seed))
    tx, _ = make_optimizer(OptimizerConfig(lr=config.sft_lr, schedule="warmup_cosine",
                                           warmup_steps=max(1, config.sft_steps // 8), decay_steps=config.sft_steps,
                                           end_lr=config.sft_lr * 0.1, weight_decay=0.01))
    state = train_lib.init_train_state(params, tx, jax.random.key(seed))
    step = train_lib.make_train_step(lm_losses.next_token_loss(graphdef), tx)
    state, _ = train_lib.fit(state, step, data_lib.ArrayLoader(rows, config.sft_batch, seed=seed),
                             num_steps=config.sft_steps, workdir=workdir, config=config, log_every=config.sft_steps,
                             ckpt_every=config.sft_steps, progress_bar=False)
    return graphdef, state.params


def greedy_exact_match(graphdef, params, examples) -> float:
    prompts = [p for p, _ in examples]
    n_new = max(len(a) for _, a in examples)
    tokens, mask = pad_prompts(prompts, pad_id=lm_data.PAD, bucket=8)
    out = generate(graphdef, params, tokens, mask, jax.random.key(0),
                   SamplingConfig(max_new_tokens=n_new, stop_tokens=(lm_data.EOS,), pad_id=lm_data.PAD))
    got = np.asarray(out.tokens)
    return float(np.mean([got[i, :len(a)].tolist() == list(a) and (len(a) == n_new or got[i, len(a)] == lm_data.PAD)
                          for i, (_, a) in enumerate(examples)]))


@jax.jit
def _exact_kl(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
    lp, lq = jax.nn.log_softmax(logits_p, -1), jax.nn.log_softmax(logits_q, -1)
    return (jnp.exp(lp) * (lp - lq)).sum(-1)


def policy_kl(graphdef, params, reference, examples, key) -> float:
    """Mean over the policy's sampled answer tokens of the exact KL(policy || reference) at each position."""
    prompts = [p for p, _ in examples]
    n_new = max(len(a) for _, a in examples)
    tokens, mask = pad_prompts(prompts, pad_id=lm_data.PAD, bucket=8)
    out = generate(graphdef, params, tokens, mask, key, SamplingConfig(max_new_tokens=n_new, temperature=1.0,
                                                                       stop_tokens=(lm_data.EOS,), pad_id=lm_data.PAD))
    seq = jnp.concatenate([jnp.asarray(tokens), out.tokens], axis=1)
    att = jnp.concatenate([jnp.asarray(mask), out.mask], axis=1)
    P = tokens.shape[1]
    lp = model_lib.apply(graphdef, params, seq, attention_mask=att).logits[:, P - 1:-1]
    lq = model_lib.apply(graphdef, reference, seq, attention_mask=att).logits[:, P - 1:-1]
    kl = _exact_kl(lp, lq)
    return float((kl * out.mask).sum() / out.mask.sum())


def run(config: RLToyConfig, workdir: pathlib.Path | str) -> dict:
    """SFT then each algorithm, per seed; writes metrics.json, metrics.jsonl per run, reward/kl/accuracy plots."""
    workdir = pathlib.Path(workdir)
    t0 = time.time()
    per_seed, curves = [], {}
    tok = SymbolTokenizer()
    for seed in config.seeds:
        rows, rl_examples, evals = make_data(config, seed)
        graphdef, start = sft(config, seed, rows, workdir / f"sft_seed{seed}")
        record = {"seed": seed, "sft_exact_match": greedy_exact_match(graphdef, start, evals)}
        for algorithm in config.algorithms:
            trainer = RLTrainer(config.rl_config(algorithm, seed), graphdef, start,
                                prompts=[p for p, _ in rl_examples], envs=[ExactMatch()] * len(rl_examples),
                                env_prompts=[a for _, a in rl_examples], tokenizer=tok)
            history = trainer.train(workdir / f"{algorithm}_seed{seed}", progress_bar=True)
            policy = trainer.policy_params()
            record[f"{algorithm}_exact_match"] = greedy_exact_match(graphdef, policy, evals)
            record[f"{algorithm}_kl"] = policy_kl(graphdef, policy, start, evals, jax.random.key(seed))
            record[f"{algorithm}_final_reward"] = history[-1]["reward"]
            curves[(algorithm, seed)] = history
        per_seed.append(record)
    _plots(workdir, curves, config)
    metrics = {"per_seed": per_seed, "wall_seconds": time.time() - t0}
    for key in per_seed[0]:
        if key != "seed":
            metrics[f"mean_{key}"] = float(np.mean([r[key] for r in per_seed]))
    train_lib.write_metrics(workdir, metrics)
    return metrics


def _plots(workdir: pathlib.Path, curves: dict, config: RLToyConfig) -> None:
    for name, key in (("reward", "reward"), ("kl", "kl")):
        series = {f"{a} seed {s}": tuple(zip(*[(r["step"], r[key]) for r in h if key in r]))
                  for (a, s), h in curves.items()}
        series = {k: v for k, v in series.items() if v}
        if series:
            plots.line_plot(workdir / f"{name}.png", series, title=f"rl_toy: {name} per RL step", xlabel="RL step",
                            ylabel=name)

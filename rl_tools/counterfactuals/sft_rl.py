"""SFT versus RL on counterfactual code problems (paper 6's training comparison), on a small `core.lm` decoder.

Per seed, from the same **base** model (trained by `train.py` on factual + interventional items of the
if_else training programs, never a counterfactual item):

- **SFT**: `core.train.fit` on the enumerating teacher's counterfactual traces (`teacher.trace_words`:
  abduction over every latent, intervention, prediction, then the answer set) of the in-distribution if_else
  training programs;
- **RL**: GRPO (`core.rl.trainer`) from the base on the counterfactual questions of the same programs, with
  an exact-match reward that accepts every rendering of the right answer set (`verify.parse_answer`: any
  order, duplicates, braces or none), G completions per prompt;
- **evaluation**: counterfactual exact match on the in-distribution test programs (if_else) and the OOD
  splits (if_else_long, while, multi_r, math), with the chance baselines (`baselines.py`), the share of
  outputs that contain an explicit abduction step (`teacher.has_abduction`), the share whose abduction marks
  exactly the consistent latents (`abduction_right`), and EM among those (the prediction after a right
  abduction).

With `model_dir` (a HuggingFace chat model folder, e.g. Qwen2.5-1.5B-Instruct: the paper's setting) the base
is that model as it comes, and prompts, SFT targets and answers are English in its ChatML turn (`hf.py`).

Presets: `iclr26 run cf_sft --preset demo` and `iclr26 run cf_rl --preset demo` (each under 10 min on 2 CPU
cores); `paper`: Qwen2.5-1.5B-Instruct from `/models/Qwen2.5-1.5B-Instruct` (`--set model_dir=PATH`), a GPU run.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any

import jax
import numpy as np

from core import data as data_lib
from core import train as train_lib
from core.config import BadInputError, check
from core.lm import losses
from core.optim import OptimizerConfig
from core.rl.losses import LossConfig
from core.rl.rollout import RolloutConfig
from core.rl.trainer import RLConfig, RLTrainer
from rl_tools.counterfactuals import baselines, data, hf, teacher, verify
from rl_tools.counterfactuals import train as base_train
from rl_tools.counterfactuals.configs import CFConfig

EVAL_SPLITS = base_train.EVAL_SPLITS
OOD_CODE = ("if_else_long", "while", "multi_r")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CFTrainConfig:
    base: CFConfig = CFConfig()  # the base model and data (trained first unless base_dir holds it)
    arms: tuple[str, ...] = ("sft", "rl")  # which of SFT and GRPO to run from the base
    base_dir: str = ""  # folder with params.npz + eval.json of a trained base of the same config ("" = train it)
    model_dir: str = ""  # a HuggingFace chat model folder (e.g. Qwen2.5-1.5B-Instruct) as the base, in English
    # (`hf.py`); base.model and base training are then unused
    sft_steps: int = 300  # SFT optimisation steps on teacher traces
    sft_lr: float = 1e-3  # SFT peak learning rate
    sft_batch: int = 32  # SFT packed rows per step
    sft_seq_len: int = 0  # SFT row length (0: the base's seq_len); teacher traces that execute every latent
    # (trace_style steps / flow) need longer rows
    rl_steps: int = 30  # GRPO updates
    prompts_per_step: int = 8  # prompts per GRPO update
    group_size: int = 8  # completions per prompt (G)
    rl_lr: float = 5e-4  # GRPO learning rate
    kl_coef: float = 0.02  # KL(policy || base) loss weight
    temperature: float = 1.0  # rollout sampling temperature
    rl_max_new_tokens: int = 48  # rollout completion budget
    eval_max_new_tokens: int = 160  # evaluation budget (teacher traces on multi_r run to about 150 tokens)

    def __post_init__(self):
        check(len(self.arms) >= 1 and all(a in ("sft", "rl") for a in self.arms), "arms", self.arms,
              "a non-empty subset of ('sft', 'rl')")
        check(self.group_size >= 2, "group_size", self.group_size, ">= 2 (GRPO needs a group)")
        for name in ("sft_steps", "rl_steps", "prompts_per_step", "rl_max_new_tokens", "eval_max_new_tokens",
                     "sft_batch"):
            check(getattr(self, name) > 0, name, getattr(self, name), "> 0")
        check(self.sft_seq_len >= 0, "sft_seq_len", self.sft_seq_len, ">= 0 (0: the base's seq_len)")
        check(self.sft_lr > 0 and self.rl_lr > 0, "sft_lr / rl_lr", (self.sft_lr, self.rl_lr), "> 0")

    def rl_config(self, eos_id: int | None = None, pad_id: int = 0, max_prompt_tokens: int = 160) -> RLConfig:
        """GRPO settings; `eos_id` / `pad_id` / `max_prompt_tokens` of the model's tokenizer and prompts (the
        compact language's by default)."""
        eos = data.CompactTokenizer().eos_id if eos_id is None else eos_id
        rollout = RolloutConfig(group_size=self.group_size, max_new_tokens=self.rl_max_new_tokens,
                                max_response_tokens=self.rl_max_new_tokens, max_prompt_tokens=max_prompt_tokens,
                                temperature=self.temperature, eos_tokens=(eos,), pad_id=pad_id, prompt_bucket=16)
        return RLConfig(algorithm="grpo", steps=self.rl_steps, prompts_per_step=self.prompts_per_step,
                        rollout=rollout, loss=LossConfig(kl_coef=self.kl_coef),
                        optimizer=OptimizerConfig(lr=self.rl_lr, clip_norm=1.0), seed=self.base.seed,
                        ckpt_every=self.rl_steps)


class SetMatch:
    """Single-turn environment: reward 1 when the completion's answer set is the gold counterfactual set (in
    any order or rendering `verify.parse_answer` reads), else 0."""

    def reset(self, answer) -> tuple[int, ...]:
        return tuple(answer)

    def step(self, state, action_text: str) -> tuple[str | None, bool, float]:
        return None, True, verify.exact_match(verify.parse_answer(action_text), state)


def sft(config: CFTrainConfig, graphdef, params, train_items, tok, workdir: pathlib.Path):
    """Fit the base on counterfactual teacher traces of the training programs."""
    b = config.base
    seq_len = config.sft_seq_len or b.seq_len
    if config.model_dir:
        exs = hf.sft_examples(train_items, tok, seq_len)
    else:
        exs = data.examples(train_items, ("counterfactual",), tok, trace=True, trace_style=config.base.trace_style)
        exs = [e for e in exs if len(e[0]) + len(e[1]) <= seq_len + 1]
    if not exs:
        raise BadInputError(f"sft_seq_len={seq_len}: no teacher trace fits a row of that length; expected a longer "
                            "row")
    rows = data.to_rows(exs, seq_len)
    opt_cfg = dataclasses.replace(b, steps=config.sft_steps, lr=config.sft_lr, warmup=max(1, config.sft_steps // 10))
    tx = base_train.make_optimizer(opt_cfg)
    state = train_lib.init_train_state(params, tx, jax.random.key(b.seed + 7))
    step = train_lib.make_train_step(losses.next_token_loss(graphdef), tx)
    loader = data_lib.ArrayLoader(rows, min(config.sft_batch, rows["inputs"].shape[0]), seed=b.seed + 7)
    state, history = train_lib.fit(state, step, loader, num_steps=config.sft_steps, workdir=workdir, config=config,
                                   log_every=max(1, config.sft_steps // 5), ckpt_every=config.sft_steps,
                                   progress_bar=False)
    return state.params, history


def grpo(config: CFTrainConfig, graphdef, params, train_items, tok, workdir: pathlib.Path):
    """GRPO from the base on counterfactual questions of the training programs (exact-match set reward)."""
    if config.model_dir:
        prompts = [tok.encode(hf.prompt(it, "counterfactual")) for it in train_items]
        rl_config = config.rl_config(tok.eos_id, tok.pad_id or 0, max(len(p) for p in prompts))
    else:
        prompts = [tok.encode(data.prompt_words(it, "counterfactual", config.base.trace_style)) for it in train_items]
        rl_config = config.rl_config()
    trainer = RLTrainer(rl_config, graphdef, params, prompts=prompts, envs=[SetMatch()] * len(prompts),
                        env_prompts=[it.answer_cf for it in train_items], tokenizer=tok)
    history = trainer.train(workdir, progress_bar=False)
    return trainer.policy_params(), history


def evaluate_cf(config: CFTrainConfig, graphdef, params, items, tok) -> dict[str, Any]:
    """Counterfactual EM / F1 per split, the abduction-step share, and per-item outcomes."""
    if config.model_dir:
        res = hf.evaluate(graphdef, params, tok, items, variants=("counterfactual",),
                          max_new_tokens=config.eval_max_new_tokens, batch_size=config.base.eval_batch)
    else:
        res = base_train.evaluate_model(config.base, graphdef, params, items, tok,
                                        max_new_tokens=config.eval_max_new_tokens, variants=("counterfactual",))
    by_id = {(s, it.id): it for s, its in items.items() for it in its}
    per_split: dict[str, Any] = {}
    for r in res["rows"]:
        preds = [p for p in res["predictions"] if p["split"] == r["split"]]
        # abduction right: the latents marked `ok` are exactly the consistent set (teacher.abduced_latents)
        right = [abduction_right(by_id[(p["split"], p["item_id"])], p["completion"]) for p in preds]
        em_right = [p["parsed"] == p["answer"] for p, ok in zip(preds, right) if ok]
        per_split[r["split"]] = {"em": r["em"], "f1": r["f1"], "unparsed": r["unparsed"],
                                 "abduction_share": float(np.mean([teacher.has_abduction(p["completion"])
                                                                   for p in preds])),
                                 "abduction_right": float(np.mean(right)) if right else 0.0,
                                 "em_when_abduction_right": float(np.mean(em_right)) if em_right else None,
                                 "example": preds[0]["completion"] if preds else None}
    return per_split


def abduction_right(item, completion: str | None) -> bool:
    """Whether an output's abduction step marks exactly the latents consistent with the observation."""
    got = teacher.abduced_latents(completion, len(item.program.latent_names))
    return got is not None and got == frozenset(tuple(r) for r in item.consistent)


def base_model(config: CFTrainConfig, items, tok, workdir: pathlib.Path):
    """(graphdef, params, base eval rows): the `model_dir` chat model as it comes, or loaded from `base_dir`,
    or trained and evaluated here."""
    b = config.base
    if config.model_dir:  # the user's chat model, evaluated as it comes
        graphdef, params = hf.load(config.model_dir)
        rows = hf.evaluate(graphdef, params, tok, {s: items[s] for s in EVAL_SPLITS},
                           variants=("counterfactual", "interventional"), max_new_tokens=config.eval_max_new_tokens,
                           batch_size=b.eval_batch)["rows"]
        return graphdef, params, rows
    if config.base_dir:
        d = pathlib.Path(config.base_dir)
        if not (d / "params.npz").exists() or not (d / "eval.json").exists():
            raise FileNotFoundError(f"base_dir={config.base_dir!r}: expected params.npz and eval.json from "
                                    "train.run (benchmarks/counterfactuals.py writes them per seed)")
        graphdef, params = base_train.load_params(b.model, d / "params.npz", b.seed)
        rows = json.loads((d / "eval.json").read_text())["rows"]
        return graphdef, params, rows
    graphdef, params, _ = base_train.train_model(b, base_train.base_training_items(b, items), workdir / "base",
                                                 tok)
    base_train.save_params(params, workdir / "base" / "params.npz")
    rows = base_train.evaluate_model(b, graphdef, params, items, tok)["rows"]
    return graphdef, params, rows


def run(config: CFTrainConfig, workdir: pathlib.Path | str) -> dict[str, Any]:
    """Base, then each arm from it; writes compare.json (per split and model: CF EM / F1 beside chance,
    abduction share) and metrics.json."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    tok = hf.tokenizer(config.model_dir) if config.model_dir else data.CompactTokenizer()
    items, _ = base_train.make_splits(config.base)
    graphdef, params, base_rows = base_model(config, items, tok, workdir)
    t_base = time.time() - t0
    evals = {s: items[s] for s in EVAL_SPLITS}
    chance = {c["split"]: c for c in baselines.chance_rows(evals, ("counterfactual", "interventional"))
              if c["variant"] == "counterfactual"}
    iv_chance = {c["split"]: c for c in baselines.chance_rows(evals, ("interventional",))}
    table = {(r["split"], r["variant"]): r for r in base_rows}
    models: dict[str, dict[str, Any]] = {"base": {s: {"em": table[(s, "counterfactual")]["em"],
                                                      "f1": table[(s, "counterfactual")]["f1"],
                                                      "iv_em": table[(s, "interventional")]["em"]}
                                                  for s in EVAL_SPLITS}}
    histories, seconds = {}, {"base": t_base}
    for arm in config.arms:
        t1 = time.time()
        start = jax.tree.map(lambda x: x.copy(), params)  # the training steps donate their inputs
        if arm == "sft":
            p, hist = sft(config, graphdef, start, items["if_else_train"], tok, workdir / "sft")
        else:
            p, hist = grpo(config, graphdef, start, items["if_else_train"], tok, workdir / "rl")
        models[arm] = evaluate_cf(config, graphdef, p, evals, tok)
        histories[arm] = hist
        seconds[arm] = time.time() - t1
    out = {"models": models, "chance": chance, "iv_chance": iv_chance, "seconds": seconds,
           "rl_reward": [h.get("reward") for h in histories.get("rl", []) if "reward" in h]}
    (workdir / "compare.json").write_text(json.dumps(out, indent=2, default=float) + "\n")
    metrics: dict[str, Any] = {}
    for name, per in models.items():
        for s, m in per.items():
            metrics[f"{name}/{s}/cf_em"] = m["em"]
            if "abduction_share" in m:
                metrics[f"{name}/{s}/abduction_share"] = m["abduction_share"]
    for s in EVAL_SPLITS:
        metrics[f"chance/{s}/cf_em"] = chance[s]["best_em"]
    metrics["wall_seconds"] = time.time() - t0
    train_lib.write_metrics(workdir, metrics)
    return metrics


__all__ = ["CFTrainConfig", "SetMatch", "sft", "grpo", "evaluate_cf", "abduction_right", "run", "OOD_CODE",
           "EVAL_SPLITS"]

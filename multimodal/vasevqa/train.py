"""The experiment: render vases, train base -> SFT -> SFT+GRPO, score the three with the released metrics.

`run(config, workdir)` writes metrics.json (every arm's metrics, hit counts and per-attribute accuracy),
captions_<arm>.json (the released generated-caption format), captions_gt.json, history.json, the six views of a
few test vases (views.png), loss / reward curves and a metric bar plot.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core import plots
from core.lm import lora as lora_lib
from core.lm.generate import SamplingConfig
from core.rl.advantages import group_advantages
from core.rl.losses import LossConfig
from core.train import init_train_state, make_train_step, progress, write_metrics
from multimodal import vlm
from multimodal.vasevqa import data as data_lib
from multimodal.vasevqa import metrics as metrics_lib
from multimodal.vasevqa import model as model_lib
from multimodal.vasevqa import render
from multimodal.vasevqa import reward as reward_lib
from multimodal.vasevqa.configs import Config

ARMS = ("base", "sft", "grpo")


@dataclasses.dataclass
class Data:
    train: list
    test: list
    train_images: np.ndarray
    test_images: np.ndarray


def make_data(config: Config, seed: int | None = None) -> Data:
    seed = config.seed if seed is None else seed
    train = data_lib.make_split(config.n_train, 1000 + seed, size=config.image_size, desc="render train vases")
    test = data_lib.make_split(config.n_test, 2000 + seed, size=config.image_size, desc="render test vases")
    return Data(train, test, data_lib.view_stack(train), data_lib.view_stack(test))


def build_tokenizer(train: list) -> model_lib.WordTokenizer:
    texts = [data_lib.CAPTION_PROMPT, *data_lib.QUESTIONS.values()]
    for v in train:
        texts += [v.caption, data_lib.lay_caption(v.attributes)] + [q["answer"] for q in v.qa]
    return model_lib.WordTokenizer.build(texts)


def _schedule(lr: float, steps: int):
    steps = max(steps, 2)
    return optax.warmup_cosine_decay_schedule(0.0, lr, max(1, steps // 10), steps, lr * 0.05)


def _length(tokenizer, rows) -> int:
    longest = max(len(tokenizer.encode_prompt(p)) + len(tokenizer.encode(a)) + 1 for p, a in rows)
    return -(-longest // 8) * 8


class Runner:
    """One seed's three stages, sharing compiled functions."""

    def __init__(self, config: Config, data: Data, seed: int, log=None):
        self.config, self.data, self.seed, self.log = config, data, seed, log or (lambda row: None)
        self.tokenizer = build_tokenizer(data.train)
        self.model = vlm.init_vlm(model_lib.vlm_config(config, self.tokenizer.vocab_size), jax.random.key(seed))
        self.lcfg = model_lib.lora_config(config)
        self.rng = np.random.default_rng(seed + 7)
        self.history: dict[str, list] = {"pretrain": [], "sft": [], "grpo": []}
        caption_len = max(len(self.tokenizer.encode(v.caption)) for v in data.train)
        self.max_new = caption_len + 4
        self.greedy = model_lib.Sampler(self.model, self.tokenizer, data_lib.CAPTION_PROMPT,
                                        min(config.n_test, 128), SamplingConfig(max_new_tokens=self.max_new,
                                                                                stop_tokens=(model_lib.EOS,)))
        self.seconds: dict[str, float] = {}
        self.trainable: dict[str, list] = {}

    # stage 0 -----------------------------------------------------------------------------------------
    def pretrain(self):
        c, d = self.config, self.data
        rows = [(data_lib.CAPTION_PROMPT, data_lib.lay_caption(v.attributes)) for v in d.train]
        corpus = data_lib.catalogue(c.corpus_size, 3000 + self.seed)
        n_text = int(round(c.batch_size * c.corpus_fraction)) if corpus else 0
        length = _length(self.tokenizer, rows + corpus)
        blank = np.zeros((n_text, *d.train_images.shape[1:]), np.float32)
        schedule = _schedule(c.pretrain_lr, c.pretrain_steps)
        tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01))
        params, _ = vlm.trainable_params(self.model)
        state = init_train_state(params, tx, jax.random.key(self.seed + 1))
        step = make_train_step(vlm.make_loss(self.model), tx, schedule=schedule)
        start = time.time()
        for i in progress(range(c.pretrain_steps), desc="vasevqa base (lay captions)"):
            pick = self.rng.integers(0, len(rows), c.batch_size - n_text)
            text = [corpus[j] for j in self.rng.integers(0, len(corpus), n_text)] if n_text else []
            batch = model_lib.training_batch(self.tokenizer, np.concatenate([d.train_images[pick], blank]),
                                             [rows[j][0] for j in pick] + [t[0] for t in text],
                                             [rows[j][1] for j in pick] + [t[1] for t in text], length)
            state, m = step(state, jax.tree.map(jnp.asarray, batch))
            if i % 25 == 0 or i == c.pretrain_steps - 1:
                self._record("pretrain", i, {"loss": float(m["loss"])})
        self.seconds["pretrain"] = time.time() - start
        self.vision = state.params["vision"]
        self.base_lm = state.params["lm"]
        return self.base_lm

    # stage 1 -----------------------------------------------------------------------------------------
    def sft_rows(self) -> list[tuple[int, str, str]]:
        rows = []
        for i, v in enumerate(self.data.train):
            rows.append((i, data_lib.CAPTION_PROMPT, v.caption))
        qa = [(i, q["question"], q["answer"]) for i, v in enumerate(self.data.train) for q in v.qa]
        return rows, qa

    def sft(self):
        c, d = self.config, self.data
        captions, qa = self.sft_rows()
        length = _length(self.tokenizer, [(p, a) for _, p, a in captions + qa])
        schedule = _schedule(c.sft_lr, c.sft_steps)
        tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.0))
        adapters = lora_lib.init_lora(self.model.config.lm, self.lcfg, jax.random.key(self.seed + 2))
        state = init_train_state({"lora": adapters}, tx, jax.random.key(self.seed + 3),
                                 frozen={"vision": self.vision, "lm": self.base_lm})
        step = make_train_step(model_lib.make_sft_loss(self.model, self.lcfg), tx, schedule=schedule)
        start = time.time()
        n_qa = int(round(c.batch_size * c.qa_fraction))
        for i in progress(range(c.sft_steps), desc="vasevqa SFT (LoRA, ViT frozen)"):
            picks = [captions[j] for j in self.rng.integers(0, len(captions), c.batch_size - n_qa)]
            picks += [qa[j] for j in self.rng.integers(0, len(qa), n_qa)] if n_qa else []
            idx = np.asarray([p[0] for p in picks])
            batch = model_lib.training_batch(self.tokenizer, d.train_images[idx], [p[1] for p in picks],
                                             [p[2] for p in picks], length)
            state, m = step(state, jax.tree.map(jnp.asarray, batch))
            if i % 25 == 0 or i == c.sft_steps - 1:
                self._record("sft", i, {"loss": float(m["loss"])})
        self.seconds["sft"] = time.time() - start
        self.trainable["sft"] = sorted(state.params)
        self.adapters = state.params["lora"]
        self.sft_lm = lora_lib.merge(self.base_lm, self.adapters, self.lcfg)
        return self.sft_lm

    # stage 2 -----------------------------------------------------------------------------------------
    def grpo(self):
        c, d = self.config, self.data
        g, b = c.num_generations, c.grpo_prompts
        sampler = model_lib.Sampler(self.model, self.tokenizer, data_lib.CAPTION_PROMPT, b * g,
                                    SamplingConfig(max_new_tokens=self.max_new, temperature=c.temperature,
                                                   stop_tokens=(model_lib.EOS,)))
        loss_config = LossConfig(kl_coef=c.kl_coef, kl_estimator="k3", aggregation="seq-mean-token-mean")
        tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(c.grpo_lr))
        policy = jax.tree.map(jnp.copy, self.sft_lm)
        state = init_train_state({"lm": policy}, tx, jax.random.key(self.seed + 4),
                                 frozen={"vision": self.vision, "ref": self.sft_lm})
        step = make_train_step(model_lib.make_grpo_loss(self.model, loss_config), tx)
        group = np.repeat(np.arange(b), g)
        start = time.time()
        key = jax.random.key(self.seed + 5)
        for i in progress(range(c.grpo_steps), desc="vasevqa GRPO"):
            pick = self.rng.integers(0, len(d.train), b)
            images = np.repeat(d.train_images[pick], g, axis=0)
            tokens, mask = sampler(self.vision, state.params["lm"], images, jax.random.fold_in(key, i))
            texts = [self.tokenizer.decode(row) for row in tokens]
            truths = [d.train[j].attributes for j in np.repeat(pick, g)]
            rewards = np.asarray([reward_lib.reward(t, a, c.reward) for t, a in zip(texts, truths)], np.float32)
            adv = np.asarray(group_advantages(rewards, group, num_groups=b, mode="grpo"))
            batch = model_lib.rollout_batch(sampler.prompt_tokens, tokens, mask, images, adv)
            state, m = step(state, jax.tree.map(jnp.asarray, batch))
            if i % 5 == 0 or i == c.grpo_steps - 1:
                self._record("grpo", i, {"reward": float(rewards.mean()), "loss": float(m["loss"]),
                                         "kl": float(m.get("kl", 0.0))})
        self.seconds["grpo"] = time.time() - start
        self.trainable["grpo"] = sorted(state.params)
        self.grpo_lm = state.params["lm"]
        return self.grpo_lm

    def _record(self, stage: str, i: int, row: dict[str, float]):
        row = {"step": i, **row}
        self.history[stage].append(row)
        self.log({"stage": stage, **row})

    # evaluation --------------------------------------------------------------------------------------
    def captions(self, lm_params) -> list[str]:
        return self.greedy.captions(self.vision, lm_params, self.data.test_images, jax.random.key(0))


def score(captions: list[str], test: list, encoder, sentence_encoder=None) -> dict[str, Any]:
    pairs, skipped = metrics_lib.match(data_lib.caption_records(test, captions, "vasevlm"),
                                       data_lib.caption_records(test))
    out = metrics_lib.evaluate_captions([p[1] for p in pairs], [p[2] for p in pairs], encoder, sentence_encoder)
    out["skipped"] = skipped
    acc = reward_lib.attribute_accuracy(captions, [v.attributes for v in test])
    out.update({f"acc_{k.lower()}": v for k, v in acc.items()})
    out["mean_reward"] = float(np.mean([reward_lib.reward(cap, v.attributes) for cap, v in zip(captions, test)]))
    return out


def run_seed(config: Config, seed: int, data: Data | None = None, log=None, base: Runner | None = None
             ) -> tuple[dict[str, Any], Runner, dict]:
    """One seed's three arms. `base`: a runner whose pretrained base model (vision tower + LM) is reused, so
    that seeds vary SFT and GRPO from one base checkpoint, as the paper starts every run from one Qwen model."""
    data = make_data(config, seed) if data is None else data
    runner = Runner(config, data, seed, log=log)
    encoder = metrics_lib.LSAEncoder.fit([v.caption for v in data.train], dim=config.encoder_dim)
    sentence = metrics_lib.HashEncoder()
    captions = {}
    if base is None:
        runner.pretrain()
    else:
        runner.vision, runner.base_lm = base.vision, base.base_lm
        runner.history["pretrain"] = base.history["pretrain"]
        runner.seconds["pretrain"] = 0.0
    captions["base"] = runner.captions(runner.base_lm)
    runner.sft()
    captions["sft"] = runner.captions(runner.sft_lm)
    runner.grpo()
    captions["grpo"] = runner.captions(runner.grpo_lm)
    results = {arm: score(captions[arm], data.test, encoder, sentence) for arm in ARMS}
    return results, runner, captions


def train_and_evaluate(config: Config, workdir: str | pathlib.Path) -> dict[str, Any]:
    return run_experiment(config, workdir)[0]


def run_experiment(config: Config, workdir: str | pathlib.Path) -> tuple[dict[str, Any], Runner]:
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "metrics.jsonl"
    log_path.write_text("")

    def log(row):
        with open(log_path, "a") as f:
            f.write(json.dumps(row) + "\n")

    start = time.time()
    data = make_data(config)
    results, runner, captions = run_seed(config, config.seed, data, log=log)
    for arm in ARMS:
        (workdir / f"captions_{arm}.json").write_text(json.dumps(
            data_lib.caption_records(data.test, captions[arm], f"vasevlm-{arm}"), indent=1))
    (workdir / "captions_gt.json").write_text(json.dumps(data_lib.caption_records(data.test), indent=1))
    (workdir / "history.json").write_text(json.dumps(runner.history, indent=1))
    runner.tokenizer.save(workdir / "tokenizer.json")
    metrics: dict[str, Any] = {"wall_seconds": time.time() - start,
                               **{f"seconds_{k}": v for k, v in runner.seconds.items()},
                               "n_train": config.n_train, "n_test": config.n_test,
                               "text_encoder": results["base"]["clip_encoder"],
                               "fid_encoder": results["base"]["sentence_encoder"],
                               "semantic_similarity_note": "the same cosine as clip_score, double-counted as released"}
    for arm, r in results.items():
        for k, v in r.items():
            if isinstance(v, (int, float)):
                metrics[f"{arm}/{k}"] = v
    metrics["example_captions"] = {arm: captions[arm][:3] for arm in ARMS}
    metrics["example_ground_truth"] = [v.caption for v in data.test[:3]]
    if config.plot:
        from PIL import Image

        sheet = np.concatenate([render.contact_sheet(v.views) for v in data.test[:4]], axis=0)
        big = Image.fromarray(sheet).resize((sheet.shape[1] * 2, sheet.shape[0] * 2), Image.NEAREST)
        big.save(workdir / "views.png")
        h = runner.history
        plots.line_plot(workdir / "loss.png", {stage: ([r["step"] for r in h[stage]], [r["loss"] for r in h[stage]])
                                               for stage in ("pretrain", "sft") if h[stage]},
                        title="VaseVLM: base (lay captions) and LoRA SFT", xlabel="step", ylabel="answer NLL")
        if h["grpo"]:
            plots.line_plot(workdir / "grpo_reward.png", {"mean reward": ([r["step"] for r in h["grpo"]],
                                                                          [r["reward"] for r in h["grpo"]])},
                            title="GRPO: attribute reward of the sampled captions", xlabel="step", ylabel="R")
        plots.bar_plot(workdir / "metrics.png", {f"{arm} {k}": results[arm][k] for arm in ARMS
                                                 for k in ("r_at_10", "lexical_similarity", "clip_score")},
                       title="released caption metrics (LSA text encoder)", ylabel="score")
    write_metrics(workdir, metrics)
    return metrics, runner

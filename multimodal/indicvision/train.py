"""The synthetic experiment: train the small VLM on rendered OCR / VQA / MMT data (unequal per script) and score
it, beside the constant baseline, with the harness exactly as the real benchmark is scored."""

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
from core.lm.configs import LMConfig
from core.train import init_train_state, make_train_step, progress, write_metrics
from multimodal import vlm
from multimodal.indicvision import harness, prompts, synthetic
from multimodal.indicvision.adapters import ConstantAdapter, VLMAdapter
from multimodal.indicvision.configs import Config
from multimodal.indicvision.data import Dataset, validate
from multimodal.indicvision.judge import RuleJudge
from multimodal.indicvision.model import Tokenizer, VLMGenerator, images_to_float, training_batch

LANGUAGES = synthetic.SYNTHETIC_LANGUAGES


@dataclasses.dataclass
class SyntheticData:
    train: dict[str, Dataset]
    test: dict[str, Dataset]


def make_data(config: Config, seed: int | None = None) -> SyntheticData:
    """Train sets with the config's per-language counts, test sets equal per language. The test sets come from
    their own stream, so two allocations of the training counts are scored on the same test items."""
    seed = config.seed if seed is None else seed
    rng, test_rng = np.random.default_rng(seed), np.random.default_rng([seed, 1])
    size = config.image_size
    counts = {name: dict(zip(LANGUAGES, getattr(config, f"{name}_train"))) for name in ("ocr", "vqa", "mmt")}
    test = {lang: config.test_per_language for lang in LANGUAGES}
    train = {"ocr": validate("ocr", synthetic.ocr_rows(counts["ocr"], rng, size=size, prefix="train-ocr",
                                                        lexicon_size=config.ocr_lexicon)),
             "vqa_indic": validate("vqa_indic", synthetic.vqa_rows(counts["vqa"], rng, size=size, prefix="train-vqa")),
             "mmt": validate("mmt", synthetic.mmt_rows(counts["mmt"], rng, size=size, prefix="train-mmt"))}
    tests = {"ocr": validate("ocr", synthetic.ocr_rows(test, test_rng, size=size, prefix="test-ocr",
                                                        lexicon_size=config.ocr_lexicon)),
             "vqa_indic": validate("vqa_indic", synthetic.vqa_rows(test, test_rng, size=size, prefix="test-vqa")),
             "mmt": validate("mmt", synthetic.mmt_rows(test, test_rng, size=size, prefix="test-mmt"))}
    return SyntheticData(train, tests)


def examples(data: dict[str, Dataset]) -> list[tuple[np.ndarray, str, str, str, str]]:
    """(image, prompt, answer, field, language) for every training target, as the harness will ask them."""
    out = []
    for r in data["ocr"].rows:
        out.append((r["image"], prompts.ocr_prompt(), r["text"], "text", r["language"]))
    answer_of = dict(prompts.VQA_FIELDS)
    for r in data["vqa_indic"].rows:
        for field, answer_field in prompts.VQA_FIELDS:
            out.append((r["image"], prompts.vqa_prompt(r, field), str(r[answer_field]), field, r["language"]))
    for r in data["mmt"].rows:
        for lang in LANGUAGES:
            if r[lang]:
                out.append((r["image"], prompts.mmt_prompt(r["English"], lang), r[lang], "caption", lang))
    del answer_of
    return out


def build_tokenizer(train_examples) -> Tokenizer:
    alphabet = "".join(synthetic.CONSONANTS.values()) + "".join("".join(v) for v in synthetic.VOWEL_SIGNS.values()) \
        + "".join(synthetic.VIRAMA.values())
    return Tokenizer.build([e[1] for e in train_examples], [e[2] for e in train_examples] + [alphabet])


def vlm_config(config: Config, vocab_size: int) -> vlm.VLMConfig:
    heads = config.num_heads
    return vlm.VLMConfig(
        vision=vlm.ViTConfig(image_size=config.image_size, patch_size=config.patch_size, width=config.vit_width,
                             depth=config.vit_depth, heads=max(1, config.vit_width // 16), stem=config.vit_stem),
        lm=LMConfig(vocab_size=vocab_size, hidden_size=config.hidden_size, intermediate_size=2 * config.hidden_size,
                    num_layers=config.num_layers, num_heads=heads, num_kv_heads=heads,
                    head_dim=config.hidden_size // heads, max_position_embeddings=1024))


@dataclasses.dataclass
class Trained:
    model: vlm.VLM
    tokenizer: Tokenizer
    history: list[dict[str, float]]
    prompt_length: int
    max_answer: int
    train_examples: list
    seconds: float


def train(config: Config, data: SyntheticData, *, seed: int | None = None, workdir: pathlib.Path | None = None,
          stop_after: int | None = None) -> Trained | None:
    """The small VLM on the synthetic training mixture. With a workdir, the logged rows go to metrics.jsonl and
    the state, the batch sampler and the history are checkpointed every `ckpt_every` steps; a rerun resumes;
    `stop_after` steps stop early (returns None: the resume test's interruption)."""
    seed = config.seed if seed is None else seed
    train_examples = examples(data.train)
    tokenizer = build_tokenizer(train_examples)
    prompt_tokens = [len(tokenizer.encode_prompt(e[1])) for e in train_examples]
    answer_tokens = [len(e[2]) + 1 for e in train_examples]
    prompt_length = -(-max(prompt_tokens) // 8) * 8
    length = max(p + a for p, a in zip(prompt_tokens, answer_tokens))
    model = vlm.init_vlm(vlm_config(config, tokenizer.vocab_size), jax.random.key(seed))
    images = images_to_float([e[0] for e in train_examples], config.image_size)
    params, _ = vlm.trainable_params(model)
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.lr, min(config.warmup_steps, config.steps),
                                                  max(config.steps, config.warmup_steps + 1), config.lr * 0.05)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01))
    step = make_train_step(vlm.make_loss(model), tx, schedule=schedule)
    state = init_train_state(params, tx, jax.random.key(seed + 1))
    rng = np.random.default_rng(seed + 2)
    history, first = [], 0
    ckpt = log = None
    if workdir is not None:
        from core.checkpoint import Checkpointer
        from core.train import MetricsLog
        ckpt = Checkpointer(pathlib.Path(workdir) / "checkpoints", keep=1, config=config)
        if ckpt.latest_step() is not None:
            state, saved = ckpt.restore(state)
            rng.bit_generator.state, history, first = saved["sampler"], saved["history"], int(saved["step"])
        log = MetricsLog(pathlib.Path(workdir) / "metrics.jsonl", first - 1, config=config)  # rows: 0-based steps
    start = time.time()
    for i in progress(range(first, config.steps), desc="indicvision train", initial=first, total=config.steps):
        if stop_after is not None and i - first >= stop_after:
            ckpt.close()
            log.close()
            return None
        pick = rng.integers(0, len(train_examples), config.batch_size)
        longest = max(prompt_tokens[j] + answer_tokens[j] for j in pick)
        step_of = config.length_bucket
        bucket = min(length, -(-longest // step_of) * step_of) if step_of else length  # few lengths, few compiles
        batch = training_batch(tokenizer, images[pick], [train_examples[j][1] for j in pick],
                               [train_examples[j][2] for j in pick], bucket)
        state, metrics = step(state, jax.tree.map(jnp.asarray, batch))
        if i % 50 == 0 or i == config.steps - 1:
            row = {"step": i, "loss": float(metrics["loss"]), "lr": float(metrics["lr"])}
            history.append(row)
            if log is not None:
                log.write(row)
        if ckpt is not None and ((i + 1) % config.ckpt_every == 0 or i + 1 == config.steps):
            ckpt.save(i + 1, state, data_state={"step": i + 1, "sampler": rng.bit_generator.state,
                                                "history": history})
    if ckpt is not None:
        ckpt.close()
        log.close()
    trained = model._replace(vision_params=state.params["vision"], lm_params=state.params["lm"])
    return Trained(trained, tokenizer, history, prompt_length, max(answer_tokens), train_examples,
                   time.time() - start)


def constant_baseline(train_examples) -> ConstantAdapter:
    return ConstantAdapter.most_frequent([(e[3], e[4], e[2]) for e in train_examples])


def score(adapter: Any, test: dict[str, Dataset]) -> dict[str, dict[str, Any]]:
    return {"ocr": harness.evaluate_ocr(adapter, test["ocr"]),
            "vqa": harness.evaluate_vqa(adapter, test["vqa_indic"], RuleJudge()),
            "mmt": harness.evaluate_mmt(adapter, test["mmt"], targets=LANGUAGES)}


def vlm_adapter(trained: Trained, config: Config) -> VLMAdapter:
    generator = VLMGenerator(trained.model, trained.tokenizer, max_new_tokens=trained.max_answer + 2,
                             prompt_length=trained.prompt_length, batch_size=config.eval_batch_size)
    return VLMAdapter(generator, name="small-vlm")


# The per-language columns every report shows (task, summary column, better direction).
COLUMNS = (("ocr", "anls_char", "lower"), ("ocr", "anls_word", "lower"), ("ocr", "true_anls", "higher"),
           ("vqa", "short_q1", "higher"), ("vqa", "short_q2", "higher"), ("vqa", "mcq", "higher"),
           ("vqa", "true_false_q", "higher"), ("vqa", "long_q", "higher"), ("vqa", "adversarial_question", "higher"),
           ("mmt", "bleu", "higher"), ("mmt", "ribes", "higher"), ("mmt", "chrf_pp", "higher"))


def summary_table(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {lang: {f"{task}_{col}": results[task]["summary"].get(lang, {}).get(col) for task, col, _ in COLUMNS}
            for lang in (*LANGUAGES, "overall")}


def train_and_evaluate(config: Config, workdir: str | pathlib.Path) -> dict[str, Any]:
    """The experiment entry point: data, training, both models scored; metrics.json, results.json, PNG plots."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data = make_data(config)
    trained = train(config, data, workdir=workdir)
    trained.tokenizer.save(workdir / "tokenizer.json")
    results = {"small-vlm": score(vlm_adapter(trained, config), data.test),
               "constant": score(constant_baseline(trained.train_examples), data.test)}
    tables = {name: summary_table(r) for name, r in results.items()}
    (workdir / "results.json").write_text(json.dumps(
        {name: {task: {k: v for k, v in r.items()} for task, r in per.items()} for name, per in results.items()},
        ensure_ascii=False, indent=1, default=str))
    metrics: dict[str, Any] = {"train_seconds": trained.seconds, "final_loss": trained.history[-1]["loss"],
                               "train_examples": len(trained.train_examples),
                               "unscored_fraction": results["small-vlm"]["vqa"]["unscored_fraction"]}
    for name, table in tables.items():
        for lang, row in table.items():
            for column, value in row.items():
                metrics[f"{name}/{lang}/{column}"] = value
    if config.plot:
        plots.line_plot(workdir / "loss.png", {"train": ([h["step"] for h in trained.history],
                                                         [h["loss"] for h in trained.history])},
                        title="small VLM, synthetic IndicVisionBench", xlabel="step", ylabel="answer NLL")
        plots.bar_plot(workdir / "ocr_anls_char.png",
                       {f"{name} {lang}": tables[name][lang]["ocr_anls_char"] for name in tables for lang in LANGUAGES},
                       title="OCR anls_char (released: NED x 100, lower is better)", ylabel="NED x 100")
    write_metrics(workdir, metrics)
    return metrics

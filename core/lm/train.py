"""Train a tiny decoder from scratch on a synthetic task with the core scaffold (`core.train.fit`).

`run(config, workdir)` builds the data (packed rows), trains with AdamW + warmup-cosine, and evaluates
answers two ways: teacher-forced exact match and greedy generation (`core.lm.generate`) exact match.
It writes metrics.json and loss/accuracy plots into workdir.
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core import data as data_lib
from core import plots
from core import train as train_lib
from core.lm import data as lm_data
from core.lm import losses
from core.lm import model as model_lib
from core.lm.configs import TinyLMConfig
from core.lm.generate import SamplingConfig, generate, pad_prompts


def make_datasets(config: TinyLMConfig) -> tuple[dict[str, np.ndarray], list, dict[str, np.ndarray]]:
    """(train rows, eval examples, eval rows) from `config.seed`."""
    need = lm_data.vocab_size_needed(config.task, config.num_symbols)
    if config.model.vocab_size < need:
        raise ValueError(f"model.vocab_size={config.model.vocab_size}: expected >= {need} for task "
                         f"{config.task!r} with {config.num_symbols} symbols")
    rng = np.random.default_rng(config.seed)
    kw = dict(num_symbols=config.num_symbols, min_len=config.min_len, max_len=config.max_len, rng=rng)
    train = lm_data.make_examples(config.task, config.num_train, **kw)
    evals = lm_data.make_examples(config.task, config.num_eval, **kw)
    rows = lm_data.pack(train, config.seq_len) if config.pack else lm_data.to_training_rows(train, config.seq_len)
    width = max(len(p) + len(a) - 1 for p, a in evals)
    return rows, evals, lm_data.to_training_rows(evals, width)


def make_evaluator(config: TinyLMConfig, graphdef, evals, eval_rows):
    """eval(params) -> {"exact_match", "token_acc", "gen_exact_match"} (one compiled program each)."""
    prompts = [p for p, _ in evals]
    answers = [a for _, a in evals]
    tokens, mask = pad_prompts(prompts, pad_id=lm_data.PAD, bucket=8)
    n_new = max(len(a) for a in answers)
    sampling = SamplingConfig(max_new_tokens=n_new, stop_tokens=(lm_data.EOS,), pad_id=lm_data.PAD)
    want = np.full((len(answers), n_new), lm_data.PAD, np.int32)
    for i, a in enumerate(answers):
        want[i, :len(a)] = a
    rows = {k: jnp.asarray(v) for k, v in eval_rows.items()}

    @jax.jit
    def teacher_forced(params):
        out = model_lib.apply(graphdef, params, rows["inputs"], attention_mask=rows["segment_ids"] > 0)
        return losses.answer_metrics(out.logits, rows["targets"], rows["loss_mask"])

    def evaluate(params):
        metrics = dict(teacher_forced(params))
        out = generate(graphdef, params, tokens, mask, jax.random.key(0), sampling)
        metrics["gen_exact_match"] = jnp.mean(jnp.all(out.tokens == want, axis=1).astype(jnp.float32))
        return metrics

    return evaluate


def run(config: TinyLMConfig, workdir: pathlib.Path | str) -> dict[str, float]:
    """Train and evaluate; resumes from workdir. Returns final metrics (also in workdir/metrics.json)."""
    workdir = pathlib.Path(workdir)
    t0 = time.time()
    rows, evals, eval_rows = make_datasets(config)
    graphdef, params = model_lib.init(config.model, jax.random.key(config.seed))
    warmup = min(config.warmup, max(config.steps // 5, 1))
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.lr, warmup, config.steps, config.lr * 0.05)
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(schedule, b2=0.98, weight_decay=config.weight_decay))
    state = train_lib.init_train_state(params, tx, jax.random.key(config.seed))
    step = train_lib.make_train_step(losses.next_token_loss(graphdef), tx)
    evaluate = make_evaluator(config, graphdef, evals, eval_rows)
    batch = min(config.batch_size, rows["inputs"].shape[0])
    loader = data_lib.ArrayLoader(rows, batch, seed=config.seed)
    state, history = train_lib.fit(state, step, loader, num_steps=config.steps, workdir=workdir,
                                   config=config, log_every=config.log_every, ckpt_every=config.steps,
                                   eval_fn=lambda s: evaluate(s.params), eval_every=config.eval_every,
                                   progress_bar=False)
    final = {k: float(v) for k, v in jax.device_get(evaluate(state.params)).items()}
    losses_xy = [(r["step"], r["loss"]) for r in history if "loss" in r]
    plots.line_plot(workdir / "loss.png", {"train loss": tuple(zip(*losses_xy))},
                    title=f"tiny_lm ({config.task})", xlabel="step", ylabel="answer cross-entropy", logy=True)
    acc = [(r["step"], r["eval/gen_exact_match"]) for r in history if "eval/gen_exact_match" in r]
    if acc:
        plots.line_plot(workdir / "accuracy.png", {"greedy exact match": tuple(zip(*acc))},
                        title=f"tiny_lm ({config.task})", xlabel="step", ylabel="exact match")
    metrics = {**final, "final_loss": losses_xy[-1][1] if losses_xy else float("nan"),
               "steps": config.steps, "wall_seconds": time.time() - t0,
               "params": int(sum(np.size(x) for x in jax.tree.leaves(params)))}
    train_lib.write_metrics(workdir, metrics)
    return metrics

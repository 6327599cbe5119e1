"""The TRM experiment: behaviour-clone a policy on oracle + corrupted traces, train the TRM on labelled traces,
then run the RL arms from the same start, per seed; held-out EM, calls per question and call fractions
before and after, TRM AUC on scripted and on policy-sampled calls.

    iclr26 run trm --preset demo --workdir /tmp/trm
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core import data as data_lib
from core import plots
from core import train as train_lib
from core.lm import losses as lm_losses
from core.lm import model as model_lib
from core.optim import OptimizerConfig, make_optimizer
from core.rl.losses import LossConfig
from core.rl.rollout import RolloutConfig, rollout
from core.rl.trainer import RLConfig
from rl_tools.trm.configs import TRMConfig
from rl_tools.trm.data import bc_rows, sample_traces, trm_rows
from rl_tools.trm.model import auc, init_trm, trm_loss, trm_scores
from rl_tools.trm.rl import ARMS, TRMTrainer, call_table, evaluate
from rl_tools.trm.world import EOS, PAD, Question, ToolWorldEnv, World


def rollout_config(config: TRMConfig, group_size: int, temperature: float | None = None) -> RolloutConfig:
    tok = World(config.world).tokenizer
    return RolloutConfig(group_size=group_size, max_new_tokens=config.max_new_tokens, max_turns=config.max_turns,
                         max_response_tokens=config.seq_len, max_prompt_tokens=16, max_observation_tokens=2,
                         temperature=config.temperature if temperature is None else temperature,
                         eos_tokens=(EOS,), tool_stop_sequences=((tok.ids[">"],),), pad_id=PAD, prompt_bucket=16)


def rl_config(config: TRMConfig, algorithm: str, seed: int) -> RLConfig:
    return RLConfig(algorithm=algorithm, steps=config.rl_steps, prompts_per_step=config.prompts_per_step,
                    rollout=rollout_config(config, config.group_size), loss=LossConfig(kl_coef=config.kl_coef),
                    optimizer=OptimizerConfig(lr=config.rl_lr, clip_norm=1.0), seed=seed, gamma=1.0, lam=1.0,
                    ckpt_every=config.rl_steps)


def _fit(params, loss_fn, rows: dict, *, steps: int, batch: int, lr: float, seed: int, workdir: pathlib.Path,
         config) -> tuple:
    tx, _ = make_optimizer(OptimizerConfig(lr=lr, schedule="warmup_cosine", warmup_steps=max(1, steps // 10),
                                           decay_steps=steps, end_lr=lr * 0.1, weight_decay=0.01, clip_norm=1.0))
    state = train_lib.init_train_state(params, tx, jax.random.key(seed))
    step = train_lib.make_train_step(loss_fn, tx)
    state, history = train_lib.fit(state, step, data_lib.ArrayLoader(rows, batch, seed=seed), num_steps=steps,
                                   workdir=workdir, config=config, log_every=max(1, steps // 5), ckpt_every=steps,
                                   progress_bar=False)
    return state.params, history


def behaviour_clone(config: TRMConfig, world: World, seed: int, workdir: pathlib.Path):
    """The policy start: a decoder fitted to oracle + corrupted scripted traces (loss on policy tokens only)."""
    rng = np.random.default_rng([seed, 11])
    traces = sample_traces(world, config.num_bc, rng, clean_fraction=config.clean_fraction)
    graphdef, params = model_lib.init(config.model, jax.random.key(seed))
    params, history = _fit(params, lm_losses.next_token_loss(graphdef), bc_rows(traces, config.seq_len),
                           steps=config.bc_steps, batch=config.bc_batch, lr=config.bc_lr, seed=seed,
                           workdir=workdir, config=config)
    return graphdef, params, {"bc_loss": history[-1]["loss"], "bc_trace_success": float(np.mean(
        [bool(t.correct) for t in traces]))}


def trm_data(config: TRMConfig, world: World, seed: int, num: int, *, kind: str | None = None,
             noise: float | None = None, salt: int = 0) -> dict:
    """Labelled scripted traces (the BC mix of clean and corrupted) as TRM rows."""
    rng = np.random.default_rng([seed, 13, salt])
    traces = sample_traces(world, num, rng, clean_fraction=config.clean_fraction)
    return trm_rows(traces, config.seq_len, config.max_calls, kind=kind or config.label_kind,
                    noise=config.label_noise if noise is None else noise, rng=rng)


def train_trm(config: TRMConfig, graphdef, trunk_params, rows: dict, seed: int, workdir: pathlib.Path,
              *, steps: int | None = None, hidden_size: int | None = None) -> dict:
    params = init_trm(trunk_params, hidden_size or config.model.hidden_size, jax.random.key(seed + 7))
    params, _ = _fit(params, trm_loss(graphdef), rows, steps=steps or config.trm_steps, batch=config.trm_batch,
                     lr=config.trm_lr, seed=seed, workdir=workdir, config=config)
    return params


def trm_auc(graphdef, params, rows: dict, batch: int = 256) -> float:
    """AUC of the TRM's scores on the rows' calls against their labels."""
    scores = []
    for i in range(0, len(rows["tokens"]), batch):
        sl = slice(i, i + batch)
        scores.append(np.asarray(trm_scores(graphdef, params, jnp.asarray(rows["tokens"][sl]),
                                            jnp.asarray(rows["attention"][sl]), jnp.asarray(rows["positions"][sl]))))
    valid = rows["positions"] >= 0
    return auc(np.concatenate(scores)[valid], rows["labels"][valid])


def policy_call_auc(config: TRMConfig, graphdef, policy, trm, world: World, questions: Sequence[Question],
                    key: jax.Array, kind: str = "product") -> float:
    """AUC on calls the policy itself samples (the distribution the TRM scores during RL)."""
    tok = world.tokenizer
    env = ToolWorldEnv(world)
    roll = rollout(graphdef, policy, [tok.encode(q.text) for q in questions], [env] * len(questions),
                   list(questions), tok, key, rollout_config(config, config.eval_samples))
    table = call_table(world, [questions[g] for g in roll.group], roll)
    scores = np.asarray(trm_scores(trm[0], trm[1], jnp.asarray(roll.tokens), jnp.asarray(roll.attention),
                                   jnp.asarray(table.obs_ends)))
    scored = table.obs_ends >= 0
    labels = {"product": table.product, "quality": table.quality, "necessity": table.necessity}[kind]
    return auc(scores[scored], labels[scored])


def questions_for(world: World, n: int, seed: int, salt: int) -> list[Question]:
    rng = np.random.default_rng([seed, 17, salt])
    return [world.sample_question(rng) for _ in range(n)]


def run_arm(config: TRMConfig, arm: str, seed: int, graphdef, start, trm, world: World,
            train_questions: Sequence[Question], eval_questions: Sequence[Question], workdir: pathlib.Path,
            *, alpha: float | None = None, progress_bar: bool = True, mesh=None, trainers: dict | None = None
            ) -> dict:
    """One RL run from the BC start; returns the held-out metrics after it and the training curve. trainers:
    a dict (algorithm -> TRMTrainer) shared between runs, so each algorithm compiles its update once."""
    a = ARMS[arm]
    alpha = (config.alpha_ppo if a.algorithm == "ppo" else config.alpha_grpo) if alpha is None else alpha
    if trainers is not None and a.algorithm in trainers:  # reuse the compiled update of an earlier run
        trainer = trainers[a.algorithm].restart(start, arm=arm, alpha=alpha, seed=seed, questions=train_questions,
                                                trm=trm)
    else:
        trainer = TRMTrainer(rl_config(config, a.algorithm, seed), graphdef, start, arm=arm, alpha=alpha,
                             world=world, questions=train_questions, trm=trm, mesh=mesh)
        if trainers is not None:
            trainers[a.algorithm] = trainer
    history = trainer.train(workdir, progress_bar=progress_bar)
    final = evaluate(graphdef, trainer.policy_params(), world, eval_questions,
                     rollout_config(config, config.eval_samples), jax.random.key(seed + 1000))
    return {"final": final, "history": history, "alpha": alpha}


def run(config: TRMConfig, workdir: pathlib.Path | str) -> dict:
    """BC, TRM, then every arm per seed. Writes metrics.json, curves (calls per question, EM) and AUC plots."""
    workdir = pathlib.Path(workdir)
    t0 = time.time()
    world = World(config.world)
    per_seed, curves, trainers = [], {}, {}
    for seed in config.seeds:
        graphdef, start, bc = behaviour_clone(config, world, seed, workdir / f"bc_seed{seed}")
        train_q = questions_for(world, config.num_prompts, seed, 0)
        eval_q = questions_for(world, config.eval_questions, seed, 1)
        record = {"seed": seed, **bc}
        start_metrics = evaluate(graphdef, start, world, eval_q, rollout_config(config, config.eval_samples),
                                 jax.random.key(seed + 1000))
        record.update({f"start/{k}": v for k, v in start_metrics.items()})
        trm = None
        if any(ARMS[a].reward in ("trm", "orm") for a in config.arms):
            rows = trm_data(config, world, seed, config.num_trm)
            held = trm_data(config, world, seed, config.num_trm_eval, noise=0.0, salt=1)
            trm = (graphdef, train_trm(config, graphdef, start, rows, seed, workdir / f"trm_seed{seed}"))
            record["trm_auc_scripted"] = trm_auc(*trm, held)
            record["trm_auc_policy"] = policy_call_auc(config, graphdef, start, trm, world, eval_q,
                                                       jax.random.key(seed + 2000))
        for arm in config.arms:
            out = run_arm(config, arm, seed, graphdef, start, trm, world, train_q, eval_q,
                          workdir / f"{arm}_seed{seed}", trainers=trainers)
            record.update({f"{arm}/{k}": v for k, v in out["final"].items()})
            curves[(arm, seed)] = out["history"]
        per_seed.append(record)
    _plots(workdir, curves)
    metrics = {"per_seed": per_seed, "wall_seconds": time.time() - t0}
    for key in per_seed[0]:
        if key != "seed":
            metrics[f"mean/{key}"] = float(np.mean([r[key] for r in per_seed]))
    train_lib.write_metrics(workdir, metrics)
    return metrics


def _plots(workdir: pathlib.Path, curves: dict) -> None:
    for name, key in (("calls_per_question", "calls/calls_per_question"), ("exact_match", "calls/exact_match"),
                      ("necessary_fraction", "calls/necessary_fraction")):
        series = {f"{a} seed {s}": tuple(zip(*[(r["step"], r[key]) for r in h if key in r]))
                  for (a, s), h in curves.items()}
        series = {k: v for k, v in series.items() if v}
        if series:
            plots.line_plot(workdir / f"{name}.png", series, title=f"trm: {name} per RL step (on-policy samples)",
                            xlabel="RL step", ylabel=name)

"""run(config, workdir): PPO on every (task, reward arm, seed) of the config, all runs vmapped in one jit (a task
and its reward arm are data), then mean-action evaluation with the plan's metrics, metrics.json, learning
curves, a completion bar chart and frame strips (PNG) in the run folder.

Runs of the same seed index share their initial parameters and their environment start states across arms
and tasks (common random numbers), so the arms are compared paired over seeds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import time
from typing import Any

import jax
import numpy as np

from core import plots
from core import train as train_lib
from generative.hoi import env as env_lib
from generative.hoi import metrics as metrics_lib
from generative.hoi import ppo, render
from generative.hoi.configs import HOIConfig
from generative.hoi.planner import TemplatePlanner


@dataclasses.dataclass
class GridResult:
    runs: list[tuple[str, str, int]]  # (task, arm, seed index)
    curves: dict[str, np.ndarray]  # metric -> (runs, updates)
    evals: list[dict[str, float]]  # one per run
    evals_untrained: list[dict[str, float]]  # the same evaluation of each run's initial policy (chance level)
    strips: list[Any]  # the first eval episode's scene states per run (T, ...)
    compile_seconds: float
    train_seconds: float
    env_steps: int  # training env steps over all runs


def run_grid(config: HOIConfig, *, progress_bar: bool = True, workdir: pathlib.Path | None = None,
             stop_after_chunks: int | None = None) -> GridResult | None:
    """Train every (task, arm, seed) of `config` together and evaluate each run. With a workdir, every chunk of
    updates is logged to metrics.jsonl (means over runs) and checkpointed (all runs' parameters, optimiser and
    PRNG states, the curves so far), and a rerun resumes from the last chunk; `stop_after_chunks` stops early
    (returns None: the resume test's interruption)."""
    c = config
    runs = [(t, a, s) for t in c.task_names for a in c.arms for s in range(c.seeds)]
    tasks = env_lib.stack_tasks([env_lib.make_task(t, a) for t, a, _ in runs])
    base = jax.random.key(c.seed)
    keys = jax.numpy.stack([jax.random.fold_in(base, s) for _, _, s in runs])
    init, chunk, evaluate, _ = ppo.make_train(c)
    rs = jax.jit(jax.vmap(init))(keys, tasks)
    eval_keys = jax.numpy.stack([jax.random.fold_in(jax.random.key(c.seed + 10_000), s) for _, _, s in runs])
    run_eval = jax.jit(jax.vmap(evaluate))
    scene = env_lib.make_scene(c.scene)
    score = jax.jit(jax.vmap(lambda f, t: metrics_lib.episode_metrics(f, t, c.dt, scene)))

    def evaluate_all(params):
        final, _, strips = run_eval(params, tasks, eval_keys)
        per_run = jax.device_get(score(final, tasks))
        return [{k: float(v[i]) for k, v in per_run.items()} for i in range(len(runs))], jax.device_get(strips)

    evals_untrained, _ = evaluate_all(rs.params)
    step = jax.jit(jax.vmap(chunk), donate_argnums=0)
    curves: dict[str, list[np.ndarray]] = {}
    n_chunks = c.n_updates // c.chunk
    start, ckpt, log = 0, None, None
    if workdir is not None:
        from core.checkpoint import Checkpointer
        ckpt = Checkpointer(pathlib.Path(workdir) / "checkpoints", keep=1, config=config)
        if ckpt.latest_step() is not None:
            rs, saved = ckpt.restore(rs)
            curves = {k: [np.asarray(v, np.float32)] for k, v in saved["curves"].items()}
            start = int(saved["chunks"])
        log = train_lib.MetricsLog(pathlib.Path(workdir) / "metrics.jsonl", start * c.chunk, config=config)
    t0 = time.perf_counter()
    compile_seconds = 0.0
    bar = train_lib.progress(total=n_chunks * c.chunk, initial=start * c.chunk, desc="hoi ppo updates",
                             disable=not progress_bar)
    try:
        for i in range(start, n_chunks):
            if stop_after_chunks is not None and i - start >= stop_after_chunks:
                return None
            rs, m = step(rs, tasks)
            m = jax.device_get(m)
            if i == start:
                compile_seconds = time.perf_counter() - t0  # the first call compiles (and runs one chunk)
            if not np.all(np.isfinite(m["loss"])):
                raise FloatingPointError(f"hoi: non-finite PPO loss in updates {i * c.chunk}..{(i + 1) * c.chunk - 1}")
            for k, v in m.items():
                curves.setdefault(k, []).append(np.asarray(v))
            if log is not None:  # the chunk's last update, averaged over runs
                last = {k: np.asarray(v)[:, -1] for k, v in m.items()}  # NaN where a metric is undefined
                log.write({"step": (i + 1) * c.chunk, **{k: float(np.nanmean(v)) for k, v in last.items()
                                                         if np.isfinite(v).any()}})
                ckpt.save((i + 1) * c.chunk, rs, data_state={
                    "chunks": i + 1, "curves": {k: np.concatenate(v, axis=1).tolist() for k, v in curves.items()}})
            bar.update(c.chunk)
            bar.set_postfix(completion=f"{float(np.mean(m['completion'][:, -1])):.2f}")
    finally:
        bar.close()
        if ckpt is not None:
            ckpt.close()
            log.close()
    train_seconds = time.perf_counter() - t0
    evals, strips = evaluate_all(rs.params)
    return GridResult(runs=runs, curves={k: np.concatenate(v, axis=1) for k, v in curves.items()}, evals=evals,
                      evals_untrained=evals_untrained,
                      strips=[jax.tree.map(lambda x, i=i: x[i], strips) for i in range(len(runs))],
                      compile_seconds=compile_seconds, train_seconds=train_seconds,
                      env_steps=len(runs) * c.env_steps_per_run)


def summarise(result: GridResult) -> dict[str, dict[str, float]]:
    """Mean over seeds of every eval metric, keyed "task/arm" (NaNs skipped)."""
    out: dict[str, dict[str, float]] = {}
    for (t, a, _), ev in zip(result.runs, result.evals):
        out.setdefault(f"{t}/{a}", {k: [] for k in ev})
        for k, v in ev.items():
            out[f"{t}/{a}"][k].append(v)
    return {name: {k: (float(np.nanmean(v)) if np.any(np.isfinite(v)) else math.nan) for k, v in d.items()}
            for name, d in out.items()}


def run(config: HOIConfig, workdir: str | pathlib.Path) -> dict[str, Any]:
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result = run_grid(config, workdir=workdir)
    summary = summarise(result)
    # plots: completion curves per task, final completion bars, one frame strip per task and arm (seed 0)
    x = np.arange(1, result.curves["completion"].shape[1] + 1)
    for n, task in enumerate(config.task_names):
        curves = {}
        for arm in config.arms:
            idx = [i for i, (t, a, _) in enumerate(result.runs) if t == task and a == arm]
            curves[arm] = (x, result.curves["completion"][idx].mean(0))
        stem = task if task in env_lib.TASKS else f"command{n}"
        plots.line_plot(workdir / f"completion_{stem}.png", curves, title=f"{task}: training completion",
                        xlabel="PPO update", ylabel="completion rate")
    plots.bar_plot(workdir / "completion.png", {k: v["completion"] for k, v in summary.items()},
                   title="eval completion (mean-action policy)", ylabel="completion rate")
    for i, (t, a, s) in enumerate(result.runs):
        if s == 0:
            plan = TemplatePlanner()(env_lib.TASKS[t][0] if t in env_lib.TASKS else t)
            goals = [sub.goal.position for sub in plan.subtasks if sub.goal is not None and sub.goal.position]
            goal = goals[-1] if goals else None
            name = t if t in env_lib.TASKS else "command"
            render.frame_strip(workdir / f"frames_{name}_{a}.png", result.strips[i], frames=config.strip_frames,
                               goal=goal, title=f"{t}/{a}")
    metrics: dict[str, Any] = {f"{name}/{k}": v for name, d in summary.items() for k, v in d.items()}
    metrics.update(compile_seconds=result.compile_seconds, train_seconds=result.train_seconds,
                   env_steps=result.env_steps, env_steps_per_second=result.env_steps / result.train_seconds,
                   runs=len(result.runs))
    (workdir / "runs.json").write_text(json.dumps(
        [{"task": t, "arm": a, "seed": s, **ev} for (t, a, s), ev in zip(result.runs, result.evals)], indent=1))
    (workdir / "curves.json").write_text(json.dumps(
        {"runs": [list(r) for r in result.runs],
         **{k: np.round(v, 5).tolist() for k, v in result.curves.items()}}))
    train_lib.write_metrics(workdir, metrics)
    return metrics

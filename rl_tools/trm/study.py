"""The measurements behind the claims: per seed, every RL run from one BC start (arms, alpha sweeps, label
ablations), and the TRM AUC over data size x width. Each finished run is one row, handed to `on_row` as it
finishes, so a benchmark can keep rows and resume (rows are keyed by seed and run name)."""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import jax
import numpy as np

from core.lm import model as model_lib
from rl_tools.trm.configs import TRMConfig, policy_model
from rl_tools.trm.data import LABEL_KINDS
from rl_tools.trm.rl import ARMS, evaluate
from rl_tools.trm.train import (
    behaviour_clone,
    policy_call_auc,
    questions_for,
    rollout_config,
    run_arm,
    train_trm,
    trm_auc,
    trm_data,
)
from rl_tools.trm.world import World


class RunSpec(NamedTuple):
    """One RL run: an arm, its alpha (None: the config's), and the label the TRM was trained on."""

    name: str
    arm: str
    alpha: float | None = None
    label_kind: str = "product"


def claim_runs(alphas: Sequence[float] = (0.05, 0.2, 1.0), main_alpha: float = 0.2) -> list[RunSpec]:
    """The runs the benchmark's claims need: every arm at main_alpha, turn-level GRPO and PPO over `alphas`,
    turn-level GRPO with quality-only and necessity-only TRMs."""
    runs = [RunSpec("grpo_outcome", "grpo_outcome"), RunSpec("ppo_outcome", "ppo_outcome"),
            RunSpec("grpo_oracle_turn", "grpo_oracle_turn", main_alpha)]
    for name in ("grpo_trm_group", "grpo_orm"):
        runs.append(RunSpec(name, name, main_alpha))
    for a in alphas:
        runs.append(RunSpec(f"grpo_trm_turn@{a:g}", "grpo_trm_turn", a))
        runs.append(RunSpec(f"ppo_trm@{a:g}", "ppo_trm", a))
    for kind in ("quality", "necessity"):
        runs.append(RunSpec(f"grpo_trm_turn[{kind}]", "grpo_trm_turn", main_alpha, kind))
    return runs


def _curve(history: list[dict], key: str) -> tuple[float, float]:
    values = [r[key] for r in history if key in r]
    return float(np.mean(values[:3])), float(np.mean(values[-3:]))


def run_seed(config: TRMConfig, seed: int, runs: Sequence[RunSpec], workdir: pathlib.Path, *,
             skip: Iterable[str] = (), on_row: Callable[[dict], None] = lambda row: None,
             progress_bar: bool = False) -> list[dict]:
    """BC start, the TRMs the runs need (with their AUCs), then each run not in `skip`; returns the rows.

    Row "start": the BC policy's held-out metrics and each TRM's AUC (scripted held-out calls, and calls the BC
    policy samples, both against the necessity x quality label). Row per run: held-out metrics after RL, the
    on-policy calls per question and necessary fraction over the first and last 3 steps."""
    for r in runs:
        if r.arm not in ARMS or r.label_kind not in LABEL_KINDS:
            raise ValueError(f"run {r.name!r}: arm {r.arm!r} / label_kind {r.label_kind!r} unknown")
    skip = set(skip)
    todo = [r for r in runs if r.name not in skip]
    if not todo and "start" in skip:
        return []
    world = World(config.world)
    t0 = time.perf_counter()
    graphdef, start, bc = behaviour_clone(config, world, seed, workdir / f"bc_seed{seed}")
    train_q = questions_for(world, config.num_prompts, seed, 0)
    eval_q = questions_for(world, config.eval_questions, seed, 1)
    rows: list[dict] = []
    kinds = sorted({r.label_kind for r in todo if ARMS[r.arm].reward in ("trm", "orm")} |
                   (set() if "start" in skip else set(LABEL_KINDS)))
    trms, start_row = {}, {"seed": seed, "run": "start", **bc}
    held = trm_data(config, world, seed, config.num_trm_eval, kind="product", noise=0.0, salt=1)
    for kind in kinds:
        rows_k = trm_data(config, world, seed, config.num_trm, kind=kind)
        trms[kind] = (graphdef, train_trm(config, graphdef, start, rows_k, seed, workdir / f"trm_{kind}_seed{seed}"))
        start_row[f"auc_scripted[{kind}]"] = trm_auc(*trms[kind], held)
        start_row[f"auc_policy[{kind}]"] = policy_call_auc(config, graphdef, start, trms[kind], world, eval_q,
                                                           jax.random.key(seed + 2000))
    if "start" not in skip:
        start_row.update(evaluate(graphdef, start, world, eval_q, rollout_config(config, config.eval_samples),
                                  jax.random.key(seed + 1000)))
        start_row["seconds"] = time.perf_counter() - t0
        rows.append(start_row)
        on_row(start_row)
    trainers: dict = {}
    for r in todo:
        t0 = time.perf_counter()
        out = run_arm(config, r.arm, seed, graphdef, start, trms.get(r.label_kind), world, train_q, eval_q,
                      workdir / f"{r.name}_seed{seed}", alpha=r.alpha, progress_bar=progress_bar,
                      trainers=trainers)
        calls0, calls1 = _curve(out["history"], "calls/calls_per_question")
        nec0, nec1 = _curve(out["history"], "calls/necessary_fraction")
        row = {"seed": seed, "run": r.name, "arm": r.arm, "alpha": out["alpha"], "label_kind": r.label_kind,
               **out["final"], "train_calls_first": calls0, "train_calls_last": calls1,
               "train_necessary_first": nec0, "train_necessary_last": nec1,
               "train_reward_last": _curve(out["history"], "reward")[1], "seconds": time.perf_counter() - t0}
        rows.append(row)
        on_row(row)
    return rows


def auc_sweep(config: TRMConfig, seed: int, sizes: Sequence[int], widths: Sequence[int], workdir: pathlib.Path,
              *, on_row: Callable[[dict], None] = lambda row: None, skip: Iterable[str] = ()) -> list[dict]:
    """TRM AUC on held-out scripted calls for each (training trajectories, trunk width); trunks start from
    random init (no BC per width), the same number of steps for every size."""
    world = World(config.world)
    held = trm_data(config, world, seed, config.num_trm_eval, kind="product", noise=0.0, salt=1)
    skip = set(skip)
    rows = []
    for width in widths:
        model = policy_model(width, config.model.num_layers, config.world)
        graphdef, init = model_lib.init(model, jax.random.key(seed))
        cfg = dataclasses.replace(config, model=model)
        for size in sizes:
            name = f"auc_sweep_w{width}_n{size}"
            if name in skip:
                continue
            t0 = time.perf_counter()
            data = trm_data(cfg, world, seed, size, salt=2)
            params = train_trm(cfg, graphdef, init, data, seed, workdir / f"{name}_seed{seed}")
            row = {"seed": seed, "run": name, "width": width, "trajectories": size,
                   "auc": trm_auc(graphdef, params, held), "seconds": time.perf_counter() - t0}
            rows.append(row)
            on_row(row)
    return rows

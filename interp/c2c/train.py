"""Train the two models, the fuser (both models frozen), evaluate every condition and time the two channels.

`run_world(config)` is one seed of the whole experiment (the benchmark calls it per seed); `run(config,
workdir)` is the CLI entry: one seed, metrics.json and plots in workdir.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core import data as core_data
from core import plots
from core import train as train_lib
from core.config import ConfigError
from core.lm import data as lm_data
from core.lm import losses as lm_losses
from core.lm import model as model_lib
from interp.c2c import communicate as comm
from interp.c2c import data as data_lib
from interp.c2c.configs import C2CConfig, FuserConfig, LMTrainConfig
from interp.c2c.fuser import init_fuser, layer_mapping

CONDITIONS = ("receiver", "sharer", "t2t", "c2c", "oracle")


def _adamw(lr: float, steps: int, warmup: int, weight_decay: float, clip: float = 1.0):
    warmup = max(1, min(warmup, steps // 5 or 1))
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1), lr * 0.05)
    return optax.chain(optax.clip_by_global_norm(clip), optax.adamw(schedule, b2=0.98, weight_decay=weight_decay))


def _train(state, step, loader, num_steps: int, *, desc: str, every: int, workdir: pathlib.Path | None,
           keys: tuple[str, ...]):
    """`num_steps` steps; returns (state, [(step, *metrics[keys])]). With a workdir the loop is core.train.fit's:
    metrics.jsonl (interval means every `every` steps) and checkpoints in it, resumed when it holds one; without,
    single-step values at steps 0, every, 2 every, ... and the last."""
    if workdir is not None:
        state, records = train_lib.fit(state, step, loader, num_steps=num_steps, workdir=workdir, log_every=every,
                                       ckpt_every=max(every, num_steps // 4), keep=1)
        return state, [(r["step"], *(r[k] for k in keys)) for r in records if all(k in r for k in keys)]
    history = []
    for i in train_lib.progress(range(num_steps), desc=desc):
        state, metrics = step(state, next(loader))
        if i % every == 0 or i == num_steps - 1:
            history.append((i, *(metrics[k] for k in keys)))
    return state, [tuple(float(x) if j else int(x) for j, x in enumerate(h)) for h in jax.device_get(history)]


def train_lm(lm_config, examples: list, cfg: LMTrainConfig, key: jax.Array, *, desc: str, seed: int,
             workdir: pathlib.Path | None = None):
    """A from-scratch `core.lm` decoder on (prompt, answer) examples (CE on answers). Returns (graphdef,
    params, losses)."""
    width = max(len(p) + len(a) - 1 for p, a in examples)
    rows = lm_data.to_training_rows(examples, width)
    graphdef, params = model_lib.init(lm_config, key)
    tx = _adamw(cfg.lr, cfg.steps, cfg.warmup, cfg.weight_decay)
    state = train_lib.init_train_state(params, tx, key)
    step = train_lib.make_train_step(lm_losses.next_token_loss(graphdef), tx)
    loader = core_data.ArrayLoader(rows, min(cfg.batch_size, len(examples)), seed=seed)
    state, history = _train(state, step, loader, cfg.steps, desc=desc, every=50, workdir=workdir, keys=("loss",))
    return graphdef, state.params, history


def split_prompts(examples: list) -> dict[str, np.ndarray]:
    """Section tokens (left-padded, the prompt without its last token), response inputs and targets."""
    sections = [p[:-1] for p, _ in examples]
    tokens, mask = data_lib.left_pad(sections)
    inputs = np.asarray([[p[-1], *a[:-1]] for p, a in examples], np.int32)
    targets = np.asarray([a for _, a in examples], np.int32)
    return {"tokens": tokens, "mask": mask, "inputs": inputs, "targets": targets}


def precompute_sections(pair: comm.Pair, receiver_params, sharer_params, examples: list,
                        chunk: int = 256) -> dict[str, np.ndarray]:
    """The frozen models' section caches for every fuser example, batch-major (host arrays)."""
    parts = split_prompts(examples)
    fn = jax.jit(comm.section_caches, static_argnames=("pair", "extra_slots"))
    out = {k: [] for k in ("receiver_k", "receiver_v", "sharer_k", "sharer_v")}
    for i in range(0, len(examples), chunk):
        rc, sc = fn(pair, receiver_params, sharer_params, parts["tokens"][i:i + chunk],
                    parts["mask"][i:i + chunk], extra_slots=0)
        for name, c in (("receiver", rc), ("sharer", sc)):
            out[f"{name}_k"].append(np.asarray(jnp.moveaxis(c.k, 0, 1)))
            out[f"{name}_v"].append(np.asarray(jnp.moveaxis(c.v, 0, 1)))
    arrays = {k: np.concatenate(v) for k, v in out.items()}
    return {**arrays, "mask": parts["mask"], "inputs": parts["inputs"], "targets": parts["targets"]}


def make_fuser_step(pair: comm.Pair, fuser_cfg: FuserConfig, **shardings):
    tx = _adamw(fuser_cfg.lr, fuser_cfg.steps, int(fuser_cfg.warmup_fraction * fuser_cfg.steps),
                fuser_cfg.weight_decay, fuser_cfg.clip_norm)
    return tx, train_lib.make_train_step(comm.fuser_loss(pair), tx, **shardings)


def fuser_batch(arrays: dict[str, np.ndarray], index: np.ndarray, step: int) -> comm.FuserBatch:
    return comm.FuserBatch(**{k: arrays[k][index] for k in ("receiver_k", "receiver_v", "sharer_k", "sharer_v",
                                                             "mask", "inputs", "targets")},
                           step=np.full((len(index),), step, np.int32))


class _FuserLoader:
    """Batches of distinct fuser examples drawn with a seeded generator; `state()` / `restore()` (the number of
    draws made, replayed on restore) let core.train.fit resume it exactly."""

    def __init__(self, arrays: dict[str, np.ndarray], batch_size: int, seed: int):
        self.arrays, self.batch_size, self.seed = arrays, batch_size, seed
        self.num_rows = len(arrays["inputs"])
        self.restore({"draws": 0})

    def __next__(self) -> comm.FuserBatch:
        index = self.rng.choice(self.num_rows, self.batch_size, replace=False)
        self.draws += 1
        return fuser_batch(self.arrays, index, self.draws - 1)

    def state(self) -> dict[str, int]:
        return {"draws": self.draws, "seed": self.seed}

    def restore(self, state) -> None:
        self.rng, self.draws = np.random.default_rng(self.seed), 0
        for _ in range(int(state["draws"])):
            next(self)


def train_fuser(pair: comm.Pair, receiver_params, sharer_params, examples: list, key: jax.Array, *, seed: int,
                desc: str = "fuser", workdir: pathlib.Path | None = None):
    """The fuser on the mixture, both models frozen. Returns (params, history [(step, loss, acc, gate)])."""
    cfg = pair.fuser
    arrays = precompute_sections(pair, receiver_params, sharer_params, examples)
    _, params = init_fuser(pair.sharer, pair.receiver, cfg, key)
    tx, step = make_fuser_step(pair, cfg)
    state = train_lib.init_train_state(params, tx, jax.random.fold_in(key, 1),
                                       frozen={"receiver": receiver_params, "sharer": sharer_params})
    loader = _FuserLoader(arrays, min(cfg.batch_size, len(examples)), seed)
    state, history = _train(state, step, loader, cfg.steps, desc=desc, every=25, workdir=workdir,
                            keys=("loss", "answer_acc", "gate_mean"))
    return state.params, history


def _accuracy(logits, answers) -> float:
    return float(np.mean(np.asarray(jnp.argmax(logits, -1)) == np.asarray(answers)))


def evaluate(pair: comm.Pair, fuser_params, receiver_params, sharer_params, world: data_lib.World, *,
             baselines: bool = True) -> dict[str, dict[str, float]]:
    """Greedy first-token exact match of every condition on the held-out questions, per kind (`city`,
    `two_hop`). Both kinds go through each program in one left-padded batch (one compile per condition).
    `baselines=False`: C2C and the receiver alone only (the role-swapped pair)."""
    kinds = ("city", "two_hop")
    tests = {kind: data_lib.test_examples(world, kind) for kind in kinds}
    rows = [(kind, p, a) for kind in kinds for p, a in tests[kind]]
    tokens, mask = data_lib.left_pad([p for _, p, _ in rows])
    answers = np.asarray([a[0] for _, _, a in rows])
    which = np.asarray([kind for kind, _, _ in rows])

    def acc(logits):
        hit = np.asarray(jnp.argmax(logits, -1)) == answers
        return {kind: float(hit[which == kind].mean()) for kind in kinds}

    per = {}
    c2c, _ = comm.c2c_logits(pair, fuser_params, receiver_params, sharer_params, tokens, mask)
    per["c2c"] = acc(c2c)
    per["receiver"] = acc(comm.lm_logits(pair.receiver_graphdef, receiver_params, tokens, mask))
    closed, _ = comm.c2c_logits(pair, comm.close_gates(fuser_params), receiver_params, sharer_params, tokens, mask)
    alone, _ = comm.c2c_logits(pair, fuser_params, receiver_params, sharer_params, tokens, mask, fuse=False)
    diff = float(jnp.max(jnp.abs(closed - alone)))  # two compiled programs: equal up to float rounding
    cache_diff = float(comm.closed_cache_difference(pair, fuser_params, receiver_params, sharer_params, tokens,
                                                    mask))
    if baselines:
        per["sharer"] = acc(comm.lm_logits(pair.sharer_graphdef, sharer_params, tokens, mask))
        # diagnostic: the sharer in its own format (no answer cue), i.e. what it knows
        per["sharer_native"] = acc(comm.lm_logits(pair.sharer_graphdef, sharer_params, tokens[:, :-1], mask[:, :-1]))
        entities = [int(e) for _ in kinds for e in world.groups["test"]]
        requests = np.asarray([world.statement(e)[0] for e in entities], np.int32)
        qt, qm = data_lib.left_pad([p[1:] for _, p, _ in rows])
        logits, hint = comm.t2t_logits(pair, receiver_params, sharer_params, requests, qt, qm)
        per["t2t"] = acc(logits)
        true_hints = np.asarray([world.hint(int(e)) for kind in kinds for e in world.groups["test"]])
        exact = np.all(np.asarray(hint) == true_hints, axis=1)
        per["hint_exact"] = {kind: float(exact[which == kind].mean()) for kind in kinds}
        per["oracle"] = {}
        for kind in kinds:
            hinted = np.asarray([world.hinted_qa(kind, e)[0] for e in world.groups["test"]], np.int32)
            logits = comm.enriched_logits(pair.receiver, pair.receiver_graphdef, receiver_params, hinted)
            per["oracle"][kind] = float(np.mean(np.asarray(jnp.argmax(logits, -1)) ==
                                                np.asarray([a[0] for _, a in tests[kind]])))
    out = {kind: {cond: v[kind] for cond, v in per.items()} for kind in kinds}
    for kind in kinds:
        out[kind]["closed_gate_max_abs_diff"] = diff
        out[kind]["closed_gate_cache_max_abs_diff"] = cache_diff
    return out


def measure_latency(pair: comm.Pair, fuser_params, receiver_params, sharer_params, world: data_lib.World,
                    kind: str, queries: int, hint_tokens: int, answer_tokens: int) -> dict[str, float]:
    """Wall seconds per single query (batch 1, compiled, the four programs interleaved), medians over `queries`:
    - `t2t_seconds` / `c2c_seconds`: this world's task. T2T = the sharer writing its 2-word hint + the receiver
      reading it; C2C = both prefills + fuser + the receiver's step; the answer is one token.
    - `t2t_generate_seconds` / `c2c_generate_seconds`: the reference's lengths. T2T = the sharer writing
      `hint_tokens` tokens, the receiver reading them and writing `answer_tokens`; C2C = both prefills + fuser +
      the receiver writing `answer_tokens`."""
    test = data_lib.test_examples(world, kind)
    times = {"t2t": [], "c2c": [], "t2t_generate": [], "c2c_generate": []}
    for i in range(queries + 1):  # query 0 compiles the programs and is dropped
        prompt, _ = test[i % len(test)]
        tokens, mask = data_lib.left_pad([prompt])
        request = np.asarray([world.statement(int(world.groups["test"][i % len(test)]))[0]], np.int32)
        question, question_mask = data_lib.left_pad([prompt[1:]])
        calls = {
            "t2t": lambda: comm.t2t_logits(pair, receiver_params, sharer_params, request, question, question_mask),
            "c2c": lambda: comm.c2c_logits(pair, fuser_params, receiver_params, sharer_params, tokens, mask),
            "t2t_generate": lambda: comm.t2t_generate(pair, receiver_params, sharer_params, request, question,
                                                      question_mask, hint_tokens, answer_tokens),
            "c2c_generate": lambda: comm.c2c_generate(pair, fuser_params, receiver_params, sharer_params, tokens,
                                                      mask, answer_tokens)}
        for name, call in calls.items():
            t0 = time.perf_counter()
            jax.block_until_ready(call())
            if i:
                times[name].append(time.perf_counter() - t0)
    out = {f"{k}_seconds": float(np.median(v)) for k, v in times.items()}
    return {**out, "latency_hint_tokens": hint_tokens, "latency_answer_tokens": answer_tokens}


def _check_vocab(config: C2CConfig, world: data_lib.World) -> None:
    for role in ("receiver", "sharer"):
        v = getattr(config, role).vocab_size
        if v < world.vocab_size:
            raise ConfigError(f"{role}.vocab_size={v}: expected >= {world.vocab_size} (the world's vocabulary)")


def run_world(config: C2CConfig, *, progress_desc: str = "", workdir: pathlib.Path | None = None) -> dict:
    """One seed: world, both models, the fuser (and the role-swapped one), evaluation and latency. With a workdir
    each training stage logs and checkpoints in its subfolder (receiver/, sharer/, fuser_main/, fuser_swapped/)
    and a rerun resumes it."""
    stage = (lambda name: workdir / name) if workdir is not None else (lambda name: None)
    if config.uses_hf:
        from interp.c2c.hf import run_hf
        return run_hf(config)
    t0 = time.time()
    seed = config.seed
    w = config.world
    world = data_lib.make_world(num_recv=w.num_recv, num_hint=w.num_hint, num_fuse=w.num_fuse, num_test=w.num_test,
                                num_cities=w.num_cities, num_colours=w.num_colours, seed=seed)
    _check_vocab(config, world)
    layer_mapping(config.receiver.num_layers, config.sharer.num_layers, config.fuser.mapping)
    key = jax.random.key(seed)
    rng = np.random.default_rng(seed)
    tag = f"{progress_desc}seed {seed}: "
    r_gd, r_params, r_hist = train_lm(config.receiver, data_lib.receiver_examples(world, rng), config.receiver_train,
                                      jax.random.fold_in(key, 1), desc=tag + "receiver", seed=seed,
                                      workdir=stage("receiver"))
    s_gd, s_params, s_hist = train_lm(config.sharer, data_lib.sharer_examples(world), config.sharer_train,
                                      jax.random.fold_in(key, 2), desc=tag + "sharer", seed=seed,
                                      workdir=stage("sharer"))
    result = {"seed": seed, "world_vocab": world.vocab_size, "lm_seconds": time.time() - t0,
              "receiver_loss": r_hist, "sharer_loss": s_hist}
    roles = [("main", (config.receiver, r_gd, r_params), (config.sharer, s_gd, s_params))]
    if config.swap_roles:
        roles.append(("swapped", (config.sharer, s_gd, s_params), (config.receiver, r_gd, r_params)))
    for name, (rc, rgd, rp), (sc, sgd, sp) in roles:
        t1 = time.time()
        fgd, _ = init_fuser(sc, rc, config.fuser, jax.random.key(0))
        pair = comm.Pair(receiver=rc, receiver_graphdef=rgd, sharer=sc, sharer_graphdef=sgd, fuser=config.fuser,
                         fuser_graphdef=fgd)
        f_params, f_hist = train_fuser(pair, rp, sp, data_lib.fuser_examples(world),
                                       jax.random.fold_in(key, 3 if name == "main" else 4), seed=seed,
                                       desc=f"{tag}fuser ({name})", workdir=stage(f"fuser_{name}"))
        block = {"fuser_loss": f_hist, "fuser_seconds": time.time() - t1,
                 "gate_logits": np.asarray(comm.gate_logits(f_params, rc.num_layers, pair_map(pair))).tolist()}
        block.update(evaluate(pair, f_params, rp, sp, world, baselines=name == "main"))
        if name == "main":
            block["latency"] = measure_latency(pair, f_params, rp, sp, world, "two_hop", config.latency_queries,
                                               config.latency_hint_tokens, config.latency_answer_tokens)
        result[name] = block
    result["wall_seconds"] = time.time() - t0
    return result


def pair_map(pair: comm.Pair) -> tuple:
    return layer_mapping(pair.receiver.num_layers, pair.sharer.num_layers, pair.fuser.mapping)


def run(config: C2CConfig, workdir: pathlib.Path | str) -> dict[str, float]:
    """CLI entry: one seed; writes metrics.json, accuracy.png and losses.png into workdir."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result = run_world(config, workdir=workdir)
    if config.uses_hf:
        train_lib.write_metrics(workdir, result)
        return result
    main = result["main"]
    metrics: dict[str, float] = {}
    for kind in ("city", "two_hop"):
        for cond in CONDITIONS:
            metrics[f"{kind}/{cond}"] = main[kind][cond]
        metrics[f"{kind}/hint_exact"] = main[kind]["hint_exact"]
        metrics[f"{kind}/sharer_native"] = main[kind]["sharer_native"]
        if "swapped" in result:
            metrics[f"{kind}/swapped_c2c"] = result["swapped"][kind]["c2c"]
            metrics[f"{kind}/swapped_receiver"] = result["swapped"][kind]["receiver"]
    metrics["closed_gate_max_abs_diff"] = max(main[k]["closed_gate_max_abs_diff"] for k in ("city", "two_hop"))
    metrics["open_gates"] = int(np.sum(np.asarray(main["gate_logits"]) > 0))
    metrics.update(main["latency"])
    metrics["c2c_speedup_over_t2t"] = main["latency"]["t2t_seconds"] / main["latency"]["c2c_seconds"]
    metrics["c2c_speedup_over_t2t_generate"] = (main["latency"]["t2t_generate_seconds"]
                                                / main["latency"]["c2c_generate_seconds"])
    metrics["wall_seconds"] = result["wall_seconds"]
    train_lib.write_metrics(workdir, metrics)
    (workdir / "result.json").write_text(__import__("json").dumps(result, indent=1, default=float) + "\n")
    bars = {f"{kind} {cond}": main[kind][cond] for kind in ("city", "two_hop") for cond in CONDITIONS}
    plots.bar_plot(workdir / "accuracy.png", bars, title="C2C: held-out exact match", ylabel="exact match")
    curves = {"receiver LM": tuple(zip(*result["receiver_loss"])), "sharer LM": tuple(zip(*result["sharer_loss"])),
              "fuser": tuple(zip(*[(h[0], h[1]) for h in main["fuser_loss"]]))}
    plots.line_plot(workdir / "losses.png", curves, title="C2C training", xlabel="step", ylabel="answer CE",
                    logy=True)
    return metrics


def with_seed(config: C2CConfig, seed: int) -> C2CConfig:
    return dataclasses.replace(config, seed=seed)

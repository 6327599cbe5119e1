"""run(config, workdir): generate the corpus, train the direct decoder, the planner, the actioner with and without
the requirement memory and the requirement tagger, generate for the test parts at every instruction level,
execute, score (metrics.py), render, and write metrics.json.

Arms (PTA-lite):
- direct: text -> commands;
- pta: planner(text) -> plan; tagger(text) -> requirement memory; actioner(plan, memory, text) -> commands,
  with the copy path (a pointer from each command argument to the memory's levels, `model.copy_loss`);
- pta_no_copy: the same with the memory in the prompt only (no copy path);
- pta_no_ram: planner(text) -> plan; actioner trained without memory (plan, text) -> commands;
- pta_gold_plan: the gold plan in place of the planner's, memory from the tagger (what planning can give).
"""

from __future__ import annotations

import functools
import json
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from core import data as data_lib
from core import train as train_lib
from core.lm import data as lm_data
from core.lm import losses
from core.lm import model as model_lib
from core.lm.generate import SamplingConfig, generate, pad_prompts
from generative.cad import corpus, data, executor, hf, metrics, model, render, tokens
from generative.cad.commands import CADError
from generative.cad.configs import CADConfig

MAX_PLAN_TOKENS = 32
MAX_COMMAND_TOKENS = 96  # the longest corpus program is 81 command tokens; the rest is room for errors
LEVELS = tuple(range(len(corpus.LEVELS)))
TAGGER_LENGTH = 64
PROMPT_LENGTH = 160  # every prompt (direct, planner, actioner) is left-padded to this: one decode compile each


def make_parts(config: CADConfig) -> tuple[list[corpus.Part], list[corpus.Part]]:
    """Train and test parts from disjoint generator streams of the same seed."""
    train = corpus.make_corpus(config.n_train, 2 * config.seed, max_extrusions=config.max_extrusions)
    test = corpus.make_corpus(config.n_test, 2 * config.seed + 1, max_extrusions=config.max_extrusions)
    return train, test


@functools.lru_cache(maxsize=16)
def _optimizer_and_step(model_config, steps: int, lr: float, warmup: int, weight_decay: float, copy: bool):
    """One jitted step per (model size, schedule, head): the arms and seeds of a benchmark reuse its compile."""
    schedule = optax.warmup_cosine_decay_schedule(0.0, lr, min(warmup, steps // 2), steps, lr * 0.05)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, b2=0.98, weight_decay=weight_decay))
    graphdef, _ = model_lib.abstract(model_config)
    if copy:
        copy_graphdef, _ = nnx.split(nnx.eval_shape(lambda: model.CopyHead(model_config.hidden_size,
                                                                          rngs=nnx.Rngs(params=0))), nnx.Param)
        return tx, train_lib.make_train_step(model.copy_loss(graphdef, copy_graphdef), tx)
    return tx, train_lib.make_train_step(losses.next_token_loss(graphdef), tx)


def train_decoder(config: CADConfig, examples: Sequence, steps: int, workdir: pathlib.Path, key: jax.Array,
                  *, copy: bool = False, progress_bar: bool = True) -> tuple[Any, Any, list[dict]]:
    """A from-scratch core.lm decoder on packed (prompt, answer) examples, loss on the answers only. With `copy`
    the decoder gets the copy head: graphdef is then (decoder, head) and params {"lm": ..., "copy": ...}."""
    rows = lm_data.pack(examples, config.seq_len)
    init_key, state_key = jax.random.split(key)
    graphdef, params = model_lib.init(config.model, init_key)
    if copy:
        copy_graphdef, copy_params = model.init_copy_head(config.model.hidden_size, jax.random.fold_in(init_key, 1))
        graphdef, params = (graphdef, copy_graphdef), {"lm": params, "copy": copy_params}
    tx, step = _optimizer_and_step(config.model, steps, config.lr, config.warmup, config.weight_decay, copy)
    state = train_lib.init_train_state(params, tx, state_key)
    loader = data_lib.ArrayLoader(rows, min(config.batch_size, rows["inputs"].shape[0]), seed=config.seed)
    state, history = train_lib.fit(state, step, loader, num_steps=steps, workdir=workdir, config=config,
                                   log_every=min(config.log_every, steps), ckpt_every=steps, progress_bar=progress_bar)
    return graphdef, state.params, history


def greedy(graphdef, params, prompts: Sequence[list[int]], max_new_tokens: int, batch: int, *,
           eos_id: int = tokens.EOS_ID, pad_id: int = tokens.PAD_ID, min_length: int = PROMPT_LENGTH
           ) -> list[list[int]]:
    """Greedy continuations up to `eos_id` (included); prompts left-padded to one bucket (at least `min_length`)
    so every batch reuses a compile. A (decoder, copy head) graphdef decodes under the generate / copy mixture
    (`model.copy_greedy`). The ids default to the CAD vocabulary's; the LLM planner passes its tokenizer's."""
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, stop_tokens=(eos_id,), pad_id=pad_id)
    length = max(min_length, -(-max(len(p) for p in prompts) // 32) * 32)
    out = []
    for i in range(0, len(prompts), batch):
        chunk = list(prompts[i:i + batch])
        n = len(chunk)
        chunk += [chunk[-1]] * (batch - n)  # a fixed batch shape
        ids, mask = pad_prompts(chunk, pad_id=pad_id, length=length)
        if isinstance(graphdef, tuple):
            toks = np.asarray(jax.device_get(model.copy_greedy(
                *graphdef, params, ids, mask, max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id)))
            out += [[int(t) for t in toks[j] if t != pad_id] for j in range(n)]
            continue
        gen = generate(graphdef, params, ids, mask, jax.random.key(0), sampling)
        toks, lens = jax.device_get((gen.tokens, gen.lengths))
        out += [list(toks[j, :lens[j]]) for j in range(n)]
    return out


def llm_plans(planner: hf.LLMPlanner, parts, level: int, *, max_new_tokens: int, batch: int) -> list[list[str]]:
    """The LLM planner's greedy plans for `parts` at `level`, as plan words (what it writes, split on spaces)."""
    tok = planner.tokenizer
    outs = greedy(planner.graphdef, planner.params, [tok.encode(hf.prompt_text(p, level)) for p in parts],
                  max_new_tokens, batch, eos_id=tok.eos_id, pad_id=tok.pad_id or 0, min_length=32)
    return [tok.decode([t for t in o if t != tok.eos_id]).split() for o in outs]


def tag_texts(tagger, texts: Sequence[list[str]]) -> list[list[int]]:
    graphdef, params = tagger
    ids = np.zeros((len(texts), TAGGER_LENGTH), np.int32)
    for i, w in enumerate(texts):
        ids[i, :len(w)] = tokens.encode(w)
    tags = np.asarray(jax.device_get(model.tag(graphdef, params, ids)))
    return [list(tags[i, :len(w)]) for i, w in enumerate(texts)]


def decode_program(ids: Sequence[int]):
    try:
        return tokens.tokens_to_program(ids)
    except (CADError, ValueError, IndexError):
        return None


def train_all(config: CADConfig, train_parts, workdir: pathlib.Path, *, progress_bar: bool = True) -> dict[str, Any]:
    """Every model the configured arms need, keyed direct | planner | actioner | actioner_no_copy |
    actioner_no_ram | tagger."""
    arms = set(config.arms)
    key = jax.random.key(config.seed)
    models: dict[str, Any] = {"history": {}}
    needs = {"direct": "direct" in arms, "planner": bool(arms & {"pta", "pta_no_copy", "pta_no_ram"}),
             "actioner": bool(arms & {"pta", "pta_gold_plan"}), "actioner_no_ram": "pta_no_ram" in arms,
             "actioner_no_copy": "pta_no_copy" in arms}
    steps = {"direct": config.total_direct_steps, "planner": config.planner_steps, "actioner": config.actioner_steps,
             "actioner_no_ram": config.actioner_steps, "actioner_no_copy": config.actioner_steps}
    for i, (kind, needed) in enumerate(needs.items()):
        if not needed:
            continue
        t0 = time.time()
        if kind == "planner" and config.planner_path:  # the paper's planner: a fine-tuned local LLM
            models[kind], models["history"][kind] = hf.train_planner(config, train_parts, workdir / kind,
                                                                     jax.random.fold_in(key, i),
                                                                     progress_bar=progress_bar)
            models[f"{kind}_seconds"] = time.time() - t0
            continue
        examples = data.examples(train_parts, "actioner" if kind == "actioner_no_copy" else kind)
        graphdef, params, history = train_decoder(config, examples, steps[kind], workdir / kind,
                                                  jax.random.fold_in(key, i), copy=kind == "actioner",
                                                  progress_bar=progress_bar)
        models[kind] = (graphdef, params)
        models["history"][kind] = history
        models[f"{kind}_seconds"] = time.time() - t0
    if needs["actioner"] or needs["actioner_no_copy"]:
        t0 = time.time()
        arrays = data.tagger_arrays(train_parts, TAGGER_LENGTH)
        graphdef, params, tag_losses = model.train_tagger(arrays, vocab=tokens.VOCAB, steps=config.tagger_steps,
                                                          batch_size=256, lr=3e-3, key=jax.random.fold_in(key, 99))
        models["tagger"] = (graphdef, params)
        models["tagger_final_loss"] = float(tag_losses[-1])
        models["tagger_seconds"] = time.time() - t0
    return models


def predict(config: CADConfig, models: dict, parts, level: int, arm: str) -> dict[str, Any]:
    """Generated programs (None when unparseable) for `parts` at `level` under `arm`, plus the plan accuracy
    and the tagger's requirement-extraction accuracy where the arm uses them."""
    extra: dict[str, float] = {}
    if arm == "direct":
        prompts = [tokens.encode(data.direct_prompt(p, level)) for p in parts]
        gd, pr = models["direct"]
        outs = greedy(gd, pr, prompts, MAX_COMMAND_TOKENS, config.eval_batch)
        return {"programs": [decode_program(o) for o in outs], **extra}
    if arm == "pta_gold_plan":
        plans = [list(p.plan) for p in parts]
    else:
        if isinstance(models["planner"], hf.LLMPlanner):
            plans = llm_plans(models["planner"], parts, level, max_new_tokens=4 * MAX_PLAN_TOKENS,
                              batch=config.eval_batch)
        else:
            gd, pr = models["planner"]
            plan_ids = greedy(gd, pr, [tokens.encode(data.planner_prompt(p, level)) for p in parts],
                              MAX_PLAN_TOKENS, config.eval_batch)
            plans = [tokens.decode(o) for o in plan_ids]
        extra["plan_exact"] = float(np.mean([pl == list(p.plan) for pl, p in zip(plans, parts)]))
    if arm == "pta_no_ram":
        memories = [None] * len(parts)
        gd, pr = models["actioner_no_ram"]
    else:
        texts = [data.text_words(p, level) for p in parts]
        tags = tag_texts(models["tagger"], texts)
        memories = [data.memory_words(w, t) for w, t in zip(texts, tags)]
        extra["memory_exact"] = float(np.mean([m == data.gold_memory(p, level) for m, p in zip(memories, parts)]))
        gd, pr = models["actioner_no_copy" if arm == "pta_no_copy" else "actioner"]
    prompts = [tokens.encode(data.actioner_prompt(p, level, pl, m)) for p, pl, m in zip(parts, plans, memories)]
    outs = greedy(gd, pr, prompts, MAX_COMMAND_TOKENS, config.eval_batch)
    return {"programs": [decode_program(o) for o in outs], **extra}


def evaluate_all(config: CADConfig, models: dict, test_parts) -> tuple[list[dict], dict]:
    """One row per (arm, level) with every metric, and the generated programs for renders."""
    rows, programs = [], {}
    for arm in config.arms:
        for level in LEVELS:
            t0 = time.time()
            pred = predict(config, models, test_parts, level, arm)
            scores = metrics.evaluate([p.program for p in test_parts], pred["programs"],
                                      [p.requirements[level] for p in test_parts],
                                      chamfer_points=config.chamfer_points)
            rows.append({"arm": arm, "level": level, "level_name": corpus.LEVELS[level], "seed": config.seed,
                         **scores, **{k: v for k, v in pred.items() if k != "programs"},
                         "eval_seconds": time.time() - t0})
            programs[(arm, level)] = pred["programs"]
    return rows, programs


def summary(rows: Sequence[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        for key in ("invalid_ratio", "chamfer_median", "requirement_satisfaction", "f1_line", "f1_arc", "f1_circle",
                    "f1_extrusion"):
            out[f"{r['arm']}/{r['level_name']}/{key}"] = r[key]
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        out[f"{arm}/invalid_ratio"] = float(np.mean([r["invalid_ratio"] for r in mine]))
        out[f"{arm}/requirement_satisfaction"] = float(np.nanmean([r["requirement_satisfaction"] for r in mine]))
        cds = [r["chamfer_median"] for r in mine if np.isfinite(r["chamfer_median"])]
        out[f"{arm}/chamfer_median"] = float(np.mean(cds)) if cds else float("nan")
    return out


def export_parts(folder: pathlib.Path, parts, programs: dict, *, level: int) -> list[pathlib.Path]:
    """STL files of the ground truth and of every arm's valid generated part, for the first `parts`."""
    out = []
    for i, part in enumerate(parts):
        entries = [("gt", part.program)] + [(arm, progs[i]) for (arm, lv), progs in programs.items() if lv == level]
        for name, prog in entries:
            if prog is None:
                continue
            try:
                out.append(executor.export_stl(prog, folder / f"part{i}_{name}.stl"))
            except CADError:
                continue
    return out


def run(config: CADConfig, workdir: pathlib.Path | str, *, progress_bar: bool = True) -> dict[str, Any]:
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    train_parts, test_parts = make_parts(config)
    t_gen = time.time() - t0
    models = train_all(config, train_parts, workdir, progress_bar=progress_bar)
    t_train = time.time() - t0 - t_gen
    rows, programs = evaluate_all(config, models, test_parts)
    (workdir / "eval.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    render.render_comparison(workdir / "renders.png", test_parts[:config.renders], programs, config.arms,
                             level=LEVELS[-1])
    render.plot_levels(workdir / "levels.png", rows)
    export_parts(workdir / "parts", test_parts[:config.renders], programs, level=LEVELS[-1])
    for kind, history in models["history"].items():
        render.plot_loss(workdir / f"loss_{kind}.png", history, kind)
    out = {**summary(rows), "generate_seconds": t_gen, "train_seconds": t_train,
           "tagger_final_loss": models.get("tagger_final_loss", float("nan")),
           "wall_seconds": time.time() - t0,
           "params": int(sum(np.size(x) for x in jax.tree.leaves(
               models[next(k for k in ("direct", "actioner", "planner", "actioner_no_ram") if k in models)][1])))}
    train_lib.write_metrics(workdir, out)
    return out

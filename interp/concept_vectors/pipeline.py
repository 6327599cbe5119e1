"""The analysis of one trained model: activations, FV heads (CIE), CV heads (RSA), vectors, steering.

`analyse(config, graphdef, params)` returns plain numpy results and table rows; `train.py` (the CLI run) and
`benchmarks/concept_vectors.py` both call it.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx

from interp.concept_vectors import heads as heads_lib
from interp.concept_vectors import vectors as vec_lib
from interp.concept_vectors.configs import CVConfig
from interp.concept_vectors.world import CONCEPTS, A, Cell, Q, World, left_pad, max_prompt_len

METHODS = ("FV", "CV", "random")
# extraction cells for steering zero-shot OE-L1 prompts: in distribution, then out of distribution
ID_CELL = ("OE", "L1")
OOD_CELLS = (("MC", "L1"), ("OE", "L2"), ("MC", "L2"))


def cell_prompts(world: World, cells: list[Cell], num: int, shots: int, seed: int, *, shuffle: bool = False):
    tokens, targets, cell_ids = [], [], []
    for i, cell in enumerate(cells):
        ps = world.prompt_set(cell, num, shots, seed, shuffle_labels=shuffle)
        tokens += ps["tokens"]
        targets.append(ps["targets"])
        cell_ids += [i] * num
    return tokens, np.concatenate(targets), np.array(cell_ids)


def head_scores(config: CVConfig, world: World, graphdef: nnx.GraphDef, params: nnx.State) -> dict[str, Any]:
    """Clean activations of every cell, CIE over the analysis cells (the trained ones), RSA over the same."""
    cells = world.cells()
    analysis = world.train_cells()
    T = max_prompt_len(config.shots)
    tokens, targets, cell_ids = cell_prompts(world, cells, config.num_prompts, config.shots, config.seed)
    tk, mk = left_pad(tokens, T)
    z, logp = heads_lib.batched_last_token(graphdef, params, tk, mk)  # (L, N, H, Dh), (N, V)
    correct = np.argmax(logp, -1) == targets
    accuracy = {cells[i].name: float(correct[cell_ids == i].mean()) for i in range(len(cells))}
    mean_z = np.stack([z[:, cell_ids == i].mean(axis=1) for i in range(len(cells))])  # (cells, L, H, Dh)

    in_analysis = np.isin(cell_ids, [cells.index(c) for c in analysis])
    ctoks, ctargets, c_ids = cell_prompts(world, analysis, config.num_prompts, config.shots, config.seed + 1,
                                          shuffle=True)
    ctk, cmk = left_pad(ctoks, T)
    c_global = np.array([cells.index(analysis[i]) for i in c_ids])
    per_prompt_mean = np.moveaxis(mean_z[c_global], 0, 1)  # (L, B, H, Dh)
    cie = heads_lib.causal_indirect_effects(graphdef, params, ctk, cmk, per_prompt_mean, ctargets,
                                            batch_size=config.sweep_batch)  # (L, H, B)
    cie_per_cell, _ = heads_lib.group_means(cie, c_ids, axis=2)  # (L, H, cells)
    _, corrupted_logp = heads_lib.batched_last_token(graphdef, params, ctk, cmk)

    labels = [cells[i] for i in cell_ids[in_analysis]]
    designs = {"concept": heads_lib.design_matrix([c.concept for c in labels]),
               "format": heads_lib.design_matrix([c.format for c in labels]),
               "language": heads_lib.design_matrix([c.language for c in labels])}
    rsa = heads_lib.rsa_scores(z[:, in_analysis], designs)
    return {"z_mean": mean_z, "accuracy": accuracy, "cie": cie_per_cell.mean(-1), "cie_per_cell": cie_per_cell,
            "rsa": rsa, "corrupted_accuracy": float((np.argmax(corrupted_logp, -1) == ctargets).mean())}


def select_heads(config: CVConfig, scores: dict[str, Any]) -> dict[str, list[tuple[int, int]]]:
    L, H = scores["cie"].shape
    rng = np.random.default_rng([config.seed, 7])
    random = [(int(i // H), int(i % H)) for i in rng.choice(L * H, config.top_k, replace=False)]
    return {"FV": heads_lib.top_heads(scores["cie"], config.top_k),
            "CV": heads_lib.top_heads(scores["rsa"]["concept"], config.top_k), "random": random}


def build_vectors(config: CVConfig, world: World, params: nnx.State, scores, head_sets) -> dict[tuple, np.ndarray]:
    """(method, concept, format, language) -> vector (D,), for every cell."""
    o_proj, o_bias = vec_lib.output_projections(params, config.model.num_layers)
    cells = world.cells()
    return {(m, c.concept, c.format, c.language): vec_lib.head_vector(scores["z_mean"][i], o_proj, o_bias, hs)
            for m, hs in head_sets.items() for i, c in enumerate(cells)}


def vector_cosines(vectors) -> list[dict[str, Any]]:
    rows = []
    for m in METHODS:
        for c in CONCEPTS:
            oe = vectors[(m, c, "OE", "L1")]
            rows.append({"method": m, "concept": c, "cos_OE_MC": vec_lib.cosine(oe, vectors[(m, c, "MC", "L1")]),
                         "cos_L1_L2": vec_lib.cosine(oe, vectors[(m, c, "OE", "L2")])})
    return rows


def steering(config: CVConfig, world: World, graphdef, params, vectors) -> dict[str, Any]:
    """Zero-shot OE-L1 prompts steered by every (method, concept, extraction cell) vector over layers x w,
    and ambiguous 5-shot prompts (demos alternate the concept with translation)."""
    L = config.model.num_layers
    rng = np.random.default_rng([config.seed, 11])
    n = config.num_steer_prompts
    queries = rng.choice(world.config.num_entities, n, replace=n > world.config.num_entities)
    zs_tokens = np.array([[Q, int(world.token(int(x), "L1")), A] for x in queries], np.int32)
    zs_mask = np.ones_like(zs_tokens, bool)
    keys = [(m, c, f, lang) for m in METHODS for c in CONCEPTS for f, lang in (ID_CELL, *OOD_CELLS)]
    stack = jnp.asarray(np.stack([vectors[k] for k in keys]))
    weights = jnp.asarray(np.array(config.steer_weights, np.float32))
    probs = np.asarray(vec_lib.steering_sweep(graphdef, params, jnp.asarray(zs_tokens), jnp.asarray(zs_mask), stack,
                                              weights, num_layers=L))  # (K, L, W, B, V)
    _, base_lp = heads_lib.last_token_forward(graphdef, params, jnp.asarray(zs_tokens), jnp.asarray(zs_mask))
    base = np.exp(np.asarray(base_lp))
    rows, dist = [], {}
    for k_i, (m, c, f, lang) in enumerate(keys):
        target = np.array([world.answer(c, int(x), "L1") for x in queries])
        trans = np.array([world.answer(c, int(x), "L2") for x in queries])  # the answer's L2 translation
        p = probs[k_i]  # (L, W, B, V)
        p_t = np.take_along_axis(p, target[None, None, :, None], -1)[..., 0]
        base_t = base[np.arange(n), target]
        dist[(m, c, f, lang)] = p
        for li in range(L):
            for wi, w in enumerate(config.steer_weights):
                rows.append({"setting": "zero_shot", "method": m, "concept": c, "extract": f"{f}-{lang}",
                             "layer": li, "weight": float(w), "delta_p": float((p_t[li, wi] - base_t).mean()),
                             "accuracy": float((p[li, wi].argmax(-1) == target).mean()),
                             "p_translation": (float(np.take_along_axis(p[li, wi], trans[:, None], -1).mean())
                                               if c != "translation" else None)})
    # ambiguous prompts: one sweep per concept over that concept's vectors
    for c in CONCEPTS:
        if c == "translation":
            continue
        arng = np.random.default_rng([config.seed, 13, CONCEPTS.index(c)])
        amb = [world.ambiguous_prompt(c, config.shots, arng) for _ in range(n)]
        tk, mk = left_pad([a[0] for a in amb])
        target = np.array([a[1] for a in amb])
        ckeys = [k for k in keys if k[1] == c]
        cp = np.asarray(vec_lib.steering_sweep(graphdef, params, jnp.asarray(tk), jnp.asarray(mk),
                                               jnp.asarray(np.stack([vectors[k] for k in ckeys])), weights,
                                               num_layers=L))
        _, blp = heads_lib.last_token_forward(graphdef, params, jnp.asarray(tk), jnp.asarray(mk))
        base_t = np.exp(np.asarray(blp))[np.arange(n), target]
        for j, (m, _, f, lang) in enumerate(ckeys):
            p_t = np.take_along_axis(cp[j], target[None, None, :, None], -1)[..., 0]
            for li in range(L):
                for wi, w in enumerate(config.steer_weights):
                    rows.append({"setting": "ambiguous", "method": m, "concept": c, "extract": f"{f}-{lang}",
                                 "layer": li, "weight": float(w), "delta_p": float((p_t[li, wi] - base_t).mean()),
                                 "accuracy": float((cp[j][li, wi].argmax(-1) == target).mean()),
                                 "p_translation": None})
    return {"rows": rows, "dist": dist}


def summarise_steering(config: CVConfig, steer: dict[str, Any]) -> dict[str, Any]:
    """Per method: the (layer, w) of best in-distribution zero-shot delta p (mean over concepts); at that
    setting, per concept, the ID and OOD delta p / accuracy, KL(p_ID || p_OOD) and the ambiguous setting."""
    table = {(r["setting"], r["method"], r["concept"], r["extract"], r["layer"], r["weight"]): r
             for r in steer["rows"]}
    id_name = "-".join(ID_CELL)
    grid = [(li, w) for li in range(config.model.num_layers) for w in config.steer_weights]
    choice, per_concept = {}, []
    for m in METHODS:
        best = max(grid, key=lambda g: np.mean([table[("zero_shot", m, c, id_name, *g)]["delta_p"]
                                                for c in CONCEPTS]))
        choice[m] = {"layer": best[0], "weight": best[1]}
        wi = config.steer_weights.index(best[1])
        for c in CONCEPTS:
            zs = lambda extract: table[("zero_shot", m, c, extract, *best)]  # noqa: E731
            row = {"method": m, "concept": c, "layer": best[0], "weight": best[1],
                   "id_delta_p": zs(id_name)["delta_p"], "id_accuracy": zs(id_name)["accuracy"],
                   "id_p_translation": zs(id_name)["p_translation"]}
            for f, lang in OOD_CELLS:
                name = f"{f}-{lang}"
                row[f"ood_{name}_delta_p"] = zs(name)["delta_p"]
                row[f"ood_{name}_accuracy"] = zs(name)["accuracy"]
                row[f"ood_{name}_p_translation"] = zs(name)["p_translation"]
                row[f"kl_{name}"] = float(vec_lib.kl_divergence(steer["dist"][(m, c, *ID_CELL)][best[0], wi],
                                                                steer["dist"][(m, c, f, lang)][best[0], wi]).mean())
            row["ood_delta_p"] = float(np.mean([row[f"ood_{f}-{lang}_delta_p"] for f, lang in OOD_CELLS]))
            row["ood_accuracy"] = float(np.mean([row[f"ood_{f}-{lang}_accuracy"] for f, lang in OOD_CELLS]))
            row["kl"] = float(np.mean([row[f"kl_{f}-{lang}"] for f, lang in OOD_CELLS]))
            if c != "translation":
                amb = lambda extract: table[("ambiguous", m, c, extract, *best)]["delta_p"]  # noqa: E731
                row["ambiguous_id_delta_p"] = amb(id_name)
                row["ambiguous_ood_delta_p"] = float(np.mean([amb(f"{f}-{lang}") for f, lang in OOD_CELLS]))
            per_concept.append(row)
    means = {m: {k: float(np.mean([r[k] for r in per_concept if r["method"] == m and r.get(k) is not None]))
                 for k in per_concept[0] if k not in ("method", "concept", "layer", "weight")}
             for m in METHODS}
    return {"choice": choice, "per_concept": per_concept, "means": means}


def analyse(config: CVConfig, graphdef: nnx.GraphDef, params: nnx.State) -> dict[str, Any]:
    world = World(config.world)
    scores = head_scores(config, world, graphdef, params)
    head_sets = select_heads(config, scores)
    vectors = build_vectors(config, world, params, scores, head_sets)
    cos_rows = vector_cosines(vectors)
    steer = steering(config, world, graphdef, params, vectors)
    summary = summarise_steering(config, steer)
    return {"scores": scores, "heads": head_sets, "vectors": vectors, "cosines": cos_rows,
            "steer_rows": steer["rows"], "steering": summary}

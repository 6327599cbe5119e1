"""The same pipeline on a real model folder (Llama-3.1-8B, Qwen2.5) over the shipped concept datasets.

    .venv/bin/python -m interp.concept_vectors.real /models/Llama-3.1-8B runs/cv_llama --steer \
        --reference /path/to/concept_vectors/reference_results

Datasets (`data/concepts.json`, built by `export_subset` from the function-vector task files): six concepts
(antonym, categorical, translation, presentPast, singularPlural, synonym) x three formats (eng-OE, fr-OE,
eng-MC), 18 datasets as in the notes. French pairs are the English pairs with both sides translated through
the FV `english-french` dictionary (only pairs whose two words are in it); the French "translation" dataset is
French -> English. Spanish pairs (`es`) are built the same way through `english-spanish` and serve only as an
out-of-distribution extraction format for steering. Outputs: per-head CIE (mean over datasets) and RSA rho
(concept, format, language designs), the top-10 heads of each, heat maps, and, with --reference, the overlap and
rank correlation with the published Llama-3.1-8B scores. With --steer, FVs (top-5 CIE heads) and CVs (top-5 RSA
heads) of each concept, extracted from eng-OE (in distribution) and fr-OE, es-OE, eng-MC (out of distribution),
steer zero-shot eng-OE prompts at every layer x w (the notes' sweep); metrics: delta p and accuracy of the
correct first token, KL(p_ID-steered || p_OOD-steered). This path needs a GPU-sized machine and the user's
weights; it was not run here.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core.config import ConfigError
from interp.concept_vectors import heads as heads_lib
from interp.concept_vectors import prompts as prompt_lib

DATA = pathlib.Path(__file__).resolve().parent / "data" / "concepts.json"
CONCEPT_FILES = {"antonym": "antonym.json", "translation": "english-french.json", "presentPast": "present-past.json",
                 "singularPlural": "singular-plural.json", "synonym": "synonym.json"}
CONCEPTS = ("antonym", "categorical", "translation", "presentPast", "singularPlural", "synonym")
DATASETS = [(c, lang, fmt) for c in CONCEPTS for lang, fmt in (("eng", "OE"), ("fr", "OE"), ("eng", "MC"))]
STEER_EXTRACTS = (("eng", "OE"), ("fr", "OE"), ("es", "OE"), ("eng", "MC"))  # in distribution first
STEER_WEIGHTS = (1.0, 5.0, 10.0)


def export_subset(fv_dir: str | pathlib.Path, out: str | pathlib.Path = DATA, *, max_pairs: int = 120,
                  seed: int = 42) -> dict[str, Any]:
    """Build {concept: {"eng": pairs, "fr": pairs, "es": pairs}} from the FV task files and write it (the shipped
    subset). The Spanish picks draw from their own generator, so eng / fr are those of the earlier export."""
    fv_dir = pathlib.Path(fv_dir)
    load = lambda name: json.loads((fv_dir / name).read_text())  # noqa: E731

    def dictionary(name):
        d = {}
        for p in load(name):
            d.setdefault(p["input"], p["output"])
        return d

    en_fr, en_es = dictionary("english-french.json"), dictionary("english-spanish.json")
    eng = {c: [(p["input"], p["output"]) for p in load(f)] for c, f in CONCEPT_FILES.items()}
    cats = load("categories.json")
    eng["categorical"] = [(item, cat) for cat, items in sorted(cats.items()) for item in items]
    rng, es_rng = np.random.default_rng(seed), np.random.default_rng([seed, 1])
    data: dict[str, Any] = {"provenance": "github.com/ericwtodd/function_vectors dataset_files (via "
                                          "../shared/data/function_vectors), subset by export_subset(seed=42)"}

    def translated(pairs, d):
        return [(d[x], d[y]) for x, y in pairs if x in d and y in d and d[x] != d[y]]

    def pick(ps, r):
        return [list(ps[i]) for i in sorted(r.choice(len(ps), min(max_pairs, len(ps)), replace=False))]

    for c, pairs in sorted(eng.items()):
        data[c] = {"eng": pick(pairs, rng),
                   "fr": pick([(y, x) for x, y in pairs] if c == "translation" else translated(pairs, en_fr), rng)}
    for c, pairs in sorted(eng.items()):  # Spanish "translation" is Spanish -> English, as French is
        es = ([(p["output"], p["input"]) for p in load("english-spanish.json")] if c == "translation"
              else translated(pairs, en_es))
        data[c]["es"] = pick(es, es_rng)
    pathlib.Path(out).write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n")
    return data


def load_datasets(path: str | pathlib.Path = DATA) -> dict[str, Any]:
    path = pathlib.Path(path)
    if not path.exists():
        raise ConfigError(f"datasets={str(path)!r}: expected the JSON written by export_subset")
    return json.loads(path.read_text())


def encode_prompts(tokenizer, texts: list[tuple[str, str]], *, add_bos: bool) -> tuple[list[list[int]], np.ndarray]:
    tokens = [tokenizer.encode(p, add_bos=add_bos) for p, _ in texts]
    targets = np.array([prompt_lib.first_answer_token(tokenizer.encode, t, tokenizer.bos_id) for _, t in texts])
    return tokens, targets


def left_pad_ids(token_lists: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    T = max(len(t) for t in token_lists)
    tokens = np.full((len(token_lists), T), pad_id, np.int32)
    mask = np.zeros((len(token_lists), T), bool)
    for i, t in enumerate(token_lists):
        tokens[i, T - len(t):] = t
        mask[i, T - len(t):] = True
    return tokens, mask


def reference_comparison(cie: np.ndarray, rsa: np.ndarray, reference: pathlib.Path, k: int = 10) -> dict[str, Any]:
    """Top-k overlap and Spearman rho of our per-head scores with the published Llama-3.1-8B ones."""
    import csv

    import scipy.stats

    def table(name, layer_key, head_key, value_key):
        with open(reference / name) as f:
            rows = list(csv.DictReader(f))
        out = np.full(cie.shape, np.nan)
        for r in rows:
            layer, head = int(r[layer_key]), int(r[head_key])
            if layer < out.shape[0] and head < out.shape[1]:
                out[layer, head] = float(r[value_key])
        return out

    ref_cie = table("results_CIE_Meta-LLama-3.1-8B.csv", "Layer", "Head", "Weight")
    ref_rsa = table("results_sim_mat_rsa_Meta-LLama-3.1-8B.csv", "layer", "head", "relation")
    out = {}
    for name, ours, ref in (("cie", cie, ref_cie), ("rsa", rsa, ref_rsa)):
        ok = np.isfinite(ref)
        ours_top = set(heads_lib.top_heads(np.where(ok, ours, -np.inf), k))
        ref_top = set(heads_lib.top_heads(np.where(ok, ref, -np.inf), k))
        out[name] = {"top_overlap": len(ours_top & ref_top), "k": k,
                     "spearman": float(scipy.stats.spearmanr(ours[ok], ref[ok]).statistic),
                     "ours_top": sorted(ours_top), "reference_top": sorted(ref_top)}
    return out


def extraction_means(graphdef, params, tokenizer, data: dict[str, Any], *, shots: int, num_prompts: int, batch: int,
                     seed: int) -> dict[tuple[str, str, str], np.ndarray]:
    """(concept, lang, fmt) -> mean z (L, H, Dh) over clean prompts, for every steering extraction dataset."""
    add_bos, pad = tokenizer.bos_id is not None, tokenizer.pad_id or 0
    for c in CONCEPTS:  # every dataset checked before the first forward
        for lang, _ in STEER_EXTRACTS:
            if lang not in data.get(c, {}):
                raise ConfigError(f"datasets: no {lang!r} pairs for concept {c!r}; expected the keys "
                                  f"{sorted({la for la, _ in STEER_EXTRACTS})} (written by export_subset)")
    means = {}
    for i, c in enumerate(CONCEPTS):
        for j, (lang, fmt) in enumerate(STEER_EXTRACTS):
            pairs = [tuple(p) for p in data[c][lang]]
            texts = prompt_lib.build_prompts(pairs, fmt, num=num_prompts, shots=shots, seed=seed + 1000 + 10 * i + j)
            tk, mk = left_pad_ids(encode_prompts(tokenizer, texts, add_bos=add_bos)[0], pad)
            z, _ = heads_lib.batched_last_token(graphdef, params, tk, mk, batch=batch)
            means[(c, lang, fmt)] = z.mean(1)
    return means


@jax.jit
def _steer_metrics(logp, id_logp, targets, base_p):
    """(mean delta p of the target, accuracy, mean KL(p_ID || p)) of steered log-probs (B, V)."""
    p_target = jnp.exp(jnp.take_along_axis(logp, targets[:, None], -1)[:, 0])
    kl = (jnp.exp(id_logp) * (id_logp - logp)).sum(-1)
    return (p_target - base_p).mean(), (logp.argmax(-1) == targets).mean(), kl.mean()


def steer_real(graphdef, params, num_layers: int, tokenizer, data: dict[str, Any],
               head_sets: dict[str, list[tuple[int, int]]], means: dict[tuple[str, str, str], np.ndarray], *,
               num_steer: int = 100, weights: tuple[float, ...] = STEER_WEIGHTS, seed: int = 42
               ) -> dict[str, Any]:
    """Zero-shot eng-OE prompts (`Q: x` / `A:`) of each concept steered by its FV and CV from every extraction
    format, at every layer x w. Rows: delta p and accuracy of the correct first token, KL(p_ID || p_OOD) at the
    same (layer, w). Summary: per method the (layer, w) of best mean in-distribution delta p, and there each
    concept's ID and OOD delta p (the small world's protocol)."""
    from interp.concept_vectors import vectors as vec_lib

    o_proj, o_bias = vec_lib.output_projections(params, num_layers)
    add_bos, pad = tokenizer.bos_id is not None, tokenizer.pad_id or 0
    rng = np.random.default_rng(seed)
    rows = []
    for c in CONCEPTS:
        pairs = [tuple(p) for p in data[c]["eng"]]
        picks = rng.choice(len(pairs), num_steer, replace=len(pairs) < num_steer)
        texts = [prompt_lib.open_ended_prompt([], pairs[i]) for i in picks]
        tokens, targets = encode_prompts(tokenizer, texts, add_bos=add_bos)
        tk, mk = (jnp.asarray(a) for a in left_pad_ids(tokens, pad))
        targets = jnp.asarray(targets)
        _, base = heads_lib.last_token_forward(graphdef, params, tk, mk)
        base_p = jnp.exp(jnp.take_along_axis(base, targets[:, None], -1)[:, 0])
        for m, heads in head_sets.items():
            vecs = {e: jnp.asarray(vec_lib.head_vector(means[(c, *e)], o_proj, o_bias, heads)) for e in STEER_EXTRACTS}
            for layer in range(num_layers):
                for w in weights:
                    lp = {e: vec_lib.steered_logprobs(graphdef, params, tk, mk, v, layer, w, num_layers=num_layers)
                          for e, v in vecs.items()}
                    for e in STEER_EXTRACTS:  # scalars only leave the device (a real vocabulary is 128k wide)
                        delta_p, accuracy, kl = (float(x) for x in _steer_metrics(lp[e], lp[STEER_EXTRACTS[0]],
                                                                                   targets, base_p))
                        rows.append({"method": m, "concept": c, "extract": "-".join(e), "layer": layer,
                                     "weight": float(w), "delta_p": delta_p, "accuracy": accuracy, "kl_from_id": kl})
    return {"rows": rows, "summary": summarise_real_steering(rows)}


def summarise_real_steering(rows: list[dict]) -> dict[str, Any]:
    """Per method: the (layer, w) of best in-distribution delta p (mean over concepts); there, per concept, the
    ID delta p, each OOD extraction's delta p and KL, and their means."""
    id_name = "-".join(STEER_EXTRACTS[0])
    out = {}
    for m in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == m]
        grid = sorted({(r["layer"], r["weight"]) for r in mine})
        score = {g: np.mean([r["delta_p"] for r in mine if r["extract"] == id_name
                             and (r["layer"], r["weight"]) == g]) for g in grid}
        best = max(grid, key=lambda g: score[g])
        at = {(r["concept"], r["extract"]): r for r in mine if (r["layer"], r["weight"]) == best}
        concepts = list(dict.fromkeys(r["concept"] for r in mine))
        ood = ["-".join(e) for e in STEER_EXTRACTS[1:]]
        per_concept = {c: {"id_delta_p": at[(c, id_name)]["delta_p"],
                           **{f"{e}_delta_p": at[(c, e)]["delta_p"] for e in ood},
                           **{f"{e}_kl": at[(c, e)]["kl_from_id"] for e in ood}} for c in concepts}
        out[m] = {"layer": best[0], "weight": best[1], "per_concept": per_concept,
                  "id_delta_p": float(np.mean([v["id_delta_p"] for v in per_concept.values()])),
                  "ood_delta_p": float(np.mean([v[f"{e}_delta_p"] for v in per_concept.values() for e in ood])),
                  "kl": float(np.mean([v[f"{e}_kl"] for v in per_concept.values() for e in ood]))}
    return out


def run_real(model_dir: str | pathlib.Path, out_dir: str | pathlib.Path, *, datasets: str | pathlib.Path = DATA,
             shots: int = 5, num_prompts: int = 50, top_k: int = 10, batch: int = 16, sweep_batch: int = 32,
             reference: str | pathlib.Path | None = None, dtype: str = "bfloat16", seed: int = 42,
             steer: bool = False, steer_heads: int = 5, num_steer: int = 100) -> dict[str, Any]:
    from core.lm.tokenizer import load_tokenizer
    from core.lm.weights import load_hf
    from interp.concept_vectors.train import heatmap

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config, graphdef, params = load_hf(model_dir, dtype=dtype)
    tokenizer = load_tokenizer(model_dir, bos_token="<|begin_of_text|>" if config.architecture == "llama" else None)
    data = load_datasets(datasets)
    add_bos = tokenizer.bos_id is not None
    clean, corrupt, ids = [], [], []
    for i, (concept, lang, fmt) in enumerate(DATASETS):
        pairs = [tuple(p) for p in data[concept][lang]]
        clean += prompt_lib.build_prompts(pairs, fmt, num=num_prompts, shots=shots, seed=seed + i)
        corrupt += prompt_lib.build_prompts(pairs, fmt, num=num_prompts, shots=shots, seed=seed + 100 + i,
                                            shuffle_labels=True)
        ids += [i] * num_prompts
    ids = np.array(ids)
    ctok, ctarget = encode_prompts(tokenizer, clean, add_bos=add_bos)
    xtok, xtarget = encode_prompts(tokenizer, corrupt, add_bos=add_bos)
    pad = tokenizer.pad_id or 0
    tk, mk = left_pad_ids(ctok, pad)
    z, logp = heads_lib.batched_last_token(graphdef, params, tk, mk, batch=batch)
    acc = {"-".join(DATASETS[i]): float((np.argmax(logp, -1) == ctarget)[ids == i].mean())
           for i in range(len(DATASETS))}
    mean_z = np.stack([z[:, ids == i].mean(1) for i in range(len(DATASETS))])  # (datasets, L, H, Dh)
    xt, xm = left_pad_ids(xtok, pad)
    cie = np.zeros(z.shape[0:1] + z.shape[2:3] + (len(ids),))
    for s in range(0, len(ids), batch):  # CIE in prompt chunks: one compiled sweep per chunk shape
        sl = slice(s, s + batch)
        per_prompt = np.moveaxis(mean_z[ids[sl]], 0, 1)
        cie[:, :, sl] = heads_lib.causal_indirect_effects(graphdef, params, xt[sl], xm[sl], per_prompt, xtarget[sl],
                                                          batch_size=sweep_batch)
    cie_mean = heads_lib.group_means(cie, ids, axis=2)[0].mean(-1)
    labels = [DATASETS[i] for i in ids]
    designs = {"concept": heads_lib.design_matrix([c for c, _, _ in labels]),
               "format": heads_lib.design_matrix([f for _, _, f in labels]),
               "language": heads_lib.design_matrix([lang for _, lang, _ in labels])}
    rsa = heads_lib.rsa_scores(z, designs)
    result = {"model": str(model_dir), "accuracy": acc, "cie": cie_mean.tolist(),
              "rsa": {k: v.tolist() for k, v in rsa.items()},
              "fv_heads": heads_lib.top_heads(cie_mean, top_k), "cv_heads": heads_lib.top_heads(rsa["concept"], top_k)}
    result["jaccard"] = heads_lib.jaccard(result["fv_heads"], result["cv_heads"])
    if reference is not None:
        result["reference"] = reference_comparison(cie_mean, rsa["concept"], pathlib.Path(reference), top_k)
    if steer:  # the notes' steering: 5 heads per vector, 50 extraction and 100 intervention prompts
        head_sets = {"FV": heads_lib.top_heads(cie_mean, steer_heads),
                     "CV": heads_lib.top_heads(rsa["concept"], steer_heads)}
        means = extraction_means(graphdef, params, tokenizer, data, shots=shots, num_prompts=num_prompts,
                                 batch=batch, seed=seed)
        result["steering"] = steer_real(graphdef, params, config.num_layers, tokenizer, data, head_sets, means,
                                        num_steer=num_steer, seed=seed)
    heatmap(out_dir / "cie.png", cie_mean, "CIE (mean over datasets)", result["fv_heads"])
    heatmap(out_dir / "rsa_concept.png", rsa["concept"], "RSA rho, concept design", result["cv_heads"])
    (out_dir / "real_results.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="FV (CIE) and CV (RSA) heads of a real model folder")
    parser.add_argument("model_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--reference", default=None)
    parser.add_argument("--datasets", default=str(DATA), help="concept pairs JSON (default: the shipped subset)")
    parser.add_argument("--num-prompts", type=int, default=50)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steer", action="store_true", help="also the steering sweep (FV / CV from eng-OE, "
                        "fr-OE, es-OE, eng-MC on zero-shot eng-OE prompts, every layer x w in {1, 5, 10})")
    parser.add_argument("--num-steer", type=int, default=100, help="zero-shot prompts per concept")
    args = parser.parse_args(argv)
    res = run_real(args.model_dir, args.out_dir, datasets=args.datasets, reference=args.reference,
                   num_prompts=args.num_prompts, batch=args.batch, steer=args.steer, num_steer=args.num_steer)
    print(json.dumps({k: res[k] for k in ("fv_heads", "cv_heads", "jaccard")}))
    if args.steer:
        print(json.dumps({m: {k: v for k, v in s.items() if k != "per_concept"}
                          for m, s in res["steering"]["summary"].items()}))


if __name__ == "__main__":
    main()

"""The same pipeline on a real model folder (Llama-3.1-8B, Qwen2.5) over the shipped concept datasets.

    .venv/bin/python -m interp.concept_vectors.real /models/Llama-3.1-8B runs/cv_llama \
        --reference /path/to/concept_vectors/reference_results

Datasets (`data/concepts.json`, built by `export_subset` from the function-vector task files): six concepts
(antonym, categorical, translation, presentPast, singularPlural, synonym) x three formats (eng-OE, fr-OE,
eng-MC), 18 datasets as in the notes. French pairs are the English pairs with both sides translated through
the FV `english-french` dictionary (only pairs whose two words are in it); the French "translation" dataset is
French -> English. Outputs: per-head CIE (mean over datasets) and RSA rho (concept, format, language designs),
the top-10 heads of each, heat maps, and, with --reference, the overlap and rank correlation with the published
Llama-3.1-8B scores. This path needs a GPU-sized machine and the user's weights; it was not run here.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

import numpy as np

from core.config import ConfigError
from interp.concept_vectors import heads as heads_lib
from interp.concept_vectors import prompts as prompt_lib

DATA = pathlib.Path(__file__).resolve().parent / "data" / "concepts.json"
CONCEPT_FILES = {"antonym": "antonym.json", "translation": "english-french.json", "presentPast": "present-past.json",
                 "singularPlural": "singular-plural.json", "synonym": "synonym.json"}
DATASETS = [(c, lang, fmt) for c in ("antonym", "categorical", "translation", "presentPast", "singularPlural",
                                      "synonym") for lang, fmt in (("eng", "OE"), ("fr", "OE"), ("eng", "MC"))]


def export_subset(fv_dir: str | pathlib.Path, out: str | pathlib.Path = DATA, *, max_pairs: int = 120,
                  seed: int = 42) -> dict[str, Any]:
    """Build {concept: {"eng": pairs, "fr": pairs}} from the FV task files and write it (the shipped subset)."""
    fv_dir = pathlib.Path(fv_dir)
    load = lambda name: json.loads((fv_dir / name).read_text())  # noqa: E731
    en_fr = {}
    for p in load("english-french.json"):
        en_fr.setdefault(p["input"], p["output"])
    eng = {c: [(p["input"], p["output"]) for p in load(f)] for c, f in CONCEPT_FILES.items()}
    cats = load("categories.json")
    eng["categorical"] = [(item, cat) for cat, items in sorted(cats.items()) for item in items]
    rng = np.random.default_rng(seed)
    data: dict[str, Any] = {"provenance": "github.com/ericwtodd/function_vectors dataset_files (via "
                                          "../shared/data/function_vectors), subset by export_subset(seed=42)"}
    for c, pairs in sorted(eng.items()):
        if c == "translation":
            fr = [(y, x) for x, y in pairs]
        else:
            fr = [(en_fr[x], en_fr[y]) for x, y in pairs if x in en_fr and y in en_fr and en_fr[x] != en_fr[y]]
        pick = lambda ps: [list(ps[i]) for i in sorted(rng.choice(len(ps), min(max_pairs, len(ps)),  # noqa: E731
                                                                    replace=False))]
        data[c] = {"eng": pick(pairs), "fr": pick(fr)}
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


def run_real(model_dir: str | pathlib.Path, out_dir: str | pathlib.Path, *, datasets: str | pathlib.Path = DATA,
             shots: int = 5, num_prompts: int = 50, top_k: int = 10, batch: int = 16, sweep_batch: int = 32,
             reference: str | pathlib.Path | None = None, dtype: str = "bfloat16", seed: int = 42) -> dict[str, Any]:
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
    args = parser.parse_args(argv)
    res = run_real(args.model_dir, args.out_dir, datasets=args.datasets, reference=args.reference,
                   num_prompts=args.num_prompts, batch=args.batch)
    print(json.dumps({k: res[k] for k in ("fv_heads", "cv_heads", "jaccard")}))


if __name__ == "__main__":
    main()

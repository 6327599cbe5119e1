"""BIT end to end on the simulator (paper 1, issue 32): the pretrained encoder + InfoNCE against the prior
end-to-end recipe and each ablation, the speech-pretrained LM against text-only LMs, attempted-imagined
alignment, and the cascade beside it.

    .venv/bin/python -u benchmarks/bit_e2e.py --raw-dir /tmp/bit_e2e_bench     # the committed run

One simulated world (data seed 0): the target participant's 8 sessions x 128 labelled + 10 test sentences.
Three language models, one checkpoint each as the paper compares released checkpoints: a 2 x 128 LM text-
then speech-pretrained (the audio-LLM analogue), the same LM on text only for the same number of steps, and a
larger text-only LM (4 x 256). Per seed: the BIT encoder (span-masked SSL on the unlabelled sessions, then
phoneme CTC) or a random one; then every arm's end-to-end stage, the seeds vmapped in one program. Writes
benchmarks/results/bit_e2e.json and the README table between <!-- table:bit_e2e --> markers; every stage is
cached under --raw-dir so a rerun resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bit import train as cascade_train  # noqa: E402
from bit.decode import phone_lm_table  # noqa: E402
from bit.e2e import configs  # noqa: E402
from bit.e2e import data as e2e_data  # noqa: E402
from bit.e2e import train as e2e  # noqa: E402
from bit.e2e.metrics import mean_features, retrieval_accuracy, wer_scores  # noqa: E402
from core.plots import bar_plot  # noqa: E402
from core.results import RESULTS_DIR, check, interval_claim, paired_claim, write_results  # noqa: E402

README = ROOT / "bit" / "README.md"
NAME = "bit_e2e"

# arm: (encoder init, InfoNCE weight, language model[, other e2e settings])
ARMS = {
    "bit": ("pretrained", 1.0, "speech"),
    "no_contrastive": ("pretrained", 0.0, "speech"),
    "no_pretraining": ("scratch", 1.0, "speech"),
    "prior_recipe": ("scratch", 0.0, "speech"),
    "ctc_encoder": ("ctc", 1.0, "speech"),
    "text_lm": ("pretrained", 1.0, "text"),
    "text_lm_large": ("pretrained", 1.0, "text_large"),
    # the InfoNCE given a further chance: its text side without the shared prompt, or a tenth of the weight
    "bit_nce_sentence": ("pretrained", 1.0, "speech", {"contrastive_text": "sentence"}),
    "bit_nce_0.1": ("pretrained", 0.1, "speech"),
}
LABELS = {"bit": "BIT (pretrained encoder + InfoNCE, speech LM)", "no_contrastive": "- InfoNCE",
          "no_pretraining": "- pretrained encoder", "prior_recipe": "prior recipe (neither)",
          "ctc_encoder": "encoder CTC-trained only (no SSL)",
          "text_lm": "text-only LM, same size", "text_lm_large": "text-only LM, larger",
          "bit_nce_sentence": "BIT, InfoNCE on the sentence only (no prompt)", "bit_nce_0.1": "BIT, InfoNCE weight 0.1"}


def base_config(args) -> configs.Config:
    c = configs.cpu()
    b = c.base
    b = dataclasses.replace(
        b, data=dataclasses.replace(b.data, sessions=args.sessions, sentences_per_session=args.per_session,
                                    test_per_session=args.test_per_session, imagined_sessions=args.imagined_sessions,
                                    imagined_per_session=args.imagined_per_session,
                                    monkey_sessions=args.monkey_sessions, monkey_trials=args.monkey_trials,
                                    alpha=args.alpha, labelled=args.labelled, lm_sentences=args.lm_sentences),
        train=dataclasses.replace(b.train, pretrain_steps=args.pretrain_steps, finetune_steps=args.finetune_steps))
    lm = dataclasses.replace(c.lm, text_steps=args.lm_text_steps, speech_steps=args.lm_speech_steps)
    return dataclasses.replace(c, base=b, lm=lm, e2e=dataclasses.replace(c.e2e, steps=args.e2e_steps))


def lm_config(config: configs.Config, which: str, args) -> configs.Config:
    lm = config.lm
    if which == "text":
        lm = dataclasses.replace(lm, kind="text")
    elif which == "text_large":
        lm = dataclasses.replace(lm, kind="text", hidden_size=args.large_hidden, num_layers=args.large_layers,
                                 num_heads=args.large_hidden // 32, num_kv_heads=args.large_hidden // 64,
                                 intermediate_size=3 * args.large_hidden)
    return dataclasses.replace(config, lm=lm)


def arm_config(config: configs.Config, arm: str, args) -> configs.Config:
    init, weight, which, *extra = ARMS[arm]
    c = lm_config(config, which, args)
    return dataclasses.replace(c, e2e=dataclasses.replace(c.e2e, encoder_init=init, contrastive_weight=weight,
                                                          **(extra[0] if extra else {})))


def cached(path: pathlib.Path, fn):
    if path.exists():
        return json.loads(path.read_text())
    out = fn()
    path.write_text(json.dumps(out, default=float))
    return out


def evaluate_arm(arm, config, lm, layout, encoder_graphdef, params, data, pairs, seed) -> dict:
    decoder = e2e.SentenceDecoder(config, lm, layout, encoder_graphdef, params)
    texts = data["test_text"]
    row = {}
    for method in ("greedy", "beam"):
        scores = wer_scores(texts, decoder.decode(data["test"], method))
        row[f"wer_{method}"] = scores["wer"]
        if method == "beam":
            row["wer_beam_oracle"] = scores["wer_oracle"]
    # chance: every trial decoded from another trial's activity (the next one), scored against its own sentence
    shifted = {k: np.roll(v, 1, axis=0) for k, v in data["test"].items()}
    row["wer_shuffled_input"] = wer_scores(texts, decoder.decode(shifted, "greedy"))["wer"]
    # cross-task: the imagined renditions of test sentences, decoded, and retrieved from their attempted twins
    row["wer_imagined"] = wer_scores(pairs["texts"], decoder.decode(pairs["imagined"], "greedy"))["wer"]
    row["retrieval_imagined_to_attempted"] = retrieval_accuracy(decoder.neural_embeddings(pairs["imagined"]),
                                                                decoder.neural_embeddings(pairs["attempted"]))
    row["examples"] = [{"truth": t, "beam": h[0]} for t, h in zip(texts[:4], decoder.decode(
        {k: v[:4] for k, v in data["test"].items()}, "beam"))]
    return {"arm": arm, "seed": seed, **row}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--per-session", type=int, default=128)
    ap.add_argument("--test-per-session", type=int, default=10)
    ap.add_argument("--imagined-sessions", type=int, default=4)
    ap.add_argument("--imagined-per-session", type=int, default=30)
    ap.add_argument("--monkey-sessions", type=int, default=2)
    ap.add_argument("--monkey-trials", type=int, default=150)
    ap.add_argument("--alpha", type=float, default=0.7)
    ap.add_argument("--labelled", type=int, default=1024)
    ap.add_argument("--lm-sentences", type=int, default=20000)
    ap.add_argument("--lm-text-steps", type=int, default=1000)
    ap.add_argument("--lm-speech-steps", type=int, default=1500)
    ap.add_argument("--large-hidden", type=int, default=256)
    ap.add_argument("--large-layers", type=int, default=4)
    ap.add_argument("--pretrain-steps", type=int, default=600)
    ap.add_argument("--finetune-steps", type=int, default=400)
    ap.add_argument("--e2e-steps", type=int, default=2000)
    ap.add_argument("--arms", nargs="+", default=list(ARMS))
    ap.add_argument("--raw-dir", default="/tmp/bit_e2e_bench")
    ap.add_argument("--prior-wall-seconds", type=float, default=0.0,
                    help="wall seconds of an earlier invocation whose cached stages this one reuses (added to "
                         "wall_seconds and recorded in the scale)")
    ap.add_argument("--claims-from-rows", action="store_true",
                    help="recompute the claims and the README table from the committed JSON's rows")
    args = ap.parse_args(argv)
    path = RESULTS_DIR / f"{NAME}.json"
    if args.claims_from_rows:
        rec = json.loads(path.read_text())
        rec["claims"] = claims_from_rows(rec["rows"])
        path.write_text(json.dumps(rec, indent=2) + "\n")
        render(path)
        return
    t_start = time.time()
    raw = pathlib.Path(args.raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    config = base_config(args)
    seeds = list(range(args.seeds))
    data = cascade_train.build_data(config.base, raw / "shared")
    pairs = e2e_data.paired_imagined(config.base, data, raw / "shared")
    print(f"data: {len(data['train']['x'])} labelled, {len(data['test']['x'])} test, {len(pairs['texts'])} "
          f"attempted-imagined pairs ({time.time() - t_start:.0f} s)", flush=True)
    lms = {}
    for which in sorted({a[2] for a in ARMS.values()}):
        t0 = time.time()
        lms[which] = e2e.language_model(lm_config(config, which, args), data["lm_text"], raw / f"lm_{which}", seed=0)
        print(f"LM {which}: {time.time() - t0:.0f} s", flush=True)
    encoders = {}
    for init in sorted({a[0] for a in ARMS.values()}):
        c = dataclasses.replace(config, e2e=dataclasses.replace(config.e2e, encoder_init=init))
        encoders[init] = [e2e.neural_encoder(c, data, raw / f"encoder_{init}_s{s}", seed=s) for s in seeds]
    rows = []
    # the cascade on each seed's CTC encoder, and the no-model / untrained retrieval baselines
    lexicon, word_decoder = cascade_train.make_word_decoder(config.base, data["lm_text"], raw / "shared")

    def cascade_rows():
        out = []
        for s, enc in zip(seeds, encoders["pretrained"]):
            logprobs = cascade_train.make_logprobs(config.base, enc.graphdef)
            lp, frames = logprobs(enc.params, data["test"])
            ev = cascade_train.evaluate(config.base, lp, frames, data["test"], data["test_text"],
                                        table=phone_lm_table(), word_decoder=word_decoder, lexicon=lexicon)
            out.append({"arm": "cascade", "seed": s, "wer_cascade": ev["wer_cascade"], "per_greedy": ev["per_greedy"],
                        "wer_greedy_lexicon": ev["wer_greedy_lexicon"]})
        return out

    rows += cached(raw / "cascade.json", cascade_rows)
    rows.append({"arm": "raw_features", "retrieval_imagined_to_attempted": retrieval_accuracy(
        mean_features(pairs["imagined"]), mean_features(pairs["attempted"])), "pairs": len(pairs["texts"])})
    speed = {}
    for arm in args.arms:
        c = arm_config(config, arm, args)
        init, _, which, *_ = ARMS[arm]

        def run_arm(arm=arm, c=c, init=init, which=which):
            t0 = time.time()
            layout, params, curves = e2e.train_e2e_seeds(c, data, lms[which], encoders[init], seeds)
            train_s = time.time() - t0
            out = [{**evaluate_arm(arm, c, lms[which], layout, encoders[init][0].graphdef, p, data, pairs, s),
                    "train_seconds": train_s, "final_ce": float(curves["ce"][i, -100:].mean()),
                    "final_info_nce": float(curves["info_nce"][i, -100:].mean()) if "info_nce" in curves else None}
                   for i, (s, p) in enumerate(zip(seeds, params))]
            if arm == "bit":  # one-sentence latency, end to end and through the cascade, on seed 0
                enc = encoders["pretrained"][0]
                out[0].update(e2e.latency(c, e2e.SentenceDecoder(c, lms[which], layout, enc.graphdef, params[0]),
                                          data["test"], (cascade_train.make_logprobs(c.base, enc.graphdef, 1),
                                                         enc.params, word_decoder)))
            if arm == "no_contrastive":  # the untrained bridge: the alignment a fresh projector gives
                import jax
                fresh = {"encoder": encoders["pretrained"][0].params,
                         "bridge": e2e.layout_for(c, lms[which], c.base.model.d_model, jax.random.key(99))[1],
                         "lora": params[0]["lora"]}
                dec = e2e.SentenceDecoder(c, lms[which], layout, encoders[init][0].graphdef, fresh)
                out[0]["retrieval_untrained_bridge"] = retrieval_accuracy(dec.neural_embeddings(pairs["imagined"]),
                                                                          dec.neural_embeddings(pairs["attempted"]))
            return out

        arm_rows = cached(raw / f"arm_{arm}_{args.e2e_steps}.json", run_arm)
        rows += arm_rows
        speed[arm] = arm_rows[0].get("train_seconds")
        print(arm, {k: round(float(np.mean([r[k] for r in arm_rows if k in r])), 4) for k in arm_rows[0]
                    if isinstance(arm_rows[0][k], float)}, flush=True)
        write(args, rows, speed, t_start, pairs)
    print(f"done in {time.time() - t_start:.0f} s", flush=True)


def _by_seed(rows, arm, key):
    return {r["seed"]: float(r[key]) for r in rows if r.get("arm") == arm and r.get(key) is not None}


def _paired(rows, arm_a, arm_b, key):
    a, b = _by_seed(rows, arm_a, key), _by_seed(rows, arm_b, key)
    seeds = sorted(set(a) & set(b))
    return [a[s] for s in seeds], [b[s] for s in seeds]


def claims_from_rows(rows: list[dict]) -> list[dict]:
    """Every claim from the per-seed rows (WER as fractions; paired over seeds, 95% t-intervals)."""
    claims = []
    arms = {r["arm"] for r in rows}

    def lower_wer(id_, statement, a, b, key="wer_beam"):
        if {a, b} <= arms:
            ours, base = _paired(rows, a, b, key)
            claims.append(paired_claim(id_, statement, ours, base, higher_is_better=False,
                                       evidence=f"{key}, {a} vs {b}"))

    lower_wer("e2e_beats_prior_recipe", "End to end, the pretrained encoder with the InfoNCE term has lower test WER "
              "than the prior end-to-end recipe (random encoder, no contrastive term)", "bit", "prior_recipe")
    lower_wer("e2e_beats_no_contrastive", "... and lower than the pretrained encoder without the InfoNCE term",
              "bit", "no_contrastive")
    lower_wer("e2e_beats_no_pretraining", "... and lower than the InfoNCE term with a random encoder", "bit",
              "no_pretraining")
    lower_wer("pretrained_encoder_beats_random_without_nce", "Without the InfoNCE term too, the pretrained encoder "
              "gives lower WER than a random one", "no_contrastive", "prior_recipe")
    lower_wer("nce_sentence_beats_no_contrastive", "The InfoNCE term with its text side on the sentence alone (not the "
              "shared prompt) lowers WER against no contrastive term", "bit_nce_sentence", "no_contrastive")
    lower_wer("nce_weight_0.1_beats_no_contrastive", "The InfoNCE term at a tenth of the weight lowers WER against no "
              "contrastive term", "bit_nce_0.1", "no_contrastive")
    lower_wer("ssl_lowers_e2e_wer", "The encoder's self-supervised pretraining (before CTC) lowers end-to-end WER "
              "against an encoder trained with CTC alone", "bit", "ctc_encoder")
    lower_wer("speech_lm_beats_text_lm", "The speech-pretrained small LM gives lower end-to-end WER than a text-only "
              "LM of the same size (trained as many steps)", "bit", "text_lm")
    lower_wer("speech_lm_beats_larger_text_lm", "The speech-pretrained small LM gives lower end-to-end WER than a "
              "larger text-only LM", "bit", "text_lm_large")
    if "bit" in arms:
        own = _by_seed(rows, "bit", "wer_greedy")
        other = _by_seed(rows, "bit", "wer_shuffled_input")
        seeds = sorted(set(own) & set(other))
        claims.append(paired_claim(
            "e2e_uses_the_neural_activity", "Chance baseline: the end-to-end model (BIT arm) decodes each test trial "
            "better from its own activity than from another trial's (greedy WER; the shuffled input leaves the LM's "
            "prior)", [own[s] for s in seeds], [other[s] for s in seeds], higher_is_better=False,
            evidence="greedy WER, own activity vs the next trial's"))
        pairs = next((r["pairs"] for r in rows if r.get("arm") == "raw_features"), None)
        chance = 1.0 / pairs if pairs else None
        acc = _by_seed(rows, "bit", "retrieval_imagined_to_attempted")
        if chance:
            raw = next(r["retrieval_imagined_to_attempted"] for r in rows if r.get("arm") == "raw_features")
            claims.append(interval_claim(
                "attempted_imagined_align", "Attempted and imagined activity of the same sentence align after "
                "end-to-end training: top-1 retrieval of a sentence's attempted trial from its imagined one, in the "
                "InfoNCE embedding, is above chance", list(acc.values()), null=chance, chance=chance,
                evidence=f"{pairs} pairs, chance {chance:.4f}; time-averaged raw features retrieve {raw:.4f}",
                label="top-1 retrieval"))
            claims.append(interval_claim(
                "alignment_beyond_raw_features", "... and above the retrieval that the time-averaged raw features "
                "give (the two tasks' activity aligns through the model, not only in the input)", list(acc.values()),
                null=raw, chance=chance, evidence=f"{pairs} pairs; raw features {raw:.4f}", label="top-1 retrieval"))
    casc, endto = _by_seed(rows, "cascade", "wer_cascade"), _by_seed(rows, "bit", "wer_beam")
    seeds = sorted(set(casc) & set(endto))
    if seeds:
        claims.append(paired_claim(
            "cascade_beats_e2e", "As in the paper (WER 6.35 vs 15.67 % on Brain-to-Text '24), the n-gram cascade on "
            "the same seed's CTC encoder has lower WER than the end-to-end model", [casc[s] for s in seeds],
            [endto[s] for s in seeds], higher_is_better=False, evidence="cascade WER vs BIT end-to-end beam WER"))
    oracle_ok = [r["wer_beam_oracle"] <= r["wer_beam"] + 1e-12 for r in rows if "wer_beam_oracle" in r]
    if oracle_ok:
        claims.append(check("nbest_oracle_not_worse", "sanity check: the n-best oracle WER is at most the first "
                             "hypothesis' WER (the list holds the first hypothesis)", all(oracle_ok),
                             f"{sum(oracle_ok)}/{len(oracle_ok)} arm-seeds"))
    return claims


def stats(xs):
    xs = np.asarray([x for x in xs if x is not None], float)
    return (float(xs.mean()), float(xs.std(ddof=1)) if len(xs) > 1 else 0.0) if len(xs) else (float("nan"), 0.0)


def write(args, rows, speed, t_start, pairs):
    summary = {}
    for arm in ARMS:
        arm_rows = [r for r in rows if r.get("arm") == arm]
        if arm_rows:
            summary[arm] = {k: stats([r.get(k) for r in arm_rows]) for k in
                            ("wer_greedy", "wer_beam", "wer_beam_oracle", "wer_shuffled_input", "wer_imagined",
                             "retrieval_imagined_to_attempted", "final_ce")}
    casc = [r for r in rows if r.get("arm") == "cascade"]
    if casc:
        summary["cascade"] = {k: stats([r[k] for r in casc]) for k in ("wer_cascade", "per_greedy",
                                                                       "wer_greedy_lexicon")}
    scale = {k: getattr(args, k) for k in (
        "seeds", "sessions", "per_session", "test_per_session", "imagined_sessions", "monkey_sessions", "monkey_trials",
        "alpha", "labelled", "lm_sentences", "lm_text_steps", "lm_speech_steps", "large_hidden", "large_layers",
        "pretrain_steps", "finetune_steps", "e2e_steps")}
    c = base_config(args)
    scale.update(pairs=len(pairs["texts"]), encoder=f"d {c.base.model.d_model} x {c.base.model.num_layers} layers",
                 lm=f"{c.lm.num_layers} x {c.lm.hidden_size} (Qwen2-style, tied, BPE {c.lm.vocab_size})",
                 lora=f"r {c.e2e.lora_rank}, alpha {c.e2e.lora_alpha:g}, dropout {c.e2e.lora_dropout:g}, "
                      "all 7 projections",
                 e2e=f"batch {c.e2e.batch_size}, lr {c.e2e.lr:g} (encoder {c.e2e.encoder_lr:g}), InfoNCE dim "
                     f"{c.e2e.contrastive_dim}, projector {c.e2e.projector}",
                 decode=f"beam {c.decode.beam}, n-best {c.decode.n_best}, length penalty {c.decode.length_penalty:g}",
                 paper_scale="Qwen2.5-1.5B / Aero-1-Audio-1.5B, d 384 x 7 encoder, ~8.8k ('24) / 10.9k ('25) "
                             "sentences, 150-200 epochs")
    claims = claims_from_rows(rows)
    bars = {LABELS[a]: summary[a]["wer_beam"] for a in ARMS if a in summary}
    if "cascade" in summary:
        bars["n-gram cascade"] = summary["cascade"]["wer_cascade"]
    bar_plot(RESULTS_DIR / f"{NAME}_wer.png", {k: v[0] for k, v in bars.items()}, {k: v[1] for k, v in bars.items()},
             title="test WER (beam; mean ± sd over seeds)", ylabel="WER")
    scale["prior_wall_seconds"] = args.prior_wall_seconds
    path = write_results(NAME, rows=rows, claims=claims, wall_seconds=time.time() - t_start + args.prior_wall_seconds,
                         scale=scale,
                         summary=summary, train_seconds=speed)
    render(path)
    print(f"wrote {path}", flush=True)


def render(path: pathlib.Path):
    rec = json.loads(path.read_text())
    su, sc = rec["summary"], rec["scale"]
    f = lambda s: "-" if s is None or np.isnan(s[0]) else f"{100 * s[0]:.1f} ± {100 * s[1]:.1f}"  # noqa: E731
    lines = [f"Simulator (one world): the target participant's {sc['sessions']} sessions x {sc['per_session']} "
             f"labelled + {sc['test_per_session']} test sentences ({sc['labelled']} labelled used); encoder "
             f"{sc['encoder']} (SSL {sc['pretrain_steps']} + CTC {sc['finetune_steps']} steps); LMs {sc['lm']} "
             f"(text {sc['lm_text_steps']} + speech {sc['lm_speech_steps']} steps; the larger text LM "
             f"{sc['large_layers']} x {sc['large_hidden']}); end to end {sc['e2e_steps']} steps, {sc['e2e']}, LoRA "
             f"{sc['lora']}; {sc['decode']}. {sc['seeds']} seeds, mean ± sd in %; {sc['pairs']} attempted-imagined "
             f"pairs. Wall {rec['wall_seconds']:.0f} s.", "",
             "| arm | WER beam | WER greedy | n-best oracle | WER, shuffled input (chance) | WER imagined | "
             "retrieval imagined → attempted |", "|---|---|---|---|---|---|---|"]
    for arm, label in LABELS.items():
        if arm in su:
            s = su[arm]
            lines.append(f"| {label} | {f(s['wer_beam'])} | {f(s['wer_greedy'])} | {f(s['wer_beam_oracle'])} | "
                         f"{f(s['wer_shuffled_input'])} | {f(s['wer_imagined'])} | "
                         f"{f(s['retrieval_imagined_to_attempted'])} |")
    if "cascade" in su:
        lines.append(f"| n-gram cascade (same CTC encoders) | {f(su['cascade']['wer_cascade'])} | | | | | |")
    raw = next((r for r in rec["rows"] if r.get("arm") == "raw_features"), None)
    lat = next((r for r in rec["rows"] if r.get("arm") == "bit" and "latency_e2e_greedy_s" in r), None)
    notes = []
    if raw:
        notes.append(f"retrieval from time-averaged raw features {100 * raw['retrieval_imagined_to_attempted']:.1f} % "
                     f"(chance {100 / raw['pairs']:.1f} %)")
    untrained = next((r for r in rec["rows"] if "retrieval_untrained_bridge" in r), None)
    if untrained:
        notes.append(f"through a fresh, untrained projector and head on the trained (SSL + CTC) encoder "
                     f"{100 * untrained['retrieval_untrained_bridge']:.1f} %")
    if lat:
        notes.append("latency per sentence, one at a time on 2 CPU cores: end to end "
                     f"{1000 * lat['latency_e2e_greedy_s']:.0f} ms greedy / "
                     f"{1000 * lat['latency_e2e_beam_s']:.0f} ms beam, cascade "
                     f"{1000 * lat['latency_cascade_s']:.0f} ms (paper: 0.95 s vs 0.24 s on a GPU with a 1.5B LM)")
    if notes:
        text = "; ".join(notes)
        lines += ["", text[0].upper() + text[1:] + "."]

    def verdict(c):
        if c.get("kind") == "check":
            return "check: passed" if c["held"] else "**check failed**"
        return {True: "**held**", False: "**not held**", None: "**inconclusive**"}[c["held"]]

    lines += ["", "Claims (over seeds, 95% t-intervals, WER and retrieval as fractions; effect = the mean paired "
              "difference, or for a claim against a fixed level the mean itself):", "",
              "| claim | result | n | effect [interval] |", "|---|---|---|---|"]
    for c in rec["claims"]:
        st = "" if c.get("kind") == "check" else \
            f"{c['effect']:.4g} [{', '.join('–' if v is None else f'{v:.4g}' for v in c['interval'])}]"
        lines.append(f"| {c['statement']} | {verdict(c)} | {c.get('n', '')} | {st} |")
    text = README.read_text()
    start, end = f"<!-- table:{NAME} -->", f"<!-- /table:{NAME} -->"
    if start in text and end in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), start + "\n" + "\n".join(lines) + "\n" + end,
                      text, flags=re.S)
        README.write_text(text)


if __name__ == "__main__":
    main()

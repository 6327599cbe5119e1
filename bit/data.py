"""Readers for the real Brain-to-Text '24 (`.mat`) and '25 (hdf5) session files, and the padded arrays the
encoder trains on.

'24: `tx1` threshold crossings and `spikePow` for the 128 area-6v electrodes (area-44 columns 128..255 are
dropped), z-scored per block; raw `tx1` counts are kept as the Poisson-NLL target. '25: `input_features`
(T x 512) already normalised upstream (not re-normalised here).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence

import numpy as np

from bit import phonemes
from core.config import BadInputError

AREA_6V = slice(0, 128)


@dataclasses.dataclass
class Session:
    """One session: per-trial features (T, F), raw counts (T, C) or None, texts, block numbers, phone ids."""

    features: list[np.ndarray]
    counts: list[np.ndarray] | None
    texts: list[str]
    blocks: np.ndarray
    phone_ids: list[np.ndarray]
    name: str = ""

    def __len__(self) -> int:
        return len(self.features)


def _cell_list(value, key: str, path) -> list[np.ndarray]:
    arr = np.asarray(value, dtype=object)
    items = [np.asarray(a, np.float32) for a in arr.reshape(-1)]
    for i, a in enumerate(items):
        if a.ndim != 2 or a.shape[1] != 256:
            raise BadInputError(f"{path}: {key}[{i}] has shape {a.shape}; expected (T, 256) (128 area-6v + 128 "
                                "area-44)")
    return items


def _texts(value) -> list[str]:
    arr = np.asarray(value)
    if arr.dtype == object:
        return [str(np.asarray(s).reshape(-1)[0] if np.asarray(s).size else "").strip() for s in arr.reshape(-1)]
    return [str(s).strip() for s in arr.reshape(-1)] if arr.ndim <= 1 else ["".join(r).strip() for r in arr]


def zscore_per_block(features: Sequence[np.ndarray], blocks: np.ndarray) -> list[np.ndarray]:
    """Subtract each block's channel means and divide by its channel sds (pooled over the block's trials)."""
    out = list(features)
    for b in np.unique(blocks):
        idx = np.flatnonzero(blocks == b)
        cat = np.concatenate([features[i] for i in idx])
        mean, std = cat.mean(0), cat.std(0)
        std = np.where(std > 1e-6, std, 1.0)
        for i in idx:
            out[i] = ((features[i] - mean) / std).astype(np.float32)
    return out


def _labels(text: str, path, i: int, extra: phonemes.Pronunciations | None) -> np.ndarray:
    """Phone ids of a trial's sentence; a word with no pronunciation is an error naming the file (never dropped)."""
    oov = phonemes.oov_words(text, extra)
    if oov:
        raise BadInputError(f"{path}: trial {i} sentence {text!r} has words with no pronunciation {oov}; expected "
                            "cmudict words, or their pronunciations in a file named by data.pronunciations")
    if not phonemes.normalise(text):
        raise BadInputError(f"{path}: trial {i} sentence {text!r} has no words; expected a transcription")
    return phonemes.text_to_ids(text, extra)


def _exists(path: pathlib.Path, what: str) -> None:
    if not path.is_file():
        raise BadInputError(f"{path}: no such file; expected {what}")


def load_b2t24(path: str | pathlib.Path, pronunciations: phonemes.Pronunciations | None = None) -> Session:
    """Read one '24 competition session; z-score [tx1, spikePow] (area 6v) per block."""
    from scipy.io import loadmat

    path = pathlib.Path(path)
    _exists(path, "a Brain-to-Text '24 session .mat")
    try:
        mat = loadmat(path)
    except Exception as e:  # noqa: BLE001 (scipy raises several types)
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadInputError(f"{path}: not a readable MATLAB .mat file ({why}); expected a Brain-to-Text '24 "
                            "session") from e
    need = ("sentenceText", "tx1", "spikePow", "blockIdx")
    missing = [k for k in need if k not in mat]
    if missing:
        raise BadInputError(f"{path}: missing keys {missing}; expected a Brain-to-Text '24 session with {list(need)}")
    tx = _cell_list(mat["tx1"], "tx1", path)
    sbp = _cell_list(mat["spikePow"], "spikePow", path)
    texts = _texts(mat["sentenceText"])
    blocks = np.asarray(mat["blockIdx"]).reshape(-1).astype(int)
    if not len(tx) == len(sbp) == len(texts) == len(blocks):
        raise BadInputError(f"{path}: {len(tx)} tx1 trials, {len(sbp)} spikePow, {len(texts)} sentences, "
                            f"{len(blocks)} blockIdx; expected equal counts")
    for i, (a, b) in enumerate(zip(tx, sbp)):
        if a.shape != b.shape:
            raise BadInputError(f"{path}: trial {i} tx1 {a.shape} vs spikePow {b.shape}; expected equal shapes")
    feats = zscore_per_block([np.concatenate([a[:, AREA_6V], b[:, AREA_6V]], 1) for a, b in zip(tx, sbp)], blocks)
    return Session(feats, [a[:, AREA_6V] for a in tx], texts, blocks,
                   [_labels(t, path, i, pronunciations) for i, t in enumerate(texts)], path.stem)


def load_b2t25(path: str | pathlib.Path, pronunciations: phonemes.Pronunciations | None = None) -> Session:
    """Read one '25 session hdf5 (`trial_*` groups); features are used as released (already normalised). Labels
    are the file's `seq_class_ids` (the official g2p phones); a trial without them is labelled from its text."""
    import h5py

    path = pathlib.Path(path)
    _exists(path, "a Brain-to-Text '25 session hdf5")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise BadInputError(f"{path}: not a readable hdf5 file ({str(e).splitlines()[0]}); expected a "
                            "Brain-to-Text '25 session") from e
    feats, texts, blocks, ids = [], [], [], []
    with f:
        keys = sorted(k for k in f.keys() if k.startswith("trial_"))
        if not keys:
            raise BadInputError(f"{path}: no 'trial_*' groups (found {list(f.keys())[:5]}); expected a "
                                "Brain-to-Text '25 session")
        for k in keys:
            g = f[k]
            if "input_features" not in g:
                raise BadInputError(f"{path}/{k}: no 'input_features'; expected (T, 512) features")
            x = np.asarray(g["input_features"], np.float32)
            if x.ndim != 2 or x.shape[1] != 512:
                raise BadInputError(f"{path}/{k}: input_features of shape {x.shape}; expected (T, 512)")
            feats.append(x)
            attrs = g.attrs
            if "transcription" in g:
                codes = np.asarray(g["transcription"]).reshape(-1)
                text = "".join(chr(int(c)) for c in codes if c > 0)
            else:
                text = str(attrs.get("sentence_label", ""))
            texts.append(text)
            blocks.append(int(attrs.get("block_num", 0)))
            if "seq_class_ids" in g:
                if "seq_len" not in attrs:
                    raise BadInputError(f"{path}/{k}: seq_class_ids without a 'seq_len' attribute; expected both")
                n = int(attrs["seq_len"])
                ids.append(np.asarray(g["seq_class_ids"], np.int32).reshape(-1)[:n])
            else:
                ids.append(_labels(text, f"{path}/{k}", 0, pronunciations))
    return Session(feats, None, texts, np.asarray(blocks), ids, path.stem)


# --- a folder of real sessions ------------------------------------------------------------------------------

# where each release keeps its splits: '24 competitionData/{train,test}/<session>.mat; '25 hdf5_data_final/
# <session>/data_{train,val}.hdf5 (the '25 test split has no transcriptions, so its validation split is the test)
SPLIT_GLOBS = {"b2t24": {"train": "train/*.mat", "test": "test/*.mat"},
               "b2t25": {"train": "*/data_train.hdf5", "test": "*/data_val.hdf5"}}
LOADERS = {"b2t24": load_b2t24, "b2t25": load_b2t25}


def session_name(path: pathlib.Path, layout: str) -> str:
    return path.stem if layout == "b2t24" else path.parent.name


def load_dir(data_dir: str | pathlib.Path, layout: str, pronunciations: phonemes.Pronunciations | None = None
             ) -> dict[str, list[Session]]:
    """Read a folder of real sessions in the release's own layout: {"train": [...], "test": [...]}, each session
    named after its recording day (file stem for '24, folder for '25). Sessions are sorted by name."""
    root = pathlib.Path(data_dir)
    if layout not in SPLIT_GLOBS:
        raise BadInputError(f"data.layout={layout!r}: expected one of {sorted(SPLIT_GLOBS)}")
    globs = SPLIT_GLOBS[layout]
    if not root.is_dir():
        raise BadInputError(f"{root}: no such folder; expected data.data_dir to hold {globs['train']} and "
                            f"{globs['test']} ({layout} layout)")
    out = {}
    for split, pattern in globs.items():
        files = sorted(root.glob(pattern), key=lambda f: session_name(f, layout))
        if not files:
            other = {lay: g[split] for lay, g in SPLIT_GLOBS.items() if lay != layout and any(root.glob(g[split]))}
            hint = f" (found {list(other.values())[0]}: set data.layout={list(other)[0]})" if other else ""
            raise BadInputError(f"{root}: no {pattern} session files{hint}; expected the {layout} release layout "
                                f"({globs['train']}, {globs['test']})")
        out[split] = []
        for f in files:
            sess = LOADERS[layout](f, pronunciations)
            sess.name = session_name(f, layout)
            out[split].append(sess)
    return out


# --- padded arrays -----------------------------------------------------------------------------------------

def pad_trials(sessions: Sequence[Session], session_ids: Sequence[int], *, max_bins: int, num_features: int,
               num_counts: int, patch: int = 5, max_labels: int = 64,
               dataset_ids: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Stack sessions into padded arrays: x (N, T, F), counts (N, T, C), length (N,), session (N,),
    dataset (N,), labels (N, L), label_length (N,). T = max_bins rounded up to a multiple of `patch`."""
    dataset_ids = [0] * len(sessions) if dataset_ids is None else list(dataset_ids)
    dsets = []
    t_pad = -(-max_bins // patch) * patch
    xs, cs, lens, sids, labs, llens = [], [], [], [], [], []
    for s, sid, did in zip(sessions, session_ids, dataset_ids):
        dsets += [did] * len(s)
        for i in range(len(s)):
            f = s.features[i][:t_pad]
            if f.shape[1] > num_features:
                raise BadInputError(f"session {s.name}: {f.shape[1]} features; expected at most {num_features}")
            t = f.shape[0]
            xs.append(np.pad(f, ((0, t_pad - t), (0, num_features - f.shape[1]))))
            c = s.counts[i][:t_pad] if s.counts is not None else np.zeros((t, 0), np.float32)
            cs.append(np.pad(c, ((0, t_pad - t), (0, num_counts - c.shape[1]))))
            lens.append(t)
            sids.append(sid)
            ids = s.phone_ids[i][:max_labels]
            labs.append(np.pad(ids, (0, max_labels - len(ids))))
            llens.append(len(ids))
    return {"x": np.stack(xs).astype(np.float32), "counts": np.stack(cs).astype(np.float32),
            "length": np.asarray(lens, np.int32), "session": np.asarray(sids, np.int32),
            "dataset": np.asarray(dsets, np.int32),
            "labels": np.stack(labs).astype(np.int32), "label_length": np.asarray(llens, np.int32)}
